#pragma once
/// \file
/// The rendezvous store's server (bootstrap/store.hpp), run by rank 0: a TCP listener and an epoll loop
/// on its own thread that moves bytes between the clients' sockets and the store's state machine
/// (bootstrap/store_core.hpp: the handshake, requests, parked gets and waits, the lost-rank rule,
/// and the bounds on everything a client can make it hold).

#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/store_core.hpp"
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/core/error.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/core/log.hpp"
#include "gsync/bootstrap/socket.hpp"

namespace gsync::bootstrap {

/// The store server. Runs an epoll loop on its own thread from construction to destruction.
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

 private:
  void start() {
    acc_.non_blocking(true);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw error(errc::system, "store: pipe: " + detail::errno_text(errno));
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) {
      const int e = errno;
      ::close(wake_[0]);
      ::close(wake_[1]);
      throw error(errc::system, "store: epoll_create1: " + detail::errno_text(e));
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag_wake;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, wake_[0], &ev);
    ev.data.u64 = tag_listen;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, acc_.native_handle(), &ev);
    spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // see accept_all
    thread_ = std::thread([this] { run(); });
  }

 public:
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server() {
    stop_ = true;
    char c = 0;
    [[maybe_unused]] auto r = ::write(wake_[1], &c, 1);
    if (thread_.joinable()) thread_.join();
    for (auto& [id, fd] : fds_) ::close(fd);
    ::close(ep_);
    ::close(wake_[0]);
    ::close(wake_[1]);
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
      char c = 0;
      [[maybe_unused]] auto r = ::write(wake_[1], &c, 1);  // the loop counts again
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
  // epoll tags of the two descriptors that are not connections; connection ids start above them.
  static constexpr std::uint64_t tag_wake = 1, tag_listen = 2;

  // One loop iteration costs O(events), not O(connections): epoll keeps the interest set, and the
  // core (bootstrap/store_core.hpp) indexes parked requests by key and deadlines in heaps
  // (a thousand ranks' set-up; benchmarks/results/scale). No exception leaves the thread: one
  // raised for a connection drops it; one raised by the loop itself is recorded (`failure()`)
  // and answers every waiting rank, which then fails with it rather than wait for its deadline.
  void run() {
    ::pthread_setname_np(::pthread_self(), "gsync-store");  // for top -H, perf and debuggers
    std::vector<epoll_event> evs(256);
    while (!stop_) {
      try {
        const auto now = clock::now();
        if (accept_paused_ && now >= accept_pause_until_) set_accepting(true);
        int r = ::epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), next_timeout_ms(now));
        if (r < 0 && errno != EINTR) throw error(errc::system, "store: epoll_wait: " + detail::errno_text(errno));
        if (stop_) break;
        for (int i = 0; i < r; ++i) {
          const auto tag = evs[i].data.u64;
          if (tag == tag_wake) {  // stop_ is read above; linger() may have named stopped ranks
            char b[64];
            while (::read(wake_[0], b, sizeof b) > 0) {
            }
            continue;
          }
          if (tag == tag_listen) {
            accept_all();
            continue;
          }
          try {
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) read_from(tag);
            if (evs[i].events & EPOLLOUT) flush(tag);
          } catch (const std::exception& e) {
            log_.warn(std::string("store: dropping a connection after an error: ") + e.what());
            core_.hangup(tag);
          }
        }
        core_.expire(clock::now());
        // A death answers the waits (the lost-rank rule) and a failed send is a death: until both
        // lists are empty, or the answers would wait for the next event.
        for (;;) {
          auto dead = core_.take_dead();
          for (auto id : dead) close(id);
          auto ready = core_.take_ready();
          for (auto id : ready) flush(id);
          if (dead.empty() && ready.empty()) break;
        }
        {
          std::lock_guard<std::mutex> g(gone_m_);
          active_.store(core_.active_except(gone_), std::memory_order_release);
        }
      } catch (const std::exception& e) {
        failed(e.what());
      } catch (...) {
        failed("unknown exception");
      }
    }
    if (log_.enabled(log_level::info)) {
      timespec t{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      log_.info("store: served " + std::to_string(core_.requests()) + " requests from " + std::to_string(next_id_ - first_id) +
                " connections, sent " + detail::fixed(static_cast<double>(core_.bytes_sent()) / (1 << 20), 1) + " MiB, in " +
                detail::fixed(1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec), 0) + " ms of CPU");
    }
  }
  // The loop itself failed (out of memory, most likely): record why, tell every waiting rank,
  // pause a moment so that a lasting cause does not spin, and go on serving what it can.
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
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int next_timeout_ms(clock::time_point now) const {
    auto until = core_.next_deadline();
    if (accept_paused_) until = std::min(until, accept_pause_until_);
    if (until == clock::time_point::max()) return -1;
    if (until <= now) return 0;
    return static_cast<int>(std::min<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1, 1 << 30));
  }
  void set_accepting(bool on) {
    epoll_event e{};
    e.events = on ? std::uint32_t{EPOLLIN} : 0u;
    e.data.u64 = tag_listen;
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, acc_.native_handle(), &e);
    accept_paused_ = !on;
  }
  void accept_all() {
    for (;;) {
      sockaddr_storage sa{};
      socklen_t sl = sizeof sa;
      const int fd = ::accept4(acc_.native_handle(), reinterpret_cast<sockaddr*>(&sa), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        // A store that cannot accept every rank cannot set the job up: fail the waits of the ranks
        // accepted so far with the reason, and close the connections queued behind (accepted
        // with the spare descriptor, closed at once) so that no rank waits for its deadline.
        if (!out_of_fds_.exchange(true, std::memory_order_acq_rel) && !core_.lost())
          core_.declare_lost(bootstrap::fd_exhausted("rank 0: the store cannot accept a rank's connection", 0).what());
        accept_pause_until_ = clock::now() + std::chrono::milliseconds(50);  // no spin while none is free
        set_accepting(false);
        if (spare_ >= 0) {
          ::close(spare_);
          spare_ = -1;
          for (int f; (f = ::accept(acc_.native_handle(), nullptr, nullptr)) >= 0;) ::close(f);
          spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: none left
      }
      const std::uint64_t id = next_id_++;
      if (!core_.open(id, detail::peer_text(reinterpret_cast<const sockaddr*>(&sa)), clock::now())) {
        ::close(fd);  // over a limit on connections: turned away at once
        continue;
      }
      detail::tune_control_socket(fd, core_.limits().liveness);
      epoll_event e{};
      e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;  // edge-triggered: read and write until EAGAIN
      e.data.u64 = id;
      if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e) != 0) {
        ::close(fd);
        core_.hangup(id);
        continue;
      }
      fds_.emplace(id, fd);
    }
  }
  // Reads what `id` sent, handing the core one chunk at a time (it drops a stranger at its first
  // bad bytes, so junk is never buffered).
  void read_from(std::uint64_t id) {
    auto it = fds_.find(id);
    if (it == fds_.end()) return;
    char buf[65536];
    for (;;) {
      if (!core_.output(id)) return;  // dropped meanwhile
      ssize_t r = ::recv(it->second, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        core_.received(id, buf, static_cast<std::size_t>(r));
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) core_.hangup(id);  // what came before still counted
      return;
    }
  }
  void flush(std::uint64_t id) {
    auto it = fds_.find(id);
    std::string* out = core_.output(id);
    if (it == fds_.end() || !out) return;
    while (!out->empty()) {
      ssize_t w = ::send(it->second, out->data(), out->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        out->erase(0, static_cast<std::size_t>(w));
        core_.count_sent(static_cast<std::size_t>(w));
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // the rest when EPOLLOUT says so
      core_.hangup(id);
      return;
    }
  }
  void close(std::uint64_t id) {
    auto it = fds_.find(id);
    if (it == fds_.end()) return;
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, it->second, nullptr);
    ::close(it->second);
    fds_.erase(it);
  }

  static constexpr std::uint64_t first_id = 16;
  asio::io_context io_;
  detail::net::tcp_acceptor acc_;
  logger log_;
  store_core core_;
  int ep_ = -1;                                 // the epoll instance
  bool accept_paused_ = false;                  // listener out of the interest set until accept_pause_until_
  clock::time_point accept_pause_until_{};      // (out of descriptors)
  std::atomic<bool> out_of_fds_{false};  // accept failed for want of descriptors (see accept_all, linger)
  int spare_ = -1;                         // a descriptor held back to turn connections away when out of them
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{1 << 30};  // connected ranks that have not said goodbye (1<<30: not counted yet)
  std::mutex gone_m_;                  // guards gone_
  std::vector<int> gone_;              // ranks not waited for (linger)
  std::uint64_t next_id_ = first_id;
  std::unordered_map<std::uint64_t, int> fds_;  // connection id -> socket
  mutable std::mutex failure_m_;
  std::string failure_;
  std::thread thread_;
};

}  // namespace gsync::bootstrap
