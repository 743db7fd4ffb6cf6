#pragma once
/// \file
/// Blocking-with-deadline socket helpers over Asio sockets (non-templated; shared by the store and
/// the TCP transport's connection setup): non-blocking send/recv, and a wait for readiness on the
/// socket's io_context with an Asio timer for the deadline. The data path uses the same native
/// handles non-blocking.

#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/basic_waitable_timer.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>
#include <asio/socket_base.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"

namespace gsync::detail {

/// The Asio socket types of the set-up code, bound to `io_context`'s own executor. Asio's
/// default, the type-erased `any_io_executor`, costs a user's file more to compile
/// (benchmarks/results/from_code_comments.md) and does not compile at all in a .cu file
/// (nvcc 13's front end rejects its traits), so gsync names the concrete executor everywhere.
namespace net {
using executor = asio::io_context::executor_type;
using tcp_socket = asio::basic_stream_socket<asio::ip::tcp, executor>;
using tcp_acceptor = asio::basic_socket_acceptor<asio::ip::tcp, executor>;
using tcp_resolver = asio::ip::basic_resolver<asio::ip::tcp, executor>;
using udp_socket = asio::basic_datagram_socket<asio::ip::udp, executor>;
using steady_timer = asio::basic_waitable_timer<std::chrono::steady_clock, asio::wait_traits<std::chrono::steady_clock>, executor>;
}  // namespace net

using steady = std::chrono::steady_clock;

/// Milliseconds left until `dl` (0 when passed), capped so poll's int never overflows.
inline int ms_left(deadline dl) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(dl - steady::now()).count();
  if (left <= 0) return 0;
  return left > 3600000 ? 3600000 : static_cast<int>(left) + 1;
}

/// `errno` text.
inline std::string errno_text(int e) { return std::strerror(e); }

/// Waits until `s` is ready for `w` (`wait_read` / `wait_write`) or `dl` passes; false at the
/// deadline. Runs the socket's io_context, which no other thread may run meanwhile.
inline bool wait_ready(net::tcp_socket& s, asio::socket_base::wait_type w, deadline dl) {
  asio::io_context& io = s.get_executor().context();
  net::steady_timer timer(io, dl);
  enum { waiting, ready, late } got = waiting;
  int pending = 2;
  s.async_wait(w, [&](const asio::error_code& e) {  // a socket's error shows in the send or recv that follows
    --pending;
    if (got == waiting && e != asio::error::operation_aborted) got = ready;
  });
  timer.async_wait([&](const asio::error_code& e) {
    --pending;
    if (got == waiting && !e) got = late;
  });
  io.restart();
  while (got == waiting) io.run_one();
  asio::error_code ig;
  timer.cancel();
  s.cancel(ig);
  while (pending > 0) io.run_one();  // the cancelled handler refers to this frame
  return got == ready;
}

/// Pauses this thread for `d` on `io` (no other thread may run it meanwhile).
inline void pause_on(asio::io_context& io, std::chrono::milliseconds d) {
  net::steady_timer timer(io, d);
  bool done = false;
  timer.async_wait([&done](const asio::error_code&) { done = true; });
  io.restart();
  while (!done) io.run_one();
}

/// Puts a native socket in non-blocking mode.
inline void set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL, 0);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) throw error(errc::system, "fcntl(O_NONBLOCK): " + errno_text(errno));
}

/// Writes all of [p, p+n) to `s` before `dl` (wait_ready's rule on its io_context). `what` names
/// the peer in errors.
inline void write_all(net::tcp_socket& s, const void* p, std::size_t n, deadline dl, const std::string& what) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(s.native_handle(), b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      b += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(s, asio::socket_base::wait_write, dl)) throw error(errc::timeout, "timed out writing to " + what);
      continue;
    }
    throw error(errc::peer_lost, "connection to " + what + " lost while writing: " + errno_text(errno));
  }
}

/// Sends from the front of `out` what non-blocking `fd` takes now, erasing what went: 0 when all
/// went, EAGAIN when the socket has no room for the rest, else the errno of the failed connection.
inline int send_some(int fd, std::string& out) noexcept {
  while (!out.empty()) {
    const ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      out.erase(0, static_cast<std::size_t>(w));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return EAGAIN;
    return w < 0 ? errno : EPIPE;
  }
  return 0;
}

/// Reads exactly n bytes from `s` before `dl` (wait_ready's rule on its io_context).
inline void read_all(net::tcp_socket& s, void* p, std::size_t n, deadline dl, const std::string& what) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(s.native_handle(), b, n, MSG_DONTWAIT);
    if (r > 0) {
      b += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) throw error(errc::peer_lost, "connection to " + what + " closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(s, asio::socket_base::wait_read, dl)) throw error(errc::timeout, "timed out reading from " + what);
      continue;
    }
    throw error(errc::peer_lost, "connection to " + what + " lost while reading: " + errno_text(errno));
  }
}

/// Sets TCP_CONGESTION of `fd` to `name` (empty: leaves it). Set it before connect(2) / listen(2):
/// a connection that started under BBR keeps BBR's pacing after a switch. Returns false if refused.
inline bool set_congestion(int fd, const std::string& name) {
  if (name.empty()) return true;
  return ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0;
}

