#pragma once
/// \file
/// The TCP link type: one connection between two ranks, on any hosts. It queues frames and
/// writes them without blocking (several per sendmsg), reads headers and payloads without
/// blocking, and tells whether the peer has closed its end. Waiting, routing and the failure
/// protocol are the mesh's (transport/mesh/); set-up (connect, accept, handshake) is
/// transport/mesh/connect.ipp, which hands a connected socket over with `attach`.
/// What the choices of algorithms and memory paths read about it: `link_traits<tcp_link>`.

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <deque>
#include <string>
#include <span>
#include <string_view>
#include <utility>

#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/transport/frame.hpp"
#include "gsync/transport/links/link_setup.hpp"

namespace gsync::transport {

/// A TCP connection between two ranks (see the file comment). Owns its socket.
class tcp_link {
 public:
  using frame = frame_header;  ///< what `post` takes
  static constexpr std::string_view name = "tcp";  ///< in logs
  tcp_link() = default;
  tcp_link(tcp_link&& o)
      : q(std::move(o.q)), fd_(std::exchange(o.fd_, -1)), closed_(o.closed_), hdr_got_(std::exchange(o.hdr_got_, 0)) {}
  tcp_link& operator=(tcp_link&& o) {
    if (this != &o) close(), q = std::move(o.q), fd_ = std::exchange(o.fd_, -1), closed_ = o.closed_, hdr_got_ = std::exchange(o.hdr_got_, 0);
    return *this;
  }
  ~tcp_link() { close(); }

  /// Takes over the connected socket `fd` (non-blocking use only: every call passes MSG_DONTWAIT).
  void attach(int fd) noexcept {
    close();
    fd_ = fd;
  }
  /// True once a socket is attached and not closed.
  bool connected() const noexcept { return fd_ >= 0; }
  /// The socket, for the mesh's poll(2) (-1 when none).
  int fd() const noexcept { return fd_; }

  /// Frames posted and not yet fully written.
  std::deque<send_op> q;

  /// Posts a frame: queued; `pump` writes it.
  void post(const frame_header& h, const std::byte* p, std::size_t n) { q.push_back(send_op{h, p, n, 0}); }
  /// Never writes at once: a frame posted to an empty queue goes out with the `pump` that follows
  /// it (the mesh pumps a queue that was empty), several frames per system call.
  bool post_direct(const frame_header&, const std::byte*, std::size_t) noexcept { return false; }

  /// Writes as much of the queue as the kernel takes now; several frames go out in one sendmsg.
  /// Adds the frames completed to `completed`. `err`: 0 when the queue is empty or the socket
  /// would block, else the errno of the failed write (the connection is lost); `bytes`: written.
  /// Before `attach` (a pair connected on first use, transport/mesh/connect.ipp) frames wait here.
  link_io pump(std::size_t& completed) noexcept {
    link_io io;
    if (fd_ < 0) return io;
    while (!q.empty()) {
      iovec iov[32];
      int k = 0;
      for (auto it = q.begin(); it != q.end() && k + 2 <= 32; ++it) {
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
      const ssize_t w = ::sendmsg(fd_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) io.err = errno;
        return io;
      }
      auto left = static_cast<std::size_t>(w);
      io.bytes += left;
      while (left > 0) {
        auto& op = q.front();
        const std::size_t take = std::min(sizeof(frame_header) + op.n - op.done, left);
        op.done += take;
        left -= take;
        if (op.done != sizeof(frame_header) + op.n) break;
        q.pop_front();
        ++completed;
      }
    }
    return io;
  }

  /// One non-blocking read of the header's bytes from `have` on, and in the same system call up
  /// to `n` payload bytes into `dst` (never past the expected message). Returns what recvmsg
  /// returns: bytes read, 0 when the peer closed, -1 with errno (EAGAIN: nothing yet).
  ssize_t read_header_some(frame_header& h, std::size_t have, std::byte* dst, std::size_t n) noexcept {
    auto* hb = reinterpret_cast<char*>(&h);
    iovec iov[2] = {{hb + have, sizeof h - have}, {dst, n}};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = n ? 2 : 1;
    return ::recvmsg(fd_, &mh, MSG_DONTWAIT);
  }
  /// One non-blocking read of up to `n` bytes; returns as recv(2) does.
  ssize_t read_some(std::byte* dst, std::size_t n) noexcept { return ::recv(fd_, dst, n, MSG_DONTWAIT); }
  /// Peeks at up to `n` bytes without consuming them; returns as recv(2) does.
  ssize_t peek(void* dst, std::size_t n) const noexcept { return ::recv(fd_, dst, n, MSG_PEEK | MSG_DONTWAIT); }

