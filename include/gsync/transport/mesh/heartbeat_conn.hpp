#pragma once
/// \file
/// `transport::heartbeat_conn`: one connection of a rank's heartbeat (transport/mesh/heartbeat.hpp):
/// to the successor (dialed), from the predecessor, or a stranger being admitted. It holds the
/// socket, the timer of its time limit, where its handshake stands, the bytes in and out, and what
/// the heartbeat's Asio handlers still hold of it; what it means is the heartbeat's.

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/socket.hpp"

namespace gsync::transport {

struct heartbeat_conn {
  static constexpr std::size_t most_in = 64 * 1024;  ///< nobody of this job sends that much unread

  explicit heartbeat_conn(asio::io_context& io) : sock(io), timer(io) {}
  heartbeat_conn(const heartbeat_conn&) = delete;
  heartbeat_conn& operator=(const heartbeat_conn&) = delete;

  detail::net::tcp_socket sock;      ///< close-on-exec, non-blocking
  detail::net::steady_timer timer;   ///< the handshake's time limit, then the silence's deadline
  enum role_t { dialing, admitting, up } role = admitting;
  bool outgoing = false;  ///< dialed by this rank (to the successor)
  int peer = -1;          ///< the neighbour, once known
  int step = 0;           ///< handshake progress (see heartbeat::drive_*)
  std::unique_ptr<bootstrap::auth::server_handshake> hs;  ///< admitting: the job-key handshake
  std::unique_ptr<bootstrap::auth::client_steps> cs;      ///< dialing: its client side
  std::uint64_t nonce = 0;  ///< the job nonce its hello named (checked once ring() gave this rank's)
  std::string in, out;
  std::chrono::steady_clock::time_point heard{}, until{};

  // What Asio holds: a handler names this connection by address, so it is erased only once the
  // last of them has run (`waits`), after `closed` made each of them a no-op.
  bool closed = false;                    ///< dropped: its socket is closed, its waits cancelled
  bool broken = false;                    ///< a write failed; a posted handler deals with it
  bool reading = false, writing = false;  ///< a readiness wait is asked for
  bool connecting = false;                ///< the asynchronous connect is under way
  int waits = 0;                          ///< handlers of Asio not run yet that name it
  unsigned timer_gen = 0;                 ///< the timer's latest wait: earlier ones are stale

  /// Reads what the socket holds now into `in`, without blocking. `got`: bytes came; `eof`: the
  /// peer closed, or the connection failed. False when `in` would hold more than `most_in`.
  bool read_available(bool& got, bool& eof) {
    char buf[4096];
    for (;;) {
      const ssize_t r = ::recv(sock.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        if (in.size() + static_cast<std::size_t>(r) > most_in) return false;
        in.append(buf, static_cast<std::size_t>(r));
        got = true;
        continue;
      }
      if (r == 0) eof = true;
      else if (errno == EINTR) continue;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
      return true;
    }
  }

  /// Writes queued bytes without blocking; false when the connection broke.
  bool flush() {
    const int e = detail::send_some(sock.native_handle(), out);
    return e == 0 || e == EAGAIN;
  }
};

}  // namespace gsync::transport
