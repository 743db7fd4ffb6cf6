#pragma once
/// \file
/// The rendezvous store's server (bootstrap/store.hpp), run by rank 0: a TCP listener and an Asio
/// io_context on its own thread that move bytes between the clients' sockets and the store's state
/// machine (bootstrap/store_core.hpp: the handshake, requests, parked gets and waits, the lost-rank
/// rule, and the bounds on everything a client can make it hold).

#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/basic_waitable_timer.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/bootstrap/socket.hpp"
#include "gsync/bootstrap/store_core.hpp"
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"

namespace gsync::bootstrap {

/// The store server. Runs an io_context on its own thread from construction to destruction.
class store_server {
 public:
  /// Listens on `bind_addr`:`port` (port 0 = any free port; see `port()`); clients must prove `key`.
  store_server(const std::string& bind_addr, std::uint16_t port, logger log = {},
               auth::job_key key = auth::job_key::from_env(), store_limits limits = {})
      : acc_(io_), log_(log), core_(std::move(key), log, limits) {
    asio::error_code ec;
    auto addr = asio::ip::make_address(bind_addr, ec);
    if (ec) throw error(errc::invalid_argument, "store: bad bind address '" + bind_addr + "'");
    asio::ip::tcp::endpoint ep(addr, port);
    acc_.open(ep.protocol(), ec);
    if (!ec) detail::set_cloexec(acc_.native_handle());
    if (!ec) acc_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc_.bind(ep, ec);
    if (!ec) acc_.listen(1024, ec);
    if (ec.value() == EADDRNOTAVAIL && ec.category() == asio::system_category())
      throw error(errc::invalid_argument, "store: cannot listen on " + bind_addr + ": not an address of this host, and rank 0 "
                                          "serves the store (set GSYNC_MASTER_ADDR, or MASTER_ADDR, to an address of rank 0's host)");
    if (ec)
      throw error(errc::system, "store: cannot listen on " + bind_addr + ":" + std::to_string(port) + ": " + ec.message() +
                                    (ec == asio::error::address_in_use ? " (another job, or another communicator of this job still open, on this port? set GSYNC_MASTER_PORT)" : ""));
    start();
  }
  /// Serves on `listening_fd`, a socket already bound and listening, which it takes over (a shrink's
  /// coordinator serves on the recovery listener it opened at set-up: transport/mesh/shrink.ipp).
  store_server(int listening_fd, logger log, auth::job_key key, store_limits limits = {})
      : acc_(io_), log_(log), core_(std::move(key), log, limits) {
    sockaddr_storage sa{};
    socklen_t sl = sizeof sa;
    asio::error_code ec;
    if (::getsockname(listening_fd, reinterpret_cast<sockaddr*>(&sa), &sl) != 0) {
      const int e = errno;
      ::close(listening_fd);
      throw error(errc::system, "store: getsockname: " + detail::errno_text(e));
    }
    acc_.assign(sa.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), listening_fd, ec);
    if (ec) {
      ::close(listening_fd);
      throw error(errc::system, "store: cannot serve on descriptor " + std::to_string(listening_fd) + ": " + ec.message());
    }
    start();
  }
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server() {
    io_.stop();  // thread-safe; handlers still queued are destroyed with io_, never run
    if (thread_.joinable()) thread_.join();
    if (spare_ >= 0) ::close(spare_);
  }
  /// True once the server ran out of descriptors: it then turns every connection away and answers
  /// every wait with the error, so that no rank waits for a store that cannot serve it.
  bool out_of_descriptors() const noexcept { return out_of_fds_.load(std::memory_order_acquire); }
  /// Keeps serving until every rank's client has said goodbye or is gone, or until `dl`: the
  /// process that hosts the store calls this before destroying it, so that ranks still setting
  /// up, or looking up why a peer failed, are not cut off by an early exit of rank 0.
  /// A server that ran out of descriptors does not wait: ranks it could not accept never leave.
  /// `gone`: ranks known to be lost, which may still hold their connections (a stopped process
  /// keeps them open without ever leaving): not waited for.
  void linger(std::chrono::steady_clock::time_point dl, const std::vector<int>& gone = {}) {
    if (!gone.empty()) {
      {
        std::lock_guard<std::mutex> g(gone_m_);
        gone_ = gone;
        active_.store(1 << 30, std::memory_order_release);  // not counted with them yet
      }
      asio::post(io_, [this] { settle(); });  // the loop counts again
    }
    while (active_.load(std::memory_order_acquire) > 0 && !out_of_fds_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < dl)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  /// The port the server listens on.
  std::uint16_t port() const { return acc_.local_endpoint().port(); }
  /// Why the store's thread failed, or "" (it then answers every wait with that reason).
  std::string failure() const {
    std::lock_guard<std::mutex> g(failure_m_);
    return failure_;
  }

 private:
  using clock = std::chrono::steady_clock;
  using timer = asio::basic_waitable_timer<clock, asio::wait_traits<clock>, detail::net::executor>;
  // Reads complete into a small buffer per connection (a handshake, a request); a read that fills
  // it goes on, non-blocking, through the thread's one 64 KiB buffer. A 64 KiB buffer per
  // connection would let every stranger in the handshake make the store hold 64 KiB.
  struct conn {
    detail::net::tcp_socket s;
    bool writing = false;  // a write is waiting for the socket to be writable (one at a time)
    std::array<char, 2048> in{};
  };

  void start() {
    acc_.non_blocking(true);  // the queued connections are accepted and closed synchronously (on_accept)
    spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    thread_ = std::thread([this] { run(); });
  }
  // A handler costs O(its events), not O(connections): epoll (Asio's reactor) keeps the interest
  // set, and the core indexes parked requests by key and deadlines in heaps (a thousand ranks'
  // set-up; benchmarks/results/scale). No exception leaves the thread: one raised for a connection
  // drops it; one raised by the loop itself is recorded (`failure()`) and answers every waiting
  // rank, which then fails with it rather than wait for its deadline.
  void run() {
    ::pthread_setname_np(::pthread_self(), "gsync-store");  // for top -H, perf and debuggers
    auto work = asio::make_work_guard(io_);  // run() returns on stop() only
    accept_next();
    for (bool again = false;; again = true) {
      try {
        if (again) recover();
        io_.run();
        break;
      } catch (const std::exception& e) {
        failed(e.what());
      } catch (...) {
        failed("unknown exception");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a lasting cause does not spin
    }
    if (log_.enabled(log_level::info)) {
      timespec t{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      log_.info("store: served " + std::to_string(core_.requests()) + " requests from " + std::to_string(next_id_ - first_id) +
                " connections, sent " + detail::fixed(static_cast<double>(core_.bytes_sent()) / (1 << 20), 1) + " MiB, in " +
                detail::fixed(1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec), 0) + " ms of CPU");
    }
  }
  // The loop itself failed (out of memory, most likely): record why, tell every waiting rank, and
  // go on serving what it can.
  void failed(const std::string& what) noexcept {
    try {
      {
        std::lock_guard<std::mutex> g(failure_m_);
        if (!failure_.empty()) return;
        failure_ = "the store (rank 0) failed: " + what;
      }
      log_.warn("store: " + what);
      if (!core_.lost()) core_.declare_lost(failure());
      for (auto id : core_.take_ready()) flush(id);
    } catch (...) {
    }
  }
  // After a failed handler: what it may have left undone (the next accept, the drain, the timer).
  void recover() {
    if (!accepting_ && !accept_paused_) accept_next();
    armed_ = clock::time_point::max();
    settle();
  }
  // After every handler: a death answers the waits (the lost-rank rule) and a failed send is a
  // death: until both lists are empty, or the answers would wait for the next event. Then the
  // deadline timer follows the core's next deadline.
  void settle() {
    core_.expire(clock::now());
    for (;;) {
      auto dead = core_.take_dead();
      for (auto id : dead) conns_.erase(id);  // closes the socket; its pending waits end aborted
      auto ready = core_.take_ready();
      for (auto id : ready) flush(id);
      if (dead.empty() && ready.empty()) break;
    }
    {
      std::lock_guard<std::mutex> g(gone_m_);
      active_.store(core_.active_except(gone_), std::memory_order_release);
    }
    // Re-armed only when the deadline comes sooner: one that fires early finds nothing and re-arms.
    const auto until = core_.next_deadline();
    if (until >= armed_) return;
    armed_ = until;
    deadline_.expires_at(until);
    deadline_.async_wait([this](const asio::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      armed_ = clock::time_point::max();
      settle();
    });
  }
  void accept_next() {
    acc_.async_accept(peer_, [this](const asio::error_code& ec, detail::net::tcp_socket s) { on_accept(ec, std::move(s)); });
    accepting_ = true;
  }
  void on_accept(const asio::error_code& ec, detail::net::tcp_socket s) {
    accepting_ = false;
    if (ec == asio::error::operation_aborted) return;
    if (bootstrap::out_of_descriptors(ec)) {
      // A store that cannot accept every rank cannot set the job up: fail the waits of the ranks
      // accepted so far with the reason, and close the connections queued behind (accepted
      // with the spare descriptor, closed at once) so that no rank waits for its deadline.
      if (!out_of_fds_.exchange(true, std::memory_order_acq_rel) && !core_.lost())
        core_.declare_lost(bootstrap::fd_exhausted("rank 0: the store cannot accept a rank's connection", 0).what());
      if (spare_ >= 0) {
        ::close(spare_);
        spare_ = -1;
        for (int f; (f = ::accept(acc_.native_handle(), nullptr, nullptr)) >= 0;) ::close(f);
        spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      pause_.expires_after(std::chrono::milliseconds(50));  // no spin while none is free
      pause_.async_wait([this](const asio::error_code& e) {
        accept_paused_ = false;
        if (e != asio::error::operation_aborted) accept_next();
      });
      accept_paused_ = true;
      settle();
      return;
    }
    accept_next();  // other errors (an aborted connection) concern that connection only
    if (!ec) {
      const std::uint64_t id = next_id_++;
      if (core_.open(id, detail::peer_text(peer_.data()), clock::now())) {  // else over a limit: closed at once
        detail::tune_control_socket(s.native_handle(), core_.limits().liveness);
        asio::error_code nb;
        s.non_blocking(true, nb);  // read_some / write_some (drain, flush) return would_block, never wait
        conn& c = conns_.emplace(id, conn{std::move(s)}).first->second;
        guarded(id, [&] { read_next(id, c); });
      }
    }
    settle();
  }
  // Runs `f` for connection `id`: an exception drops that connection, not the store.
  template <class F>
  void guarded(std::uint64_t id, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      log_.warn(std::string("store: dropping a connection after an error: ") + e.what());
      core_.hangup(id);
    }
  }
  // Reads what `id` sent, handing the core one chunk at a time (it drops a stranger at its first
  // bad bytes, so junk is never buffered), until the peer closes or the core drops it.
  void read_next(std::uint64_t id, conn& c) {
    c.s.async_read_some(asio::buffer(c.in), [this, id](const asio::error_code& ec, std::size_t n) {
      auto it = conns_.find(id);
      if (it == conns_.end()) return;  // closed meanwhile
      guarded(id, [&] {
        if (ec) return core_.hangup(id);  // EOF or an error: what came before still counted
        core_.received(id, it->second.in.data(), n);
        if (n == it->second.in.size()) drain(id, it->second);
        if (core_.output(id)) read_next(id, it->second);
      });
      settle();
    });
  }
  // The rest of a burst that filled `in`, until a short read.
  void drain(std::uint64_t id, conn& c) {
    for (;;) {
      if (!core_.output(id)) return;  // dropped meanwhile
      asio::error_code ec;
      const std::size_t r = c.s.read_some(asio::buffer(buf_), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) return;
      if (ec == asio::error::interrupted) continue;
      if (ec) return core_.hangup(id);
      core_.received(id, buf_.data(), r);
      if (r < buf_.size()) return;
    }
  }
  // Sends what the core holds for `id` now; the rest once the socket is writable again (one wait
  // at a time per connection). The core's buffer keeps the unsent bytes, so its bound holds.
  void flush(std::uint64_t id) {
    auto it = conns_.find(id);
    std::string* out = core_.output(id);
    if (it == conns_.end() || !out || it->second.writing) return;
    conn& c = it->second;
    while (!out->empty()) {
      asio::error_code ec;
      const std::size_t w = c.s.write_some(asio::buffer(*out), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        c.writing = true;
        c.s.async_wait(asio::socket_base::wait_write, [this, id](const asio::error_code& e) {
          auto i = conns_.find(id);
          if (i == conns_.end()) return;
          i->second.writing = false;
          guarded(id, [&] { e ? core_.hangup(id) : flush(id); });
          settle();
        });
        return;
      }
      if (ec == asio::error::interrupted) continue;
      if (ec) return core_.hangup(id);
      out->erase(0, w);
      core_.count_sent(w);
    }
  }

  static constexpr std::uint64_t first_id = 16;
  asio::io_context io_{1};  // one thread runs it (a concurrency hint)
  detail::net::tcp_acceptor acc_;
  timer deadline_{io_};  // the core's next deadline (settle)
  timer pause_{io_};     // accepting paused while out of descriptors
  logger log_;
  store_core core_;
  asio::ip::tcp::endpoint peer_;               // of the connection being accepted
  bool accepting_ = false, accept_paused_ = false;
  clock::time_point armed_ = clock::time_point::max();  // when deadline_ fires (max: not armed)
  std::atomic<bool> out_of_fds_{false};  // accept failed for want of descriptors (see on_accept, linger)
  int spare_ = -1;                         // a descriptor held back to turn connections away when out of them
  std::atomic<int> active_{1 << 30};  // connected ranks that have not said goodbye (1<<30: not counted yet)
  std::mutex gone_m_;                  // guards gone_
  std::vector<int> gone_;              // ranks not waited for (linger)
  std::uint64_t next_id_ = first_id;
  std::array<char, 65536> buf_{};      // the rest of a read that filled a connection's own buffer (drain)
  std::unordered_map<std::uint64_t, conn> conns_;
  mutable std::mutex failure_m_;
  std::string failure_;
  std::thread thread_;
};

}  // namespace gsync::bootstrap
