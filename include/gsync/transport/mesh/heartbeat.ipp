#pragma once
/// \file
/// The member functions of `transport::heartbeat` (transport/mesh/heartbeat.hpp, which says what
/// it does and why): the listener and thread, the ring's two connections and their handshakes,
/// beats, silence, goodbyes, and passing a loss on.

#include "gsync/transport/mesh/heartbeat.hpp"

namespace gsync::transport {

inline heartbeat::heartbeat(const asio::ip::address& addr, int rank, int size, std::chrono::milliseconds liveness,
                            const bootstrap::auth::job_key& key, logger log)
    : rank_(rank), size_(size), log_(std::move(log)),
      period_(std::clamp<std::chrono::milliseconds>(liveness / 10, std::chrono::milliseconds(20), std::chrono::milliseconds(1000))),
      dead_after_(liveness * 6 / 10), key_(&key) {
  const asio::ip::tcp::endpoint ep(addr, 0);
  listen_fd_ = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat listener: " + detail::errno_text(errno));
  sockaddr_storage sa{};
  socklen_t sl = sizeof sa;
  if (::bind(listen_fd_, ep.data(), static_cast<socklen_t>(ep.size())) != 0 || ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &sl) != 0) {
    const int e = errno;
    ::close(listen_fd_);
    throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat listener on " + addr.to_string() + ": " + detail::errno_text(e));
  }
  port_ = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int e = errno;
    ::close(listen_fd_);
    throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat: eventfd: " + detail::errno_text(e));
  }
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    ::close(listen_fd_);
    ::close(wake_fd_);
    throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat thread: " + e.what());
  }
}

inline heartbeat::~heartbeat() {
  // Destroyed while an exception unwinds (the rank is failing out): no goodbye, so that the
  // neighbours report it gone, as the store does (bootstrap/store_client.hpp).
  bye_.store(std::uncaught_exceptions() == 0, std::memory_order_relaxed);
  stop_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto w = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (auto& c : conns_) close_conn(c);
  ::close(listen_fd_);
  ::close(wake_fd_);
}