/// Marks `fd` close-on-exec: a program a rank starts (a data-loader worker, a shell) must not hold
/// gsync's connections, or a dead rank's connections stay open and hide its death.
inline void set_cloexec(int fd) noexcept {
  const int f = ::fcntl(fd, F_GETFD);
  if (f >= 0 && !(f & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, f | FD_CLOEXEC);
}

/// Default of host_options::liveness_ms, for connections made outside a transport (the store's).
inline constexpr std::chrono::milliseconds default_liveness{10000};

/// A connection whose peer stops answering without a FIN (its host vanished, a partition) fails
/// within about `l`: keepalive probes from l/2 of idleness, and TCP_USER_TIMEOUT `l` on data left
/// unacknowledged. 0 leaves the kernel's settings (hours).
inline void set_liveness(int fd, std::chrono::milliseconds l) noexcept {
  if (l.count() <= 0) return;
  const int on = 1, secs = static_cast<int>(std::max<long long>(1, l.count() / 1000));
  const int idle = std::max(1, secs / 2), intvl = std::max(1, (secs - idle) / 3), cnt = 3;
  const unsigned user_ms = static_cast<unsigned>(l.count());
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms);
}

/// Options of every connection of the store: no Nagle delay, liveness `l`, close-on-exec.
inline void tune_control_socket(int fd, std::chrono::milliseconds l = default_liveness) noexcept {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  set_liveness(fd, l);
  set_cloexec(fd);
}

/// "address:port" of a socket address (IPv4 or IPv6), for logs and per-address limits.
inline std::string peer_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(a->sin6_port));
  }
  return "?:0";
}

/// Options of every data connection: no Nagle delay, large kernel buffers, congestion control
/// `congestion` (empty: the system's), non-blocking. Returns false when the kernel refused the
/// congestion control (not available, or not in net.ipv4.tcp_allowed_congestion_control); the
/// connection then keeps the system default and works as before.
inline bool tune_data_socket(net::tcp_socket& s, int buf_bytes, const std::string& congestion = {},
                             std::chrono::milliseconds liveness = default_liveness) {
  set_liveness(s.native_handle(), liveness);
  set_cloexec(s.native_handle());
  asio::error_code ec;
  s.set_option(asio::ip::tcp::no_delay(true), ec);
  if (buf_bytes > 0) {
    s.set_option(asio::socket_base::send_buffer_size(buf_bytes), ec);
    s.set_option(asio::socket_base::receive_buffer_size(buf_bytes), ec);
  }
  const bool cc_ok = set_congestion(s.native_handle(), congestion);
  set_nonblocking(s.native_handle());
  return cc_ok;
}

/// Resolves `host` (name or IPv4/IPv6 literal) to an address, preferring IPv4.
inline asio::ip::address resolve_host(asio::io_context& io, const std::string& host) {
  asio::error_code ec;
  auto a = asio::ip::make_address(host, ec);
  if (!ec) return a;
  net::tcp_resolver res(io);
  auto results = res.resolve(host, "", ec);
  if (ec || results.empty()) throw error(errc::invalid_argument, "cannot resolve host '" + host + "': " + ec.message());
  for (const auto& e : results)
    if (e.endpoint().address().is_v4()) return e.endpoint().address();
  return results.begin()->endpoint().address();
}

/// Connects to `ep`, retrying refused connections (the listener may not be up yet) until `dl`;
/// with `retry_refused` false, a refusal is at once `errc::peer_lost` (the listener was up: it is gone).
/// Its waits and pauses run `io` (wait_ready's rule).
inline net::tcp_socket connect_retry(asio::io_context& io, const asio::ip::tcp::endpoint& ep, deadline dl,
                                           const std::string& what, const std::string& congestion = {}, bool retry_refused = true) {
  auto backoff = std::chrono::milliseconds(5);
  std::string last = "no attempt";
  for (;;) {
    net::tcp_socket s(io);
    asio::error_code ec;
    s.open(ep.protocol(), ec);
    if (bootstrap::out_of_descriptors(ec)) throw bootstrap::fd_exhausted("connecting to " + what, 0);
    if (ec) throw error(errc::system, "socket(): " + ec.message());
    set_cloexec(s.native_handle());
    set_nonblocking(s.native_handle());
    set_congestion(s.native_handle(), congestion);  // failure reported by tune_data_socket
    int r = ::connect(s.native_handle(), ep.data(), static_cast<socklen_t>(ep.size()));
    int err = r == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (wait_ready(s, asio::socket_base::wait_write, dl)) {
        socklen_t len = sizeof(err);
        ::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) return s;
    last = errno_text(err);
    if (!retry_refused && (err == ECONNREFUSED || err == ECONNRESET))
      throw error(errc::peer_lost, "connection to " + what + " at " + ep.address().to_string() + ":" + std::to_string(ep.port()) + " refused (" + last + ")");
    if (steady::now() + backoff >= dl)
      throw error(errc::timeout, "could not connect to " + what + " at " + ep.address().to_string() + ":" +
                                     std::to_string(ep.port()) + " before the deadline (last error: " + last + ")");
    pause_on(io, backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace gsync::detail
