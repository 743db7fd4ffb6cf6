#pragma once
/// \file
/// `transport::admission`: the connections a rank has accepted on its listener and not admitted
/// yet (a peer dialing it, or a stranger), each moved on as its bytes arrive: the job-key handshake
/// (bootstrap/auth.hpp), then the job's hello (records.hpp). It owns those sockets, their time
/// limit, the flood rule and the rate-limited log of what it turned away; which hello admits a
/// connection, and to which peer, is the mesh's (connect.ipp).

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <asio/error.hpp>
#include <asio/socket_base.hpp>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/socket.hpp"
#include "gsync/core/log.hpp"
#include "gsync/transport/mesh/records.hpp"
#include "gsync/transport/mesh/waiter.hpp"

namespace gsync::transport {

class admission {
 public:
  static constexpr auto limit = std::chrono::seconds(5);  ///< a stranger's connection, at most
  static constexpr std::size_t most = 64;                 ///< connections being admitted at once

  bool empty() const noexcept { return pending_.empty(); }
  /// What turned-away connections are logged through (bounded rate).
  flood_log& rejected() noexcept { return rejected_; }

  /// A connection just accepted from `from`; it must prove `key` (which outlives it). Past `most`,
  /// the oldest connection that has sent nothing makes room, else the oldest: a rank of this job
  /// says its hello at once, so a silent flood cannot push it out, and a dial pushed out by a
  /// busier one tries again.
  void take(std::unique_ptr<detail::net::tcp_socket> s, const bootstrap::auth::job_key& key, std::string from, const logger& log) {
    if (pending_.size() >= most) {
      auto victim = std::find_if(pending_.begin(), pending_.end(), [](const entry& a) { return a.in.empty() && !a.challenged && a.hs; });
      if (victim == pending_.end()) victim = pending_.begin();
      rejected_.warn(log, "dropped a connection from " + victim->from + ": the oldest of " + std::to_string(most) +
                              " connections in the handshake, to make room for a new one");
      pending_.erase(victim);
    }
    pending_.push_back({std::move(s), std::make_unique<bootstrap::auth::server_handshake>(key), {}, false,
                        std::chrono::steady_clock::now() + limit, std::move(from), false});
  }

  /// Watches every pending connection for bytes, as `slot` in `ps`.
  void watch(waiter::poll_set& ps, int slot) const {
    for (const auto& a : pending_) ps.add(a.s->native_handle(), POLLIN, slot);
  }

  /// Event loops (start_connector.hpp): asks Asio to call `on_ready(error_code)` when a pending
  /// connection has bytes, once per connection not asked for yet.
  template <class Handler>
  void arm(Handler on_ready) {
    for (auto& a : pending_) {
      if (a.armed) continue;
      a.armed = true;
      const detail::net::tcp_socket* s = a.s.get();
      a.s->async_wait(asio::socket_base::wait_read, [this, s, on_ready](const asio::error_code& e) {
        for (auto& b : pending_)  // (a connection dropped meanwhile is not found: its wait was cancelled)
          if (b.s.get() == s) b.armed = false;
        on_ready(e);
      });
    }
  }
  /// Cancels what `arm` asked for; the connections stay pending (the waits' poll loop goes on).
  void cancel_waits() noexcept {
    for (auto& a : pending_)
      if (a.armed) {
        asio::error_code ig;
        a.s->cancel(ig);
      }
  }

  /// Moves every pending connection on by what it has sent, and drops those whose time is up. It
  /// reads exactly what the step it is at needs (the hello, the proof, then the job's hello): the
  /// dialer may send its first frames right behind, and those belong to the link.
  /// `admit(h, s)`: a connection said hello `h`; true when the mesh took its socket `s` as a peer's.
  template <class Admit>
  void advance(const logger& log, Admit&& admit) {
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < pending_.size();) {
      entry& a = pending_[k];
      const int fd = a.s->native_handle();
      std::string why;
      bool done = false;
      while (why.empty() && !done) {
        const std::size_t want = a.hs ? (a.challenged ? bootstrap::auth::mac_bytes : bootstrap::auth::hello_bytes) : sizeof(records::hello);
        char buf[64];
        const ssize_t r = ::recv(fd, buf, want - a.in.size(), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) why = "closed during the handshake";
        if (r <= 0) break;
        a.in.append(buf, static_cast<std::size_t>(r));
        if (a.in.size() < want) continue;
        if (a.hs) {
          std::string out;
          const auto st = a.hs->feed(a.in, out);
          if (!out.empty()) {
            a.challenged = true;
            if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(out.size())) why = "could not be answered";
          }
          if (st == bootstrap::auth::server_handshake::state::failed) why = a.hs->why();
          if (st == bootstrap::auth::server_handshake::state::done) a.hs.reset();
          continue;
        }
        records::hello h;
        std::memcpy(&h, a.in.data(), sizeof h);
        if (!admit(h, *a.s)) {
          why = "not a rank of this job (bad hello)";
          break;
        }
        done = true;
      }
      if (why.empty() && !done && now >= a.until) why = "did not complete the handshake within " + std::to_string(limit.count()) + " s";
      if (!why.empty()) rejected_.warn(log, "rejected a connection from " + a.from + ": " + why);
      if (done || !why.empty()) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      ++k;
    }
  }

 private:
  struct entry {
    std::unique_ptr<detail::net::tcp_socket> s;
    std::unique_ptr<bootstrap::auth::server_handshake> hs;  // until the dialer has proved the key
    std::string in;                                          // bytes of the step under way
    bool challenged = false;                                 // the handshake's hello was answered
    std::chrono::steady_clock::time_point until;             // dropped then, if not through
    std::string from;
    bool armed = false;                                      // an asynchronous wait is asked for (arm)
  };
  std::vector<entry> pending_;
  flood_log rejected_{"connections refused or dropped"};
};

}  // namespace gsync::transport