  /// The `link` concept's receive calls over the byte stream. Takes what has arrived of the next
  /// frame's header (kept across calls until whole) and, in the same system call, up to `n`
  /// payload bytes into `dst` (never past the expected message). `done` once the header is whole.
  link_io try_header(frame_header& h, std::byte* dst, std::size_t n) noexcept {
    link_io io;
    while (hdr_got_ < sizeof h) {
      const ssize_t r = read_header_some(h, hdr_got_, dst, n);
      if (r > 0) {
        hdr_got_ += static_cast<std::size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) io.err = link_io::closed;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) io.err = errno;
      return io;
    }
    io.done = true;
    io.bytes = hdr_got_ - sizeof h;
    hdr_got_ = 0;
    return io;
  }
  /// Takes up to `want` payload bytes that have arrived into `dst` (a byte stream is never read
  /// in place: `consume` must be null). `bytes` 0 with `err` 0: nothing yet.
  link_io try_payload(std::byte* dst, std::size_t want, std::size_t /*align*/,
                      detail::function_ref<void(std::span<const std::byte>)>* /*consume*/) noexcept {
    link_io io;
    if (want == 0) return io;
    for (;;) {
      const ssize_t r = read_some(dst, want);
      if (r > 0) io.bytes = static_cast<std::size_t>(r);
      else if (r == 0) io.err = link_io::closed;
      else if (errno == EINTR) continue;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) io.err = errno;
      return io;
    }
  }
  /// Ends a frame (nothing to release on a stream).
  void end_read() noexcept {}
  /// Copies the next frame's header if it has arrived whole, without taking it (between frames);
  /// also after the peer closed, while what it sent before is still there to read.
  bool peek_header(frame_header& h) const noexcept {
    return fd_ >= 0 && hdr_got_ == 0 && peek(&h, sizeof h) == static_cast<ssize_t>(sizeof h);
  }

  /// Liveness: looks, without waiting, at whether the peer has closed or reset the connection
  /// while nothing is expected on it. Returns 1 (closed), 0 (open, quiet), or 2 (bytes arrived:
  /// for a connection that must stay silent, a protocol error).
  int closed_by_peer() const noexcept {
    pollfd f{fd_, POLLIN, 0};
    if (::poll(&f, 1, 0) <= 0) return 0;
    char b;
    const ssize_t r = ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0) return 2;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    return 1;
  }
  /// Liveness for the `link` concept: true once the peer has closed or reset the connection.
  bool peer_gone() const noexcept { return closed_by_peer() == 1; }
  /// Marks the peer as seen closed while not waited for (the mesh then stops watching it).
  void mark_closed() noexcept { closed_ = true; }
  /// True once marked closed.
  bool seen_closed() const noexcept { return closed_; }

  /// Shuts both directions down (the peer's reads and writes fail at once); the socket stays
  /// open until `close`.
  void shutdown() noexcept {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  /// Closes the socket; the queue is dropped with it.
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::size_t hdr_got_ = 0;  // bytes of the next frame's header taken so far (try_header)
};

/// The TCP link's endpoint (`link_endpoint`): the mesh's own connection to a peer is a TCP link
/// (it also carries the hello, the failure notices and, for a pair whose data goes another way,
/// the liveness signal). TCP connects every pair, at start-up or when the pair is first used
/// (transport/mesh/connect.ipp), so it belongs last in a mesh's list.
class tcp_endpoint {
 public:
  explicit tcp_endpoint(const link_setup&) noexcept {}
  /// Always: the pair is connected now or will be on first use.
  bool connect(const link_setup&, int, tcp_link&) const noexcept { return true; }
  void finish(const link_setup&) noexcept {}
  std::string report() const { return {}; }
};

}  // namespace gsync::transport

namespace gsync {
/// TCP: loopback TCP's fitted model between ranks of one host (core/cost_model.hpp), host memory
/// only; the peers share nothing.
template <>
struct link_traits<transport::tcp_link> {
  static constexpr link_costs costs{"tcp", cost_model::tcp_loopback(), /*shared_memory=*/false};
  static constexpr bool moves_host_memory = true;     ///< reads and writes pageable host memory
  static constexpr bool moves_device_memory = false;  ///< device memory must be staged through host memory
  static constexpr link_wait wait = link_wait::descriptor;  ///< poll(2) on the socket
  static constexpr bool reads_in_place = false;  ///< a byte stream: reductions read through the mesh's staging
  static constexpr std::size_t payload_align = 1;
  using endpoint = transport::tcp_endpoint;  ///< rank-wide set-up (`link_endpoint`)
};
static_assert(link<transport::tcp_link>);  // after its traits: the concept reads them
}  // namespace gsync
