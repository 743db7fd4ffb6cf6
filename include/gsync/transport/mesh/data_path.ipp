#pragma once
/// \file
/// The transport calls the primitives make (post_send, recv, recv_stream, flush_sends,
/// progress_sends): each routes to the link that carries the peer's data (its port,
/// transport/links/link_port.hpp) and moves the frame through the link calls of link_path.ipp.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

/// Queues [src, src+n) for `peer` and hands over what its data link takes now.
inline void host_mesh::post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
  call_lock g(shared_);
  check_usable();
  posted_bytes_ += n;
  if (!is_p2p_tag(id.tag) && id.fp.comm == 0) cur_op_ = id.seq;
  check_peer(peer);
  // A lower rank not connected yet is dialed now; frames for a higher one wait in its queue
  // until it dials this rank (connect.ipp).
  if (unconnected(peer) && peer < rank_) dial(peer, std::chrono::steady_clock::now() + dial_timeout_);
  const frame_header h = make_header(id, n);
  link_port& l = data_link(peer);
  const auto post = [&](const frame_header& fh, const std::byte* p, std::size_t k) {
    // Nothing queued before it: a link that can take the whole frame now (a ring with room)
    // does, without a trip through the queue.
    if (l.post_direct(fh, p, k)) return;
    l.post(fh, p, k);
    ++queued_;
    if (l.by_doorbell()) ++bell_queued_;
    if (l.unsent() == 1) pump_link(peer, l);  // (frames before it may only wait for their completions)
  };
  post(h, src, n);
  if (opt_.checksum) [[unlikely]] {  // GSYNC_CHECKSUM: the payload's CRC32C follows in a frame of its own
    frame_header ck = h;
    ck.magic = check_magic;
    ck.bytes = 0;
    ck.fp.count = detail::crc32c(0, src, n);
    post(ck, nullptr, 0);
  }
  // Shared mode: a thread blocked in poll(2) does not watch this socket yet; wake it.
  if (!l.by_doorbell() && !l.q.empty()) waiter_.wake_pollers();
}

/// Receives the next message from `peer` into dst (header checked against id and n).
inline void host_mesh::recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
  call_lock g(shared_);
  check_usable();
  if (!is_p2p_tag(id.tag) && id.fp.comm == 0) cur_op_ = id.seq;
  check_peer(peer);
  shared_mode::read_claim claim;
  if (g.locked() && from_inbox(peer, id, n, dl, claim, [&](const std::byte* p) { if (n) std::memcpy(dst, p, n); })) return;
  if (unconnected(peer)) ensure_connected(peer, dl, id);
  link_port& l = data_link(peer);
  frame_header h;
  // Shared mode: no payload byte is read with the header (the frame may be another communicator's).
  const std::size_t got = take_header(peer, l, h, dst, g.locked() ? 0 : n, dl, id);  // payload bytes that came with it
  check(h, id, n, peer, dst, got);
  take_payload(peer, l, dst + got, n - got, 1, nullptr, dl, id);
  if (opt_.checksum) [[unlikely]] verify_checksum(peer, l, h, detail::crc32c(0, dst, n), dl, id);
}

/// Receives the next message from `peer`, handing `consume` pieces whose sizes are multiples of
/// `align`: where they lie in the link when it reads in place (a shared-memory ring: the
/// reduction reads the peer's bytes there), else through the staging buffer.
inline void host_mesh::recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl, std::byte* staging) {
  call_lock g(shared_);
  check_usable();
  if (!is_p2p_tag(id.tag) && id.fp.comm == 0) cur_op_ = id.seq;
  check_peer(peer);
  if (align == 0 || align > opt_.staging_bytes) align = 1;
  shared_mode::read_claim claim;
  // Shared mode: the reduction runs with the endpoint unlocked (this thread alone reads the
  // peer's stream, so the piece it reads stays put).
  auto outside = [&](std::span<const std::byte> piece) { shared_.unlocked([&] { consume(piece); }); };
  detail::function_ref<void(std::span<const std::byte>)> use = consume;
  if (g.locked()) {
    if (from_inbox(peer, id, n, dl, claim, [&](const std::byte* p) { outside(std::span<const std::byte>(p, n)); })) return;
    use = outside;
  }
  // GSYNC_CHECKSUM: the CRC32C of the pieces as the reduction takes them (while they are in cache).
  std::uint32_t crc = 0;
  const detail::function_ref<void(std::span<const std::byte>)> unsummed = use;
  auto summed = [&](std::span<const std::byte> piece) {
    crc = detail::crc32c(crc, piece.data(), piece.size());
    unsummed(piece);
  };
  if (opt_.checksum) [[unlikely]] use = summed;
  if (unconnected(peer)) ensure_connected(peer, dl, id);
  link_port& l = data_link(peer);
  if (l.reads_in_place) {
    frame_header h;
    take_header(peer, l, h, nullptr, 0, dl, id);
    check(h, id, n, peer, nullptr, 0);
    if (l.payload_align % align != 0) align = 1;  // pieces must not straddle the link's wrap
    take_payload(peer, l, nullptr, n, align, &use, dl, id);
    if (opt_.checksum) [[unlikely]] verify_checksum(peer, l, h, crc, dl, id);
  } else {
    const frame_header h = recv_staged(peer, l, id, n, align, use, dl, staging ? staging : staging_.get());
    if (opt_.checksum) [[unlikely]] verify_checksum(peer, l, h, crc, dl, id);
  }
}

