#pragma once
/// \file
/// The transport calls the primitives make (post_send, recv, recv_stream, flush_sends,
/// progress_sends): each routes to the link that carries the peer's data (`host_mesh::links`,
/// transport/links/) and moves the frame through the link calls of link_path.ipp.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

/// Queues [src, src+n) for `peer` and hands over what its data link takes now.
inline void host_mesh::post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
  check_usable();
  posted_bytes_ += n;
  if (id.tag < 0x80000000u) cur_op_ = id.seq;
  check_peer(peer);
  const frame_header h = make_header(id, n);
  with_link(peer, [&]<class L>(L& l) {
    // Nothing queued before it: a link that can take the whole frame now (a ring with room)
    // does, without a trip through the queue.
    if (l.post_direct(h, src, n)) return;
    l.post(h, src, n);
    ++queued_;
    if constexpr (link_traits<L>::wait == link_wait::doorbell) ++bell_queued_;
    if (l.q.size() == 1) pump_link(peer, l);
  });
}

/// Receives the next message from `peer` into dst (header checked against id and n).
inline void host_mesh::recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
  check_usable();
  if (id.tag < 0x80000000u) cur_op_ = id.seq;
  check_peer(peer);
  with_link(peer, [&](auto& l) {
    frame_header h;
    const std::size_t got = take_header(peer, l, h, dst, n, dl, id);  // payload bytes that came with it
    check(h, id, n, peer, dst, got);
    take_payload(peer, l, dst + got, n - got, 1, nullptr, dl, id);
  });
}

/// Receives the next message from `peer`, handing `consume` pieces whose sizes are multiples of
/// `align`: where they lie in the link when it reads in place (a shared-memory ring: the
/// reduction reads the peer's bytes there), else through the staging buffer.
inline void host_mesh::recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
  check_usable();
  if (id.tag < 0x80000000u) cur_op_ = id.seq;
  check_peer(peer);
  if (align == 0 || align > opt_.staging_bytes) align = 1;
  with_link(peer, [&]<class L>(L& l) {
    if constexpr (link_traits<L>::reads_in_place) {
      frame_header h;
      take_header(peer, l, h, nullptr, 0, dl, id);
      check(h, id, n, peer, nullptr, 0);
      if (link_traits<L>::payload_align % align != 0) align = 1;  // pieces must not straddle the link's wrap
      take_payload(peer, l, nullptr, n, align, &consume, dl, id);
    } else {
      recv_staged(peer, l, id, n, align, consume, dl);
    }
  });
}

/// Writes out every queued send (the kernel then owns the bytes).
inline void host_mesh::flush_sends(deadline dl) {
  check_usable();
  while (queued_ > 0) wait_progress(-1, dl, message_id{});
}

/// Hands queued sends to every data link as far as they take them now, without waiting: a
/// schedule that computes between messages calls it so that its links keep moving (see
/// `send_progress_transport`).
inline void host_mesh::progress_sends() {
  check_usable();
  if (queued_ == 0) return;
  pump_descriptors();
  pump_doorbells();
}

}  // namespace gsync::transport
