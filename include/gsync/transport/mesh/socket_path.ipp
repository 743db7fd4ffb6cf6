#pragma once
/// \file
/// Socket data path: queued sends written with sendmsg, headers and payloads read with recvmsg/recv.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// pump() for every TCP peer with queued sends.
inline void host_mesh::pump_sockets() {
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].shm && !peers_[p].q.empty()) pump(p);
}

// Writes as much of the peer's queue as the kernel takes now; several queued messages go out in
// one sendmsg. Returns when the queue is empty or the socket would block.
inline void host_mesh::pump(int peer) {
  auto& c = peers_[peer];
  while (!c.q.empty()) {
    iovec iov[32];
    int k = 0;
    for (auto it = c.q.begin(); it != c.q.end() && k + 2 <= 32; ++it) {
      std::size_t d = it->done;
      if (d < sizeof(frame_header)) {
        iov[k++] = {reinterpret_cast<char*>(&it->h) + d, sizeof(frame_header) - d};
        d = 0;
      } else {
        d -= sizeof(frame_header);
      }
      if (it->n > d) iov[k++] = {const_cast<std::byte*>(it->p) + d, it->n - d};
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<std::size_t>(k);
    ssize_t w = ::sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while sending (" +
                     detail::errno_text(errno) + "): the peer exited or crashed");
    }
    auto left = static_cast<std::size_t>(w);
    while (left > 0) {
      auto& op = c.q.front();
      const std::size_t need = sizeof(frame_header) + op.n - op.done;
      const std::size_t take = std::min(need, left);
      op.done += take;
      left -= take;
      if (op.done == sizeof(frame_header) + op.n) {
        c.q.pop_front();
        --queued_;
      } else {
        break;
      }
    }
  }
}

// Reads the next frame header and, in the same system call when available, up to `n` payload
// bytes into dst (never more than the expected message, so a well-formed stream is never
// over-read; a malformed one fails the header check and poisons the transport anyway).
// Returns the payload bytes read.
inline std::size_t host_mesh::read_header(int peer, frame_header& h, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  std::size_t got = 0;
  auto* hb = reinterpret_cast<char*>(&h);
  while (got < sizeof h) {
    iovec iov[2] = {{hb + got, sizeof h - got}, {dst, n}};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = n ? 2 : 1;
    ssize_t r = ::recvmsg(peers_[peer].fd, &mh, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) lost_while_receiving(peer, id, 0);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
    wait_progress(peer, dl, id, n);
  }
  return got - sizeof h;
}

[[noreturn]] inline void host_mesh::lost_while_receiving(int peer, message_id id, int err) {
  if (err == 0)
    lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                   " closed its connection (it exited, crashed or failed) during op #" + std::to_string(id.seq), peer);
  lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while receiving (" +
                 detail::errno_text(err) + ")");
}

// Reads up to n bytes from peer, waiting (and progressing sends) until at least one arrives.
inline std::size_t host_mesh::read_some(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  if (n == 0) return 0;
  for (;;) {
    ssize_t r = ::recv(peers_[peer].fd, dst, n, MSG_DONTWAIT);
    if (r > 0) return static_cast<std::size_t>(r);
    if (r == 0) lost_while_receiving(peer, id, 0);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
    wait_progress(peer, dl, id, n);
  }
}

inline void host_mesh::read_exact(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  while (n > 0) {
    std::size_t got = read_some(peer, dst, n, dl, id);
    dst += got;
    n -= got;
  }
}

}  // namespace gsync::transport
