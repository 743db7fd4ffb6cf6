#pragma once
/// \file
/// Shared-memory data path of the mesh: moving queued frames into same-host peers' rings and
/// reading frames out of this rank's, waiting through the progress loop where a link has nothing
/// yet. The ring operations themselves are the shared-memory link's (transport/links/shm_link.hpp).
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Copies as much of `peer`'s queue into its ring as there is room for. Returns true if any
// byte moved.
inline bool host_mesh::pump_shm(int peer) {
  std::size_t done = 0;
  const bool moved = peers_[peer].shm.pump(done);
  queued_ -= done;
  shm_queued_ -= done;
  return moved;
}

inline bool host_mesh::pump_all_shm() {
  bool moved = false;
  if (shm_queued_ == 0) return false;
  for (int p : shm_peers_)
    if (!peers_[p].shm.q.empty()) moved |= pump_shm(p);
  return moved;
}

// True once `peer`'s ring holds what the pending read needs (shm_link::ready).
inline bool host_mesh::shm_ready(int peer) const { return peers_[peer].shm.ready(); }

// Reads the next message's header, waiting for its stamp.
inline void host_mesh::shm_read_header(int peer, frame_header& h, deadline dl, message_id id) {
  auto& l = peers_[peer].shm;
  l.expect_header();
  while (!l.ready()) wait_progress(peer, dl, id);
  l.take_header(h);
}

// Reads n payload bytes: copied to dst, or handed to `consume` in pieces that are multiples
// of `align` (which divides 64, so no element straddles the ring's end).
inline void host_mesh::shm_read_payload(int peer, std::byte* dst, std::size_t n, std::size_t align,
                        detail::function_ref<void(std::span<const std::byte>)>* consume, deadline dl, message_id id) {
  auto& l = peers_[peer].shm;
  std::size_t got = 0;
  while (got < n) {
    const std::size_t k = l.read_some(consume ? nullptr : dst + got, n - got, align, consume);
    if (k == 0) {
      wait_progress(peer, dl, id);
      continue;
    }
    got += k;
  }
  l.end_read();
}

// Progress without blocking on shared memory: pumps queued sends, reports whether the pending
// read from `in_peer` (if a shared-memory peer) can go on.
inline bool host_mesh::shm_progress(int in_peer) {
  bool p = pump_all_shm();
  if (in_peer >= 0 && peers_[in_peer].via_shm && shm_ready(in_peer)) p = true;
  return p;
}

}  // namespace gsync::transport
