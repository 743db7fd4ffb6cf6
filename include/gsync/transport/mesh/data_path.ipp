#pragma once
/// \file
/// The transport calls the primitives make (post_send, recv, recv_stream, flush_sends,
/// progress_sends): each routes to the link that carries the peer's data, its shared-memory link
/// (transport/links/shm_link.hpp) or its TCP link (transport/links/tcp_link.hpp).
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

/// Queues [src, src+n) for `peer` and writes what the kernel accepts now.
inline void host_mesh::post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
  check_usable();
  posted_bytes_ += n;
  if (id.tag < 0x80000000u) cur_op_ = id.seq;
  check_peer(peer);
  auto& c = peers_[peer];
  const frame_header h = make_header(id, n);
  if (c.via_shm) {
    // Nothing queued before it: a message whose payload its stamp covers goes into the ring now
    // if there is room, without a trip through the queue.
    if (c.shm.post_direct(h, src, n)) return;
    c.shm.post(h, src, n);
    ++queued_;
    ++shm_queued_;
    if (c.shm.q.size() == 1) pump_shm(peer);
    return;
  }
  c.tcp.post(h, src, n);
  ++queued_;
  if (c.tcp.q.size() == 1) pump(peer);
}

/// Receives the next message from `peer` into dst (header checked against id and n).
inline void host_mesh::recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
  check_usable();
  if (id.tag < 0x80000000u) cur_op_ = id.seq;
  check_peer(peer);
  frame_header h;
  if (peers_[peer].via_shm) {
    shm_read_header(peer, h, dl, id);
    check(h, id, n, peer, nullptr, 0);
    shm_read_payload(peer, dst, n, 1, nullptr, dl, id);
    return;
  }
  const std::size_t got = read_header(peer, h, dst, n, dl, id);
  check(h, id, n, peer, dst, got);
  read_exact(peer, dst + got, n - got, dl, id);
}

/// Receives the next message from `peer` through the staging buffer, handing `consume` pieces
/// whose sizes are multiples of `align`.
inline void host_mesh::recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
  check_usable();
  if (id.tag < 0x80000000u) cur_op_ = id.seq;
  check_peer(peer);
  if (align == 0 || align > opt_.staging_bytes) align = 1;
  frame_header h;
  if (peers_[peer].via_shm) {  // the reduction reads the peer's bytes where they lie, in the ring
    shm_read_header(peer, h, dl, id);
    check(h, id, n, peer, nullptr, 0);
    if (8 % align != 0) align = 1;  // payloads start 8-byte aligned in the ring (shm.hpp)
    shm_read_payload(peer, nullptr, n, align, &consume, dl, id);
    return;
  }
  const std::size_t cap = opt_.staging_bytes - opt_.staging_bytes % align;
  std::size_t have = read_header(peer, h, staging_.get(), std::min(cap, n), dl, id);
  check(h, id, n, peer, staging_.get(), have);
  std::size_t remaining = n - have;
  for (bool first = true; first || remaining > 0; first = false) {
    if (!first || have == 0) {
      std::size_t got = read_some(peer, staging_.get() + have, std::min(cap - have, remaining), dl, id);
      have += got;
      remaining -= got;
    }
    const std::size_t ready = have - have % align;
    if (ready == 0) continue;
    consume(std::span<const std::byte>(staging_.get(), ready));
    if (have > ready) std::memmove(staging_.get(), staging_.get() + ready, have - ready);
    have -= ready;
  }
}

/// Writes out every queued send (the kernel then owns the bytes).
inline void host_mesh::flush_sends(deadline dl) {
  check_usable();
  while (queued_ > 0) wait_progress(-1, dl, message_id{});
}

/// Hands queued sends to the kernel (sockets) and to the peers' rings (shared memory) as far as
/// they take them now, without waiting: a schedule that computes between messages calls it so
/// that its links keep moving (see `send_progress_transport`).
inline void host_mesh::progress_sends() {
  check_usable();
  if (queued_ == 0) return;
  pump_sockets();
  pump_all_shm();
}

}  // namespace gsync::transport
