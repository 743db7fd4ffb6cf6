#pragma once
/// \file
/// The member functions of `transport::heartbeat` (transport/mesh/heartbeat.hpp, which says what
/// it does and why) that concern the whole: the listener, the thread and its io_context, its
/// events, the beat, accepting, the dial to the successor, and passing a loss on. One connection's
/// handshake and messages: heartbeat_flow.ipp.

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/socket_base.hpp>

#include <algorithm>
#include <cerrno>
#include <exception>

#include "gsync/transport/mesh/heartbeat.hpp"

namespace gsync::transport {

inline heartbeat::heartbeat(const asio::ip::address& addr, int rank, int size, std::chrono::milliseconds liveness,
                            const bootstrap::auth::job_key& key, logger log)
    : rank_(rank), size_(size), log_(std::move(log)),
      period_(std::clamp<std::chrono::milliseconds>(liveness / 10, std::chrono::milliseconds(20), std::chrono::milliseconds(1000))),
      dead_after_(liveness * 6 / 10), key_(&key), proto_(addr.is_v6() ? asio::ip::tcp::v6() : asio::ip::tcp::v4()), acc_(io_),
      beat_timer_(io_), dial_timer_(io_), accept_retry_(io_) {
  const asio::ip::tcp::endpoint ep(addr, 0);
  // Made close-on-exec at once (a program started meanwhile by another thread must not hold it).
  const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat listener: " + detail::errno_text(errno));
  asio::error_code ec;
  acc_.assign(proto_, fd, ec);
  if (ec) {
    ::close(fd);
    throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat listener: " + ec.message());
  }
  acc_.bind(ep, ec);
  if (!ec) acc_.listen(16, ec);
  if (!ec) port_ = acc_.local_endpoint(ec).port();
  if (ec) throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat listener on " + addr.to_string() + ": " + ec.message());
  // Before ring() too: a neighbour that finished its set-up first watches this rank already.
  wait_accept();
  beat_timer_.expires_after(period_);
  beat_timer_.async_wait(on_event{this, nullptr, ev::beat, 0});
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    throw error(errc::system, "rank " + std::to_string(rank_) + ": heartbeat thread: " + e.what());
  }
}

inline heartbeat::~heartbeat() {
  // Destroyed while an exception unwinds (the rank is failing out): no goodbye, so that the
  // neighbours report it gone, as the store does (bootstrap/store_client.hpp).
  bye_ = std::uncaught_exceptions() == 0;  // read by the thread after the post below
  try {
    asio::post(io_, on_event{this, nullptr, ev::stop, 0});
  } catch (...) {
    io_.stop();  // no memory for the goodbye: stop without it
  }
  if (thread_.joinable()) thread_.join();
  // The thread is gone: handlers not run are destroyed, never called, with io_ (declared first,
  // it dies after the sockets and timers, whose pending waits it holds).
}

inline void heartbeat::ring(const std::string& succ_addr, std::uint16_t succ_port, std::uint64_t nonce, news_fn on_news) {
  {
    std::lock_guard lk(m_);
    given_.succ_addr = succ_addr;
    given_.succ_port = succ_port;
    given_.nonce = nonce;
    given_.on_news = std::move(on_news);
  }
  asio::post(io_, on_event{this, nullptr, ev::ring, 0});
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
    io_.run();  // until stop_now(); the beat's timer is always armed until then
  } catch (const std::exception& e) {
    // Nothing may escape a thread; without the heartbeat the data connections' keepalive and
    // TCP_USER_TIMEOUT still bound a silent peer's cost.
    try {
      log_.warn("rank " + std::to_string(rank_) + ": the heartbeat stopped: " + e.what());
    } catch (...) {
    }
  }
}

// Every handler of the thread comes here. A connection's handler first gives back its hold on
// it: a dropped connection is erased by the last one (its waits were cancelled by the drop).
inline void heartbeat::handle(const on_event& h, const asio::error_code& e) {
  const bool aborted = e == asio::error::operation_aborted;
  if (h.c) {
    conn& c = *h.c;
    --c.waits;
    if (h.what == ev::read) c.reading = false;
    if (h.what == ev::write) c.writing = false;
    if (h.what == ev::connect) c.connecting = false;
    if (c.closed) {
      if (c.waits == 0) conns_.remove_if([&c](const conn& x) { return &x == &c; });
      return;
    }
    if (aborted || stopping_) return;
    switch (h.what) {
      case ev::read: return on_readable(c);
      case ev::write: pump(c); return;  // an error shows in the write
      case ev::timer:
        if (!e && h.gen == c.timer_gen) on_timer(c);
        return;
      case ev::connect: return on_connected(c, e);
      case ev::broke: return broke(c);
      default: return;
    }
  }
  if (stopping_ || aborted) return;
  switch (h.what) {
    case ev::beat: return beat_all();
    case ev::dial: return dial();
    case ev::accept: return accept_some();
    case ev::accept_retry: return wait_accept();
    case ev::ring: return start_ring();
    case ev::stop: return stop_now();
    default: return;
  }
}

// Goodbye: the neighbours stop watching this rank (best effort: non-blocking); then run() returns.
inline void heartbeat::stop_now() {
  stopping_ = true;
  if (bye_)
    for (auto& c : conns_)
      if (!c.closed && c.role == conn::up) send(c, bye);
  io_.stop();
}