/// Writes out every queued send of communicator `comm` (the kernel then owns the bytes).
inline void host_mesh::flush_sends(deadline dl, std::uint64_t comm) {
  call_lock g(shared_);
  check_usable();
  if (!g.locked()) {
    while (queued_ > 0) wait_progress(-1, dl, message_id{});
    return;
  }
  // Shared mode: only this communicator's frames count (another's may wait for a peer that is
  // busy elsewhere).
  const auto queued_of_comm = [&] {
    if (queued_ == 0) return false;
    for (auto& c : peers_)
      for (const send_op& op : c.q())
        if (op.h.fp.comm == comm) return true;
    return false;
  };
  message_id id{};
  id.fp.comm = comm;
  while (queued_of_comm()) wait_progress(-1, dl, id);
}

/// Hands queued sends to every data link as far as they take them now, without waiting: a
/// schedule that computes between messages calls it so that its links keep moving (see
/// `send_progress_transport`).
inline void host_mesh::progress_sends() {
  call_lock g(shared_);
  check_usable();
  if (queued_ == 0) return;
  pump_descriptors();
  pump_doorbells();
}

// Shared mode: delivers to `deliver(bytes)` a frame of id's communicator that another reader set
// aside in `peer`'s inbox (checked against id and n) and returns true, or waits until this thread
// may read the peer's stream, hands it to `claim` and returns false.
template <class F>
bool host_mesh::from_inbox(int peer, message_id id, std::size_t n, deadline dl, shared_mode::read_claim& claim, F&& deliver) {
  const long at = shared_.claim(peer, id.fp.comm, claim, [&] {
    if (fs_.aborted()) fail(errc::aborted, "");
    check_usable();
    if (std::chrono::steady_clock::now() >= dl) timed_out(peer, id);
  });
  if (at < 0) return false;
  const stashed_frame s = shared_.take(peer, at);
  check(s.h, id, n, peer, s.data.data(), s.data.size());
  deliver(s.data.data());
  return true;
}

// Shared mode: `h`, just read off `peer`'s stream, belongs to another communicator: its payload
// (the `got` bytes read with the header, then the rest) is set aside whole in the peer's inbox.
inline void host_mesh::set_aside(int peer, link_port& l, const frame_header& h, const std::byte* got_bytes, std::size_t got, deadline dl,
                                 message_id id) {
  if (got > h.bytes || h.bytes > (std::uint64_t{1} << 42))
    fail(errc::mismatch, "rank " + std::to_string(rank_) + ": a frame of " + comm_label(h.fp.comm) + " from rank " +
                             std::to_string(peer) + " (" + std::to_string(h.bytes) + " bytes) came while " +
                             describe_message(id.tag, id.seq, id.fp) + " in " + comm_label(id.fp.comm) +
                             " was read with its header: the communicator was created on this rank after its peers used it?");
  stashed_frame s{h, std::vector<std::byte>(static_cast<std::size_t>(h.bytes))};
  if (got) std::memcpy(s.data.data(), got_bytes, got);
  take_payload(peer, l, s.data.data() + got, s.data.size() - got, 1, nullptr, dl, id);
  if (opt_.checksum) [[unlikely]] verify_checksum(peer, l, h, detail::crc32c(0, s.data.data(), s.data.size()), dl, id);
  shared_.stash(peer, std::move(s));
}

inline void host_mesh::forget_comm(std::uint64_t comm) {
  call_lock g(shared_);
  shared_.forget(comm);
}

}  // namespace gsync::transport
