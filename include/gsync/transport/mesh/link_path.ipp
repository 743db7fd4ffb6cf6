#pragma once
/// \file
/// Moving frames over a peer's data link, written once for every link type through its port
/// (transport/links/link_port.hpp: the `link` concept's calls): pumping queued frames, taking a
/// frame's header and payload, and waiting through the progress loop (progress.ipp) where the link
/// has nothing yet. What differs between link types comes from their traits, which the port
/// carries: how they are waited for (`wait`), whether a reduction reads their payloads in place
/// (`reads_in_place`).
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Hands as much of `peer`'s queue to its link `l` as the medium takes now. Returns true if any
// byte moved or a frame completed; a lost link fails the transport.
inline bool host_mesh::pump_link(int peer, link_port& l) {
  std::size_t done = 0;
  const link_io io = l.pump(done);
  queued_ -= done;
  if (l.by_doorbell()) bell_queued_ -= done;
  if (io.err) [[unlikely]]
    lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while sending (" +
                   (io.err == link_io::closed ? std::string("closed") : io.why ? std::string(io.why) : detail::errno_text(io.err)) +
                   "): the peer exited or crashed");
  return io.bytes != 0 || done != 0;  // (a zero-copy frame completes without moving a byte)
}

inline bool host_mesh::pump_peer(int peer) {
  return pump_link(peer, data_link(peer));
}

// Events from outside the data paths came on `peer`'s link's event descriptor (an RDMA device's
// asynchronous events): every link on that descriptor reads them; the first one lost fails.
inline void host_mesh::take_link_events(int peer) {
  const int fd = data_link(peer).event_fd();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !peers_[p].data || peers_[p].data->event_fd() != fd) continue;
    const link_io io = peers_[p].data->take_events();
    if (io.err) [[unlikely]]
      lost(p, "rank " + std::to_string(rank_) + ": link to rank " + std::to_string(p) + " lost (" +
                  (io.why ? std::string(io.why) : detail::errno_text(io.err)) + ")", p);
  }
}

// What keeps `bytes` registered with each device that a data link registers memory with (the
// links on one device give the same one: it is kept once).
inline std::vector<std::shared_ptr<const registration_hold>> host_mesh::register_memory(std::span<const std::byte> bytes) {
  call_lock g(shared_);
  check_usable();
  std::vector<std::shared_ptr<const registration_hold>> holds;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !peers_[p].data) continue;
    if (auto h = peers_[p].data->register_memory(bytes); h && std::find(holds.begin(), holds.end(), h) == holds.end())
      holds.push_back(std::move(h));
  }
  return holds;
}

// pump_peer() for every peer waited for by descriptor with queued sends.
inline void host_mesh::pump_descriptors() {
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].by_doorbell() && !peers_[p].q().empty()) pump_peer(p);
}

// pump_peer() for every peer waited for by doorbell with queued sends; true if any byte moved.
inline bool host_mesh::pump_doorbells() {
  bool moved = false;
  if (bell_queued_ == 0) return false;
  for (int p : bell_peers_)
    if (!peers_[p].q().empty()) moved |= pump_peer(p);
  return moved;
}

// True once a doorbell peer's link holds what the pending read from it needs.
inline bool host_mesh::bell_ready(int peer) { return data_link(peer).ready(); }

// Progress without blocking on the doorbell links: pumps their queued sends, reports whether the
// pending read from `in_peer` (if a doorbell peer) can go on.
inline bool host_mesh::bell_progress(int in_peer) {
  bool p = pump_doorbells();
  if (in_peer >= 0 && peers_[in_peer].by_doorbell() && bell_ready(in_peer)) p = true;
  return p;
}

// The descriptor poll(2) watches for `peer`'s data link (-1 for a doorbell link).
inline int host_mesh::data_fd(int peer) { return data_link(peer).fd(); }

// A doorbell peer's `failed` word (0 while it runs, and for other peers).
inline std::uint32_t host_mesh::bell_failed(int peer) { return data_link(peer).peer_failed(); }

// Takes the next frame's header from `peer`, waiting until it is there; payload bytes that came
// with it (up to `n`, into dst) are returned.
// A frame of another communicator sharing the link is set aside for its owner (see call_lock).
inline std::size_t host_mesh::take_header(int peer, link_port& l, frame_header& h, std::byte* dst, std::size_t n, deadline dl,
                                          message_id id) {
  port_waiter w(*this, peer, dl, id);
  return l.take_header(w, h, dst, n, id.fp.comm);
}