inline void heartbeat::ring(const std::string& succ_addr, std::uint16_t succ_port, std::uint64_t nonce, news_fn on_news) {
  {
    std::lock_guard lk(m_);
    succ_addr_ = succ_addr;
    succ_port_ = succ_port;
    nonce_ = nonce;
    on_news_ = std::move(on_news);
    ring_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto w = ::write(wake_fd_, &one, sizeof one);
  std::unique_lock lk(m_);
  settled_cv_.wait_for(lk, std::max(dead_after_, std::chrono::milliseconds(2000)), [&] { return dial_settled_; });
}

// The successor's connection is up, or given up: ring() may return.
inline void heartbeat::settle_dial() {
  std::lock_guard lk(m_);
  if (dial_settled_) return;
  dial_settled_ = true;
  settled_cv_.notify_all();
}

inline void heartbeat::run() noexcept {
  ::pthread_setname_np(::pthread_self(), "gsync-heartbeat");  // for top -H, perf and debuggers
  try {
    loop();
  } catch (const std::exception& e) {
    // Nothing may escape a thread; without the heartbeat the data connections' keepalive and
    // TCP_USER_TIMEOUT still bound a silent peer's cost.
    try {
      log_.warn("rank " + std::to_string(rank_) + ": the heartbeat stopped: " + e.what());
    } catch (...) {
    }
  }
}

inline std::string heartbeat::neighbour(const conn& c) const {
  return c.peer >= 0 ? "rank " + std::to_string(c.peer) : std::string("a connection being admitted");
}

inline void heartbeat::close_conn(conn& c) noexcept {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
}

// Queues a message on an established connection and writes what the socket takes now.
inline void heartbeat::send(conn& c, kind k, int rank, const std::string& text) {
  msg_header h;
  h.k = k;
  h.rank = rank;
  h.len = static_cast<std::uint32_t>(std::min<std::size_t>(text.size(), max_text));
  if (c.out.size() > 64 * 1024) return;  // a neighbour that reads nothing: beats can wait, its silence is judged by what it sends
  c.out.append(reinterpret_cast<const char*>(&h), sizeof h);
  c.out.append(text.data(), h.len);
  flush(c);
}

// Writes queued bytes without blocking; false when the connection broke.
inline bool heartbeat::flush(conn& c) {
  while (!c.out.empty()) {
    const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c.out.erase(0, static_cast<std::size_t>(w));
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (w < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

// A rank was lost: tell the owner once, and pass it on to every other neighbour.
inline void heartbeat::learn(int rank, bool silent, const std::string& why, const conn* from) {
  if (rank < 0 || rank >= size_ || rank == rank_ || !known_.insert(rank).second) return;
  // Passed on first: the ranks further round the ring hear of it before this rank's owner acts
  // (a rank that fails closes its connections, and a peer that sees that first looks in the store,
  // which may be frozen with the rank lost).
  for (auto& c : conns_)
    if (&c != from && c.role == conn::up && c.fd >= 0 && c.peer != rank) send(c, silent ? lost_silent : lost_exited, rank, why);
  news_fn fn;
  {
    std::lock_guard lk(m_);
    fn = on_news_;
  }
  if (fn) fn(news{rank, silent, why});
}

// Starts (or retries) the connection to the successor, non-blocking.
inline void heartbeat::dial(std::chrono::steady_clock::time_point now) {
  std::string addr;
  std::uint16_t port;
  {
    std::lock_guard lk(m_);
    addr = succ_addr_;
    port = succ_port_;
  }
  if (!ringing_ || dialed_) return;
  if (port == 0 || size_ < 2) {
    dialed_ = true;
    settle_dial();
    return;
  }
  if (now < next_dial_) return;
  if (dial_give_up_ == std::chrono::steady_clock::time_point{}) dial_give_up_ = now + std::max(dead_after_, std::chrono::milliseconds(2000));
  if (now > dial_give_up_) {  // refused all along: the successor left before this rank looked (not a loss)
    dialed_ = true;
    settle_dial();
    return;
  }
  asio::error_code ec;
  const auto ip = asio::ip::make_address(addr, ec);
  if (ec) {
    dialed_ = true;
    settle_dial();
    log_.warn("rank " + std::to_string(rank_) + ": heartbeat: bad address '" + addr + "' of rank " + std::to_string((rank_ + 1) % size_));
    return;
  }
  const asio::ip::tcp::endpoint ep(ip, port);
  const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    next_dial_ = now + period_;
    return;
  }
  detail::tune_control_socket(fd, dead_after_ + period_);
  if (::connect(fd, ep.data(), static_cast<socklen_t>(ep.size())) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    next_dial_ = now + period_;  // refused: its listener is gone or not up; try again
    return;
  }
  conn c;
  c.fd = fd;
  c.role = conn::dialing;
  c.outgoing = true;
  c.peer = (rank_ + 1) % size_;
  c.until = now + std::max(dead_after_, std::chrono::milliseconds(2000));
  c.nc = bootstrap::auth::fresh_nonce();
  c.out.append(bootstrap::auth::magic.data(), bootstrap::auth::magic.size());
  c.out.append(reinterpret_cast<const char*>(c.nc.data()), c.nc.size());
  dialed_ = true;
  conns_.push_back(std::move(c));
}

inline void heartbeat::accept_some(std::chrono::steady_clock::time_point now) {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or out of descriptors: the next poll tries again
    std::size_t pending = 0;
    conn* silent = nullptr;  // the oldest being admitted that has sent nothing
    for (auto& c : conns_) {
      if (c.fd < 0 || c.role != conn::admitting) continue;
      ++pending;
      if (!silent && c.step == 0 && c.in.empty() && c.out.empty()) silent = &c;
    }
    if (pending >= max_pending) {
      // A stranger's flood: its oldest silent connection makes room (a neighbour's dial speaks at
      // once); when every one has spoken, the new one is refused and the dialer tries again.
      if (!silent) {
        ::close(fd);
        continue;
      }
      close_conn(*silent);
    }
    detail::tune_control_socket(fd, dead_after_ + period_);
    conn c;
    c.fd = fd;
    c.role = conn::admitting;
    c.until = now + std::chrono::milliseconds(2000);  // a stranger's time, at most
    conns_.push_back(std::move(c));
  }
}

// The dialer's handshake: hello sent (queued in dial), the server's proof, ours, then the
// heartbeat hello naming this rank. True while it goes on or is done (role up).
inline bool heartbeat::drive_dialer(conn& c) {
  namespace au = bootstrap::auth;
  if (c.step == 0) {
    if (c.in.size() < au::challenge_bytes) return true;
    au::nonce ns{};
    au::mac ms{};
    std::memcpy(ns.data(), c.in.data(), au::nonce_bytes);
    std::memcpy(ms.data(), c.in.data() + au::nonce_bytes, au::mac_bytes);
    c.in.erase(0, au::challenge_bytes);
    if (!au::job_key::equal(ms, key_->sign(au::server_label, c.nc, ns))) {
      log_.warn("rank " + std::to_string(rank_) + ": heartbeat: rank " + std::to_string(c.peer) +
                "'s listener failed the job-key handshake (another job's process on its port?); not watched");
      return false;
    }
    const au::mac mine = key_->sign(au::client_label, ns, c.nc);
    c.out.append(reinterpret_cast<const char*>(mine.data()), mine.size());
    hello h;
    h.rank = rank_;
    h.size = size_;
    h.nonce = nonce_;
    c.out.append(reinterpret_cast<const char*>(&h), sizeof h);
    c.step = 1;
    c.role = conn::up;
    c.heard = std::chrono::steady_clock::now();
    settle_dial();
  }
  return true;
}

// The acceptor's side: the job-key handshake, then the hello, which must come from the
// predecessor of this job.
inline bool heartbeat::drive_admitter(conn& c) {
  if (!c.hs) c.hs = std::make_unique<bootstrap::auth::server_handshake>(*key_);
  if (c.step == 0) {
    const auto st = c.hs->feed(c.in, c.out);
    if (st == bootstrap::auth::server_handshake::state::failed) return false;
    if (st == bootstrap::auth::server_handshake::state::need_more) return true;
    c.step = 1;
  }
  if (c.in.size() < sizeof(hello)) return true;
  hello h;
  std::memcpy(&h, c.in.data(), sizeof h);
  c.in.erase(0, sizeof h);
  const int pred = (rank_ + size_ - 1) % size_;
  if (h.magic != hello{}.magic || h.version != 1 || h.size != size_ || h.rank != pred || (ringing_ && h.nonce != nonce_)) return false;
  c.nonce = h.nonce;
  c.peer = h.rank;
  c.role = conn::up;
  c.heard = std::chrono::steady_clock::now();
  c.hs.reset();
  return true;
}

// Reads what arrived and acts on it; false: drop the connection (closed, or garbage).
inline bool heartbeat::read_messages(conn& c, std::chrono::steady_clock::time_point now) {
  char buf[4096];
  bool eof = false, got = false;
  for (;;) {
    const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      if (c.in.size() + static_cast<std::size_t>(r) > 64 * 1024) return false;  // nobody of this job sends that much
      c.in.append(buf, static_cast<std::size_t>(r));
      got = true;
      continue;
    }
    if (r == 0) eof = true;
    else if (errno == EINTR) continue;
    else if (errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
    break;
  }
  if (c.role == conn::dialing && !drive_dialer(c)) return false;
  if (c.role == conn::admitting && !drive_admitter(c)) return false;
  if (c.role == conn::up) {
    if (got) c.heard = now;
    msg_header h;
    std::string text;
    for (int got_one; (got_one = take_message(c.in, h, text)) != 0;) {
      if (got_one < 0) {
        log_.warn("rank " + std::to_string(rank_) + ": heartbeat: garbage from " + neighbour(c) + "; no longer watched");
        return false;
      }
      if (h.k == bye) {
        c.peer = -1;  // left normally: nothing to report when the connection closes
        return false;
      }
      if (h.k == lost_silent || h.k == lost_exited) learn(h.rank, h.k == lost_silent, text, &c);
    }
  }
  if (eof) {
    if (c.role == conn::up && c.peer >= 0)
      learn(c.peer, false, "rank " + std::to_string(c.peer) + " closed its connection without a goodbye (it exited or was killed; seen by rank " +
                               std::to_string(rank_) + ")",
            &c);
    return false;
  }
  return true;
}

inline bool heartbeat::drive(conn& c, std::chrono::steady_clock::time_point now) {
  if (!flush(c)) {
    if (c.role == conn::up && c.peer >= 0)
      learn(c.peer, false, "rank " + std::to_string(c.peer) + "'s connection broke (seen by rank " + std::to_string(rank_) + ")", &c);
    return false;
  }
  if (c.role != conn::up && now > c.until) {
    // A successor whose kernel took the connection but whose heartbeat never answered stopped
    // (its thread runs from its set-up on); a stranger is just dropped.
    if (c.role == conn::dialing) settle_dial();
    if (c.role == conn::dialing)
      learn(c.peer, true, "rank " + std::to_string(c.peer) + " did not answer its heartbeat connection within " +
                              std::to_string(std::max(dead_after_, std::chrono::milliseconds(2000)).count()) +
                              " ms (stopped, or its host or link is gone; seen by rank " + std::to_string(rank_) + ")",
            &c);
    return false;
  }
  if (c.role == conn::up && c.peer >= 0 && now - c.heard > dead_after_) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - c.heard).count();
    learn(c.peer, true, "rank " + std::to_string(c.peer) + " stopped answering: no heartbeat for " + std::to_string(ms) +
                            " ms (the process is stopped or hung, or its host or link is gone; seen by rank " + std::to_string(rank_) + ")",
          &c);
    return false;
  }
  return true;
}

