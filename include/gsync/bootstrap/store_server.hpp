#pragma once
/// \file
/// The rendezvous store's server (bootstrap/store.hpp), run by rank 0: a TCP listener and a poll loop
/// on its own thread (Asio sockets) that authenticates clients, answers their requests, parks gets and
/// waits until their keys exist or their deadlines pass, and reports a lost rank to every waiter.

#include <fcntl.h>
#include <poll.h>
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
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/core/error.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/socket.hpp"

namespace gsync::bootstrap {

/// The store server. Runs a poll loop on its own thread from construction to destruction.
class store_server {
 public:
  /// Listens on `bind_addr`:`port` (port 0 = any free port; see `port()`); clients must prove `key`.
  store_server(const std::string& bind_addr, std::uint16_t port, logger log = {},
               auth::job_key key = auth::job_key::from_env())
      : acc_(io_), log_(log), key_(std::move(key)) {
    asio::error_code ec;
    auto addr = asio::ip::make_address(bind_addr, ec);
    if (ec) throw error(errc::invalid_argument, "store: bad bind address '" + bind_addr + "'");
    asio::ip::tcp::endpoint ep(addr, port);
    acc_.open(ep.protocol(), ec);
    if (!ec) acc_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc_.bind(ep, ec);
    if (!ec) acc_.listen(1024, ec);
    if (ec)
      throw error(errc::system, "store: cannot listen on " + bind_addr + ":" + std::to_string(port) + ": " + ec.message() +
                                    (ec == asio::error::address_in_use ? " (another job, or another communicator of this job still open, on this port? set GSYNC_MASTER_PORT)" : ""));
    acc_.non_blocking(true);
    if (::pipe(wake_) != 0) throw error(errc::system, "store: pipe: " + detail::errno_text(errno));
    spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // see accept_all
    thread_ = std::thread([this] { run(); });
  }
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server() {
    stop_ = true;
    char c = 0;
    [[maybe_unused]] auto r = ::write(wake_[1], &c, 1);
    if (thread_.joinable()) thread_.join();
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
  void linger(std::chrono::steady_clock::time_point dl) const {
    while (active_.load(std::memory_order_acquire) > 0 && !out_of_fds_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < dl)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  /// The port the server listens on.
  std::uint16_t port() const { return acc_.local_endpoint().port(); }

 private:
  using clock = std::chrono::steady_clock;
  struct client {
    detail::net::tcp_socket s;
    std::string in, out;
    bool dead = false;
    std::unique_ptr<auth::server_handshake> hs;  // until the client has proved the key
    clock::time_point since{};                   // when it connected
    std::string from;                            // its address, for logs
    int rank = -1;                               // announced by hello
    bool left = false;                           // said bye
  };
  static constexpr auto handshake_limit = std::chrono::seconds(10);
  struct parked {
    client* c;
    std::uint8_t cmd;
    std::vector<std::string> keys;
    clock::time_point dl;
    std::size_t have = 0;  // keys[0 .. have) exist (keys are never removed): each set resumes there
  };

  void run() {
    while (!stop_) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      auto now = clock::now();
      const bool accepting = now >= accept_pause_until_;  // paused after running out of descriptors
      fds.push_back({acc_.native_handle(), static_cast<short>(accepting ? POLLIN : 0), 0});
      for (auto& c : clients_) fds.push_back({c->s.native_handle(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
      int timeout = accepting ? -1 : 50;
      for (auto& c : clients_)
        if (c->hs) timeout = 1000;  // check the handshake deadline now and then
      for (auto& p : parked_) {
        int ms = static_cast<int>(std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(p.dl - now).count() + 1));
        timeout = timeout < 0 ? ms : std::min(timeout, ms);
      }
      int r = ::poll(fds.data(), fds.size(), timeout);
      if (r < 0 && errno != EINTR) break;
      if (stop_) break;
      if (fds[1].revents & POLLIN) accept_all();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        client& c = *clients_[i - 2];
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        if (!c.dead && !c.out.empty() && (fds[i].revents & POLLOUT)) flush(c);
      }
      expire_parked();
      reap();
    }
  }
  void accept_all() {
    for (;;) {
      auto c = std::make_unique<client>(client{detail::net::tcp_socket(io_), {}, {}, false, nullptr, clock::now(), {}});
      asio::error_code ec;
      acc_.accept(c->s, ec);
      if (bootstrap::out_of_descriptors(ec)) {
        // A store that cannot accept every rank cannot set the job up: fail the waits of the ranks
        // accepted so far with the reason, and close the connections queued behind (accepted
        // with the spare descriptor, closed at once) so that no rank waits for its deadline.
        if (!out_of_fds_.exchange(true, std::memory_order_acq_rel) && lost_.empty())
          declare_lost(bootstrap::fd_exhausted("rank 0: the store cannot accept a rank's connection", 0).what());
        accept_pause_until_ = clock::now() + std::chrono::milliseconds(50);  // no spin while none is free
        if (spare_ >= 0) {
          ::close(spare_);
          spare_ = -1;
          for (int fd; (fd = ::accept(acc_.native_handle(), nullptr, nullptr)) >= 0;) ::close(fd);
          spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return;
      }
      if (ec) return;
      c->hs = std::make_unique<auth::server_handshake>(key_);
      asio::error_code ig;
      const auto peer = c->s.remote_endpoint(ig);
      c->from = peer.address().to_string() + ":" + std::to_string(peer.port());
      detail::set_nonblocking(c->s.native_handle());
      c->s.set_option(asio::ip::tcp::no_delay(true), ig);
      clients_.push_back(std::move(c));
    }
  }
  void read_from(client& c) {
    char buf[65536];
    bool eof = false;  // requests that came before the EOF still count (a goodbye, typically)
    for (;;) {
      ssize_t r = ::recv(c.s.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        c.in.append(buf, static_cast<std::size_t>(r));
        if (c.in.size() > store_proto::max_frame + 8) return drop(c, "oversized request");
        continue;
      }
      if (r == 0) { eof = true; break; }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      break;
    }
    process(c);
    if (eof) c.dead = true;
  }
  void process(client& c) {
    if (!c.dead && c.hs) {
      const auto st = c.hs->feed(c.in, c.out);
      if (st == auth::server_handshake::state::failed) return drop(c, "connection from " + c.from + " rejected: " + c.hs->why());
      if (st == auth::server_handshake::state::need_more) {
        if (!c.out.empty()) flush(c);
        return;
      }
      c.hs.reset();  // authenticated; requests may follow in the same read
    }
    while (!c.dead && c.in.size() >= 4) {
      std::uint32_t len;
      std::memcpy(&len, c.in.data(), 4);
      if (len == 0 || len > store_proto::max_frame) return drop(c, "bad request length " + std::to_string(len));
      if (c.in.size() < 4 + std::size_t{len}) break;
      std::string frame = c.in.substr(4, len);
      c.in.erase(0, 4 + std::size_t{len});
      handle(c, frame);
    }
    if (!c.dead && !c.out.empty()) flush(c);
  }
  void drop(client& c, const std::string& why) {
    log_.warn("store: dropping client connection: " + why);
    c.dead = true;
  }
  void reply(client& c, std::uint8_t st, const std::string& body = {}) {
    store_proto::put<std::uint32_t>(c.out, static_cast<std::uint32_t>(1 + body.size()));
    c.out.push_back(static_cast<char>(st));
    c.out += body;
  }
  // Resumes at the first key not seen yet, so that N ranks parked on N records cost O(N) lookups
  // per set in all, not O(N^2) (set-up of hundreds of ranks).
  bool ready(parked& p) const {
    while (p.have < p.keys.size() && kv_.count(p.keys[p.have])) ++p.have;
    return p.have == p.keys.size();
  }
  void answer(parked& p) {
    if (!lost_.empty() && !ready(p)) return reply(*p.c, store_proto::st_lost, lost_);
    if (p.cmd == store_proto::cmd_get) {
      std::string b;
      store_proto::put_str(b, kv_.at(p.keys[0]));
      reply(*p.c, store_proto::st_ok, b);
    } else if (p.cmd == store_proto::cmd_mget) {
      std::size_t total = 1;
      for (auto& k : p.keys) total += 4 + kv_.at(k).size();
      if (total > store_proto::max_frame) return reply(*p.c, store_proto::st_bad);  // the client says the request was refused
      std::string b;
      b.reserve(total);
      for (auto& k : p.keys) store_proto::put_str(b, kv_.at(k));
      reply(*p.c, store_proto::st_ok, b);
    } else {
      reply(*p.c, store_proto::st_ok);
    }
  }
  void handle(client& c, const std::string& frame) {
    using namespace store_proto;
    request rq;
    std::string why;
    if (!parse_request(frame, rq, why)) return drop(c, why);
    switch (rq.cmd) {
      case cmd_set: {
        const std::string key = rq.keys[0];
        kv_[key] = std::move(rq.value);
        reply(c, st_ok);
        wake_parked();
        // A rank recording its failure ("gsync/failed/R" = "<errc> <message>") is going down: the
        // ranks waiting for keys it would have set learn why now, not when its connection closes
        // (a rank that fails in set-up, before its hello, is never counted as lost).
        if (constexpr std::string_view failed = "gsync/failed/"; lost_.empty() && key.starts_with(failed)) {
          const std::string& v = kv_[key];
          declare_lost("rank " + key.substr(failed.size()) + " failed: " + v.substr(std::min(v.size(), v.find(' ') + 1)));
        }
        return;
      }
      case cmd_get: case cmd_wait: case cmd_mget: {
        parked p{&c, rq.cmd, std::move(rq.keys), clock::now() + std::chrono::milliseconds(rq.timeout_ms)};
        if (ready(p) || !lost_.empty()) answer(p);
        else parked_.push_back(std::move(p));
        return;
      }
      case cmd_add: {
        std::int64_t v = 0;
        if (auto it = kv_.find(rq.keys[0]); it != kv_.end()) {
          try { v = std::stoll(it->second); } catch (...) { v = 0; }
        }
        if (__builtin_add_overflow(v, rq.delta, &v)) return drop(c, "add overflows a 64-bit counter");
        kv_[rq.keys[0]] = std::to_string(v);
        std::string b;
        put<std::int64_t>(b, v);
        reply(c, st_ok, b);
        wake_parked();
        return;
      }
      case cmd_hello: {
        // Each rank joins a store once. A second hello of a rank comes from the job's next
        // communicator, made from the same variables while this store still waits for its own
        // ranks to leave: turned away, not counted, so that it connects again to the next store.
        const bool mine = joined_.insert(rq.rank).second;
        if (mine) c.rank = rq.rank;
        reply(c, st_ok, std::string(1, mine ? '\1' : '\0'));
        return;
      }
      case cmd_bye:
        c.left = true;
        return;
      default: {  // cmd_check
        std::string b(1, kv_.count(rq.keys[0]) ? '\1' : '\0');
        reply(c, st_ok, b);
        return;
      }
    }
  }
  void wake_parked() {
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (!it->c->dead && ready(*it)) {
        answer(*it);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void expire_parked() {
    auto now = clock::now();
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (now >= it->dl) {
        if (!it->c->dead) reply(*it->c, store_proto::st_timeout);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& c : clients_)
      if (!c->dead && !c->out.empty()) flush(*c);
  }
  void flush(client& c) {
    while (!c.out.empty()) {
      ssize_t w = ::send(c.s.native_handle(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) { c.out.erase(0, static_cast<std::size_t>(w)); continue; }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;
      return;
    }
  }
  /// Records the first loss (`why`) and answers every parked wait that cannot be met with it.
  void declare_lost(const std::string& why) {
    lost_ = why;
    log_.warn("store: " + lost_);
    kv_["gsync/lost"] = lost_;
    for (auto& p : parked_)
      if (!p.c->dead) answer(p);
    parked_.clear();
    for (auto& o : clients_)
      if (!o->dead && !o->out.empty()) flush(*o);
  }
  void reap() {
    const auto now = clock::now();
    for (auto& c : clients_)
      if (!c->dead && c->hs && now - c->since > handshake_limit)
        drop(*c, "connection from " + c->from + " did not authenticate within 10 s");
    for (auto& c : clients_)
      if (c->dead && c->rank >= 0 && !c->left && lost_.empty()) {
        // A rank that failed said why first (transport/mesh/failure.ipp: "gsync/failed/R" = "<errc> <message>"):
        // its message names the rank whose loss started it.
        if (auto f = kv_.find("gsync/failed/" + std::to_string(c->rank)); f != kv_.end())
          lost_ = "rank " + std::to_string(c->rank) + " failed: " + f->second.substr(std::min(f->second.size(), f->second.find(' ') + 1));
        else
          lost_ = "rank " + std::to_string(c->rank) + " is lost (its connection to the store closed without goodbye: "
                  "the process died, was killed, or failed)";
        declare_lost(lost_);
      }
    std::erase_if(parked_, [](const parked& p) { return p.c->dead; });
    std::erase_if(clients_, [](const std::unique_ptr<client>& c) { return c->dead; });
    int active = 0;
    for (auto& c : clients_) active += c->rank >= 0 && !c->left;
    active_.store(active, std::memory_order_release);
  }

  asio::io_context io_;
  detail::net::tcp_acceptor acc_;
  logger log_;
  clock::time_point accept_pause_until_{};  // listener not polled before this (out of descriptors)
  std::atomic<bool> out_of_fds_{false};  // accept failed for want of descriptors (see accept_all, linger)
  int spare_ = -1;                         // a descriptor held back to turn connections away when out of them
  auth::job_key key_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{1 << 30};  // connected ranks that have not said goodbye (1<<30: not counted yet)
  std::vector<std::unique_ptr<client>> clients_;
  std::vector<parked> parked_;
  std::map<std::string, std::string> kv_;
  std::string lost_;  // the first rank lost, once one is
  std::set<int> joined_;  // ranks that said hello (each joins once)
  std::thread thread_;
};

}  // namespace gsync::bootstrap
