#pragma once
/// \file
/// Shared-memory data path: writing messages into a same-host peer's ring and reading them out of
/// this rank's (layout and stamps: transport/shm.hpp).
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Copies as much of `peer`'s queue into its ring as there is room for. Returns true if any
// byte moved. Messages start on 64-byte boundaries: [stamp][frame header][payload]; the stamp
// goes in once the header and the payload's stamped bytes are written (shm.hpp).
inline bool host_mesh::pump_shm(int peer) {
  auto& c = peers_[peer];
  const std::uint64_t cap = c.out_cap;
  std::uint64_t head = c.out->head.load(std::memory_order_relaxed);  // only this rank writes it
  bool moved = false, unpublished = false;
  auto publish = [&] {  // one release store and one wake-up check per piece, header and payload together
    shm_publish(c, head);
    unpublished = false;
  };
  while (!c.q.empty()) {
    auto& op = c.q.front();
    if (op.done == 0) {
      const std::size_t first = shm_begin(c, head, op.h, op.p, op.n);
      if (first == SIZE_MAX) break;
      op.done = sizeof(frame_header) + first;
      moved = unpublished = true;
    }
    while (op.done < sizeof(frame_header) + op.n) {
      if (!shm_room(c, head, 1)) break;
      const std::size_t off = op.done - sizeof(frame_header);
      const std::uint64_t pos = head % cap;
      const std::size_t k = static_cast<std::size_t>(
          std::min<std::uint64_t>({cap - (head - c.out_tail), cap - pos, op.n - off, shm_chunk}));
      std::memcpy(c.out_data + pos, op.p + off, k);
      head += k;
      op.done += k;
      moved = true;
      publish();
    }
    if (unpublished) publish();
    if (op.done < sizeof(frame_header) + op.n) break;
    c.q.pop_front();
    --queued_;
    --shm_queued_;
  }
  return moved;
}

// True when `c`'s ring has room for `need` more bytes at `head`. The consumer's tail is used
// as last read: it only grows, so it errs on the safe side, and rereading it (a cache line the
// consumer writes after every message) only when it shows too little room saves a cache-line
// transfer per message.
inline bool host_mesh::shm_room(peer_conn& c, std::uint64_t head, std::uint64_t need) {
  if (head + need - c.out_tail <= c.out_cap) return true;
  c.out_tail = c.out->tail.load(std::memory_order_acquire);
  return head + need - c.out_tail <= c.out_cap;
}

// Starts message (h, p, n) in `c`'s ring at the first 64-byte boundary from `head`, if there is
// room for its header and stamped payload bytes: writes them, then the stamp, and moves `head`
// past them. Returns the payload bytes written, or SIZE_MAX (nothing written) without room.
inline std::size_t host_mesh::shm_begin(peer_conn& c, std::uint64_t& head, const frame_header& h, const std::byte* p, std::size_t n) {
  const std::uint64_t start = shm::align64(head);
  const std::size_t first = shm::stamped_payload(start, n, c.out_cap);
  if (!shm_room(c, head, start - head + shm::header_slot + first)) return SIZE_MAX;
  std::byte* at = c.out_data + start % c.out_cap;
  std::memcpy(at + shm::header_offset, &h, sizeof h);
  if (first) std::memcpy(at + shm::header_slot, p, first);
  shm::put_stamp(at, shm::stamp_of(start, c.out_key));
  head = start + shm::header_slot + first;
  return first;
}

// Publishes `c`'s head (release) and wakes the consumer if it sleeps.
inline void host_mesh::shm_publish(peer_conn& c, std::uint64_t head) {
  c.out->head.store(head, std::memory_order_release);
  shm::notify(*c.peer_bell, shm_light_);
}

inline bool host_mesh::pump_all_shm() {
  bool moved = false;
  if (shm_queued_ == 0) return false;
  for (int p : shm_peers_)
    if (!peers_[p].q.empty()) moved |= pump_shm(p);
  return moved;
}

// True once `peer`'s ring holds what the pending read needs: the next message's stamp (a wait
// for a header), or head >= need_head (a wait for more payload).
inline bool host_mesh::shm_ready(int peer) const {
  const auto& c = peers_[peer];
  if (c.need_stamp) return shm::get_stamp(c.in_data + c.stamp_at) == c.need_stamp;
  return c.in->head.load(std::memory_order_acquire) >= c.need_head;
}

// Reads the next message's header, waiting for its stamp (the stamped payload bytes are then
// known to be there too). The tail is published with the payload's first piece (or at its end,
// for an empty payload): one store and one wake-up check per small message.
inline void host_mesh::shm_read_header(int peer, frame_header& h, deadline dl, message_id id) {
  static_assert(sizeof(frame_header) == shm::header_slot - shm::header_offset);
  auto& c = peers_[peer];
  const std::uint64_t start = shm::align64(c.in_pos);
  c.stamp_at = start % c.in_cap;
  c.need_stamp = shm::stamp_of(start, c.in_key);
  while (!shm_ready(peer)) wait_progress(peer, dl, id);
  c.need_stamp = 0;
  std::memcpy(&h, c.in_data + c.stamp_at + shm::header_offset, sizeof h);
  c.in_pos = start + shm::header_slot;
  c.in_known = c.in_pos + shm::stamped_payload(start, static_cast<std::size_t>(h.bytes), c.in_cap);
}

// Publishes what this rank has read from `peer`'s ring, waking the peer if it waits for room.
inline void host_mesh::shm_release(peer_conn& c) {
  c.in->tail.store(c.in_pos, std::memory_order_release);
  shm::notify(*c.peer_bell, shm_light_);
}

// Reads n payload bytes: copied to dst, or handed to `consume` in pieces that are multiples
// of `align` (which divides 64, so no element straddles the ring's end).
inline void host_mesh::shm_read_payload(int peer, std::byte* dst, std::size_t n, std::size_t align,
                        detail::function_ref<void(std::span<const std::byte>)>* consume, deadline dl, message_id id) {
  auto& c = peers_[peer];
  std::size_t got = 0;
  while (got < n) {
    const std::uint64_t tail = c.in_pos;
    if (c.in_known < tail + (n - got)) c.in_known = std::max(c.in_known, c.in->head.load(std::memory_order_acquire));
    const std::uint64_t avail = c.in_known - tail;
    const std::uint64_t pos = tail % c.in_cap;
    std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>({avail, c.in_cap - pos, n - got}));
    if (consume) k -= k % align;
    if (k == 0) {
      if (c.in->tail.load(std::memory_order_relaxed) != tail) shm_release(c);  // the header's bytes: room for the peer
      c.need_head = tail + std::min<std::size_t>(align, n - got);
      wait_progress(peer, dl, id);
      continue;
    }
    if (consume) (*consume)(std::span<const std::byte>(c.in_data + pos, k));
    else std::memcpy(dst + got, c.in_data + pos, k);
    got += k;
    c.in_pos = tail + k;
    shm_release(c);
  }
  if (c.in->tail.load(std::memory_order_relaxed) != c.in_pos) shm_release(c);  // an empty payload
}

// Progress without blocking on shared memory: pumps queued sends, reports whether the pending
// read from `in_peer` (if a shared-memory peer) can go on.
inline bool host_mesh::shm_progress(int in_peer) {
  bool p = pump_all_shm();
  if (in_peer >= 0 && peers_[in_peer].shm && shm_ready(in_peer)) p = true;
  return p;
}

}  // namespace gsync::transport