inline void heartbeat::loop() {
  std::vector<pollfd> pf;
  next_beat_ = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    auto now = std::chrono::steady_clock::now();
    if (!ringing_) {
      std::lock_guard lk(m_);
      ringing_ = ring_;
      if (ringing_)  // the job's nonce is known now: a predecessor's early hello must have named it
        for (auto& c : conns_)
          if (c.role == conn::up && !c.outgoing && c.nonce != nonce_) {
            log_.warn("rank " + std::to_string(rank_) + ": heartbeat: a connection named another job; dropped");
            close_conn(c);
          }
    }
    dial(now);
    if (now >= next_beat_) {  // before ring() too: a neighbour that finished its set-up first watches this rank already
      for (auto& c : conns_)
        if (c.role == conn::up && c.fd >= 0) send(c, beat);
      next_beat_ = now + period_;
    }
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const conn& c) { return c.fd < 0; }), conns_.end());
    pf.clear();
    pf.push_back({wake_fd_, POLLIN, 0});
    pf.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : conns_) pf.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    // Until the next beat, or sooner when a connection's time runs out.
    auto wake = next_beat_;
    for (auto& c : conns_) wake = std::min(wake, c.role == conn::up ? c.heard + dead_after_ + std::chrono::milliseconds(1) : c.until);
    if (ringing_ && !dialed_) wake = std::min(wake, next_dial_);
    const int ms = static_cast<int>(std::clamp<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count(), 0, 1000));
    const int r = ::poll(pf.data(), pf.size(), ms);
    if (r < 0 && errno != EINTR) throw error(errc::system, std::string("heartbeat poll: ") + detail::errno_text(errno));
    if (stop_.load(std::memory_order_acquire)) break;
    now = std::chrono::steady_clock::now();
    if (r > 0 && (pf[0].revents & POLLIN)) {
      std::uint64_t v;
      [[maybe_unused]] const auto rd = ::read(wake_fd_, &v, sizeof v);
    }
    if (r > 0 && (pf[1].revents & POLLIN)) accept_some(now);
    const std::size_t n = pf.size() - 2;  // connections accepted just now are polled next round
    for (std::size_t i = 0; i < n; ++i) {
      conn& c = conns_[i];
      const short re = r > 0 ? pf[i + 2].revents : 0;
      bool keep = true;
      if (re & (POLLIN | POLLHUP | POLLERR)) keep = read_messages(c, now);
      if (keep) keep = drive(c, now);
      if (!keep) {
        // A dial that failed before its handshake (refused, reset) is tried again, unless the
        // successor was reported lost.
        if (c.role == conn::dialing && !known_.count(c.peer)) {
          dialed_ = false;
          next_dial_ = now + period_;
        }
        close_conn(c);
      }
    }
  }
  // Goodbye: the neighbours stop watching this rank (best effort: non-blocking).
  if (bye_.load(std::memory_order_relaxed))
    for (auto& c : conns_)
      if (c.role == conn::up && c.fd >= 0) send(c, bye);
}

}  // namespace gsync::transport