// Takes n payload bytes from `peer`: copied to dst, or (a link that reads in place) handed to
// `consume` in pieces that are multiples of `align`; then ends the frame.
inline void host_mesh::take_payload(int peer, link_port& l, std::byte* dst, std::size_t n, std::size_t align,
                                    detail::function_ref<void(std::span<const std::byte>)>* consume, deadline dl, message_id id) {
  port_waiter w(*this, peer, dl, id);
  l.take_payload(w, dst, n, align, consume);
}

// Takes up to n payload bytes from `peer` into dst, waiting until at least one is there.
inline std::size_t host_mesh::take_some(int peer, link_port& l, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  if (n == 0) return 0;
  for (;;) {
    const link_io io = l.try_payload(dst, n, 1, nullptr);
    if (io.bytes) return io.bytes;
    if (io.err) lost_while_receiving(peer, id, io.err, io.why);
    wait_progress(peer, dl, id, n);
  }
}

// recv_stream over a link that cannot be read in place: through the staging buffer, handing
// `consume` what has arrived in multiples of `align` while the rest is still on its way.
inline frame_header host_mesh::recv_staged(int peer, link_port& l, message_id id, std::size_t n, std::size_t align,
                                           detail::function_ref<void(std::span<const std::byte>)>& consume, deadline dl, std::byte* stage) {
  frame_header h;
  const std::size_t cap = opt_.staging_bytes - opt_.staging_bytes % align;
  // Shared mode: no payload byte is read with the header (the frame may be another communicator's).
  std::size_t have = take_header(peer, l, h, stage, shared_.held() ? 0 : std::min(cap, n), dl, id);
  check(h, id, n, peer, stage, have);
  std::size_t remaining = n - have;
  for (bool first = true; first || remaining > 0; first = false) {
    if (!first || have == 0) {
      std::size_t got = take_some(peer, l, stage + have, std::min(cap - have, remaining), dl, id);
      have += got;
      remaining -= got;
    }
    const std::size_t ready = have - have % align;
    if (ready == 0) continue;
    consume(std::span<const std::byte>(stage, ready));
    if (have > ready) std::memmove(stage, stage + ready, have - ready);
    have -= ready;
  }
  l.end_read();
  return h;
}

// GSYNC_CHECKSUM: takes the checksum frame that follows data frame `data` (whose payload had
// CRC32C `crc` here) and fails with errc::corrupted, naming the link, when they differ; a frame
// other than that checksum means the ranks' settings differ (or a failure notice came).
inline void host_mesh::verify_checksum(int peer, link_port& l, const frame_header& data, std::uint32_t crc, deadline dl, message_id id) {
  frame_header ck;
  take_header(peer, l, ck, nullptr, 0, dl, id);
  if (ck.magic != check_magic || ck.tag != data.tag || ck.seq != data.seq || ck.fp.comm != data.fp.comm || ck.bytes != 0) [[unlikely]] {
    if (ck.magic == notice_magic) on_notice(peer, ck, nullptr, 0, id);
    fail(errc::mismatch, "rank " + std::to_string(rank_) + " expected from rank " + std::to_string(peer) + " the checksum of its message of " +
                             describe_message(data.tag, data.seq, data.fp) + " but received " +
                             (ck.magic == frame_magic ? "the next message: rank " + std::to_string(peer) + " runs without GSYNC_CHECKSUM=1 and this rank with it (set it alike on every rank)"
                                                      : std::string("bytes that are not a checksum frame")));
  }
  l.end_read();  // no payload
  if (static_cast<std::uint32_t>(ck.fp.count) == crc && (ck.fp.count >> 32) == 0) [[likely]] return;
  char want[16], got[16];
  std::snprintf(want, sizeof want, "%08x", static_cast<unsigned>(ck.fp.count));
  std::snprintf(got, sizeof got, "%08x", static_cast<unsigned>(crc));
  fail(errc::corrupted, "rank " + std::to_string(rank_) + ": the " + std::to_string(data.bytes) + "-byte payload of " +
                            describe_message(data.tag, data.seq, data.fp) + " from rank " + std::to_string(peer) + " failed its checksum (CRC32C " +
                            got + " received, " + want + " sent) on the " + std::string(l.name) +
                            " link " + records_.where(peer) + " -> " + records_.where(rank_) + ": the data was altered on its way");
}

[[noreturn]] inline void host_mesh::lost_while_receiving(int peer, message_id id, int err, const char* why) {
  if (err == link_io::closed)
    lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                   " closed its connection (it exited, crashed or failed) during " + gsync::detail::op_label(id.seq), peer);
  lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while receiving (" +
                 (why ? std::string(why) : detail::errno_text(err)) + ")");
}

}  // namespace gsync::transport