// A beat to every neighbour connected, every period.
inline void heartbeat::beat_all() {
  for (auto& c : conns_)
    if (!c.closed && c.role == conn::up) send(c, beat);
  beat_timer_.expires_after(period_);
  beat_timer_.async_wait(on_event{this, nullptr, ev::beat, 0});
}

// ring() was called: the job's nonce is known, and the successor is dialed.
inline void heartbeat::start_ring() {
  {
    std::lock_guard lk(m_);
    succ_addr_ = given_.succ_addr;
    succ_port_ = given_.succ_port;
    nonce_ = given_.nonce;
    on_news_ = given_.on_news;
  }
  if (!ringing_) {
    ringing_ = true;
    // A predecessor's early hello must have named this job's nonce.
    for (auto& c : conns_)
      if (!c.closed && c.role == conn::up && !c.outgoing && c.nonce != nonce_) {
        log_.warn("rank " + std::to_string(rank_) + ": heartbeat: a connection named another job; dropped");
        drop(c);
      }
  }
  dial();
}

// A loss was heard: tell the owner once, and pass it on to every other neighbour.
inline void heartbeat::learn(int rank, bool silent, const std::string& why, const conn* from) {
  if (rank < 0 || rank >= size_ || rank == rank_ || !known_.insert(rank).second) return;
  // Passed on first: the ranks further round the ring hear of it before this rank's owner acts
  // (a rank that fails closes its connections, and a peer that sees that first looks in the store,
  // which may be frozen with the rank lost).
  for (auto& c : conns_)
    if (&c != from && !c.closed && c.role == conn::up && c.peer != rank) send(c, silent ? lost_silent : lost_exited, rank, why);
  if (on_news_) on_news_(news{rank, silent, why});
}

inline void heartbeat::wait_accept() { acc_.async_wait(asio::socket_base::wait_read, on_event{this, nullptr, ev::accept, 0}); }

// Takes every connection waiting on the listener. accept4 rather than Asio's accept: the socket
// is close-on-exec from its first moment.
inline void heartbeat::accept_some() {
  for (;;) {
    const int fd = ::accept4(acc_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return wait_accept();
      // Out of descriptors, most likely: the listener stays readable, so try again a period
      // later rather than spin.
      accept_retry_.expires_after(period_);
      accept_retry_.async_wait(on_event{this, nullptr, ev::accept_retry, 0});
      return;
    }
    std::size_t pending = 0;
    conn* silent = nullptr;  // the oldest being admitted that has sent nothing
    for (auto& c : conns_) {
      if (c.closed || c.role != conn::admitting) continue;
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
      drop(*silent);
    }
    detail::tune_control_socket(fd, dead_after_ + period_);
    conn* c = nullptr;
    try {
      c = &add_conn();
    } catch (...) {
      ::close(fd);
      throw;
    }
    asio::error_code ec;
    c->sock.assign(proto_, fd, ec);
    if (ec) {  // the reactor could not take it
      ::close(fd);
      drop(*c);
      continue;
    }
    c->role = conn::admitting;
    c->until = clock::now() + stranger_time;
    arm_timer(*c, c->until);
    watch_read(*c);
  }
}

inline void heartbeat::retry_dial(clock::time_point at) {
  next_dial_ = at;
  dial_timer_.expires_at(at);
  dial_timer_.async_wait(on_event{this, nullptr, ev::dial, 0});
}

// Starts (or retries) the connection to the successor.
inline void heartbeat::dial() {
  if (!ringing_ || dialed_) return;
  if (succ_port_ == 0 || size_ < 2) {
    dialed_ = true;
    settle_dial();
    return;
  }
  const auto now = clock::now();
  if (now < next_dial_) return;  // the dial timer calls again then
  if (dial_give_up_ == clock::time_point{}) dial_give_up_ = now + std::max(dead_after_, std::chrono::milliseconds(2000));
  if (now > dial_give_up_) {  // refused all along: the successor left before this rank looked (not a loss)
    dialed_ = true;
    settle_dial();
    return;
  }
  asio::error_code ec;
  const auto ip = asio::ip::make_address(succ_addr_, ec);
  if (ec) {
    dialed_ = true;
    settle_dial();
    log_.warn("rank " + std::to_string(rank_) + ": heartbeat: bad address '" + succ_addr_ + "' of rank " + std::to_string((rank_ + 1) % size_));
    return;
  }
  const asio::ip::tcp::endpoint ep(ip, succ_port_);
  const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return retry_dial(now + period_);
  detail::tune_control_socket(fd, dead_after_ + period_);
  conn* c = nullptr;
  try {
    c = &add_conn();
  } catch (...) {
    ::close(fd);
    throw;
  }
  c->sock.assign(ep.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    drop(*c);
    return retry_dial(now + period_);
  }
  c->role = conn::dialing;
  c->outgoing = true;
  c->peer = (rank_ + 1) % size_;
  c->until = now + std::max(dead_after_, std::chrono::milliseconds(2000));
  c->cs = std::make_unique<bootstrap::auth::client_steps>(*key_);
  c->out = c->cs->hello();  // sent once connected
  dialed_ = true;
  arm_timer(*c, c->until);  // from now: a connect that hangs counts too
  c->connecting = true;
  ++c->waits;
  c->sock.async_connect(ep, on_event{this, c, ev::connect, 0});
}

}  // namespace gsync::transport
