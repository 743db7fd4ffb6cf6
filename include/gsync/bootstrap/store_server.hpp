#pragma once
/// \file
/// The rendezvous store's server (bootstrap/store.hpp), run by rank 0: a TCP listener and an epoll loop
/// on its own thread (Asio sockets) that authenticates clients, answers their requests, parks gets and
/// waits until their keys exist or their deadlines pass, and reports a lost rank to every waiter.

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
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/core/error.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/socket.hpp"

namespace gsync::bootstrap {

/// The store server. Runs an epoll loop on its own thread from construction to destruction.
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
    if (::pipe2(wake_, O_CLOEXEC) != 0) throw error(errc::system, "store: pipe: " + detail::errno_text(errno));
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
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server() {
    stop_ = true;
    char c = 0;
    [[maybe_unused]] auto r = ::write(wake_[1], &c, 1);
    if (thread_.joinable()) thread_.join();
    clients_.clear();
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
    explicit client(asio::io_context& io) : s(io) {}
    detail::net::tcp_socket s;
    std::uint64_t id = 0;                        // key in clients_
    std::string in, out;
    bool dead = false;
    bool pending = false;                        // in pending_ (has output queued this round)
    std::unique_ptr<auth::server_handshake> hs;  // until the client has proved the key
    clock::time_point since{};                   // when it connected
    std::string from;                            // its address, for logs
    int rank = -1;                               // announced by hello
    bool left = false;                           // said bye
    std::vector<std::uint64_t> parked_ids;       // its parked requests (usually none or one)
  };
  static constexpr auto handshake_limit = std::chrono::seconds(10);
  struct parked {
    client* c;
    std::uint8_t cmd;
    std::vector<std::string> keys;
    clock::time_point dl;
    std::size_t have = 0;  // keys[0 .. have) exist (keys are never removed): each set resumes there
  };
  // epoll tags of the two descriptors that are not clients (a client's tag is its address).
  static constexpr std::uint64_t tag_wake = 1, tag_listen = 2;

  // One loop iteration costs O(events), not O(clients): epoll keeps the interest set, parked
  // requests are indexed by the key they wait for, deadlines sit in heaps, and only clients with
  // new output or that died are visited (a thousand ranks' set-up; benchmarks/results/scale).
  void run() {
    ::pthread_setname_np(::pthread_self(), "gsync-store");  // for top -H, perf and debuggers
    std::vector<epoll_event> evs(256);
    while (!stop_) {
      const auto now = clock::now();
      if (accept_paused_ && now >= accept_pause_until_) set_accepting(true);
      int r = ::epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), next_timeout_ms(now));
      if (r < 0 && errno != EINTR) break;
      if (stop_) break;
      for (int i = 0; i < r; ++i) {
        const auto tag = evs[i].data.u64;
        if (tag == tag_wake) continue;  // stop_ is read above
        if (tag == tag_listen) { accept_all(); continue; }
        client& c = *reinterpret_cast<client*>(static_cast<std::uintptr_t>(tag));
        if (c.dead) continue;
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) read_from(c);
        if (!c.dead && (evs[i].events & EPOLLOUT)) flush(c);
      }
      expire();
      flush_pending();
      reap();
    }
    if (log_.enabled(log_level::info)) {
      timespec t{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      log_.info("store: served " + std::to_string(requests_) + " requests from " + std::to_string(next_client_id_ - 1) +
                " connections, sent " + detail::fixed(static_cast<double>(bytes_out_) / (1 << 20), 1) + " MiB, in " +
                detail::fixed(1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec), 0) + " ms of CPU");
    }
  }
  int next_timeout_ms(clock::time_point now) const {
    auto until = clock::time_point::max();
    if (accept_paused_) until = accept_pause_until_;
    if (!deadlines_.empty()) until = std::min(until, deadlines_.top().first);
    if (!handshakes_.empty()) until = std::min(until, handshakes_.front().first + handshake_limit);
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
      auto c = std::make_unique<client>(io_);
      asio::error_code ec;
      acc_.accept(c->s, ec);
      if (bootstrap::out_of_descriptors(ec)) {
        // A store that cannot accept every rank cannot set the job up: fail the waits of the ranks
        // accepted so far with the reason, and close the connections queued behind (accepted
        // with the spare descriptor, closed at once) so that no rank waits for its deadline.
        if (!out_of_fds_.exchange(true, std::memory_order_acq_rel) && lost_.empty())
          declare_lost(bootstrap::fd_exhausted("rank 0: the store cannot accept a rank's connection", 0).what());
        accept_pause_until_ = clock::now() + std::chrono::milliseconds(50);  // no spin while none is free
        set_accepting(false);
        if (spare_ >= 0) {
          ::close(spare_);
          spare_ = -1;
          for (int fd; (fd = ::accept(acc_.native_handle(), nullptr, nullptr)) >= 0;) ::close(fd);
          spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return;
      }
      if (ec) return;
      c->id = next_client_id_++;
      c->since = clock::now();
      c->hs = std::make_unique<auth::server_handshake>(key_);
      asio::error_code ig;
      const auto peer = c->s.remote_endpoint(ig);
      c->from = peer.address().to_string() + ":" + std::to_string(peer.port());
      detail::set_nonblocking(c->s.native_handle());
      c->s.set_option(asio::ip::tcp::no_delay(true), ig);
      epoll_event e{};
      e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;  // edge-triggered: read and write until EAGAIN
      e.data.u64 = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(c.get()));
      if (::epoll_ctl(ep_, EPOLL_CTL_ADD, c->s.native_handle(), &e) != 0) continue;  // closed with c
      handshakes_.emplace_back(c->since, c->id);
      clients_.emplace(c->id, std::move(c));
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
      if (errno != EAGAIN && errno != EWOULDBLOCK) kill(c);
      break;
    }
    process(c);
    if (eof) kill(c);
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
  }
  void drop(client& c, const std::string& why) {
    log_.warn("store: dropping client connection: " + why);
    kill(c);
  }
  void kill(client& c) {
    if (c.dead) return;
    c.dead = true;
    dying_.push_back(&c);
  }
  void reply(client& c, std::uint8_t st, const std::string& body = {}) {
    store_proto::put<std::uint32_t>(c.out, static_cast<std::uint32_t>(1 + body.size()));
    c.out.push_back(static_cast<char>(st));
    c.out += body;
    if (!c.pending) {
      c.pending = true;
      pending_.push_back(&c);
    }
  }
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
  /// Parks `p` under the first key it still waits for.
  void park(parked p) {
    const auto id = next_parked_id_++;
    waiting_[p.keys[p.have]].push_back(id);
    deadlines_.emplace(p.dl, id);
    p.c->parked_ids.push_back(id);
    parked_.emplace(id, std::move(p));
  }
  void unpark(std::unordered_map<std::uint64_t, parked>::iterator it) {
    std::erase(it->second.c->parked_ids, it->first);
    parked_.erase(it);  // its entries in waiting_ and deadlines_ are skipped when met
  }
  /// `key` was set: answers the requests that waited for it and have all their keys now, and
  /// moves the others on to the next key they miss.
  void wake(const std::string& key) {
    auto w = waiting_.find(key);
    if (w == waiting_.end()) return;
    auto ids = std::move(w->second);
    waiting_.erase(w);
    for (auto id : ids) {
      auto it = parked_.find(id);
      if (it == parked_.end()) continue;
      parked& p = it->second;
      if (ready(p)) {
        answer(p);
        unpark(it);
      } else {
        waiting_[p.keys[p.have]].push_back(id);
      }
    }
  }
  void handle(client& c, const std::string& frame) {
    using namespace store_proto;
    request rq;
    std::string why;
    if (!parse_request(frame, rq, why)) return drop(c, why);
    ++requests_;
    switch (rq.cmd) {
      case cmd_set: {
        const std::string key = rq.keys[0];
        kv_[key] = std::move(rq.value);
        reply(c, st_ok);
        wake(key);
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
        else park(std::move(p));
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
        wake(rq.keys[0]);
        return;
      }
      case cmd_hello: {
        // Each rank joins a store once. A second hello of a rank comes from the job's next
        // communicator, made from the same variables while this store still waits for its own
        // ranks to leave: turned away, not counted, so that it connects again to the next store.
        const bool mine = c.rank < 0 && joined_.insert(rq.rank).second;
        if (mine) {
          c.rank = rq.rank;
          ++active_count_;
        }
        reply(c, st_ok, std::string(1, mine ? '\1' : '\0'));
        return;
      }
      case cmd_bye:
        if (c.rank >= 0 && !c.left) --active_count_;
        c.left = true;
        return;
      default: {  // cmd_check
        std::string b(1, kv_.count(rq.keys[0]) ? '\1' : '\0');
        reply(c, st_ok, b);
        return;
      }
    }
  }
  /// Times out parked requests and unauthenticated connections whose deadlines passed.
  void expire() {
    const auto now = clock::now();
    while (!deadlines_.empty() && deadlines_.top().first <= now) {
      const auto id = deadlines_.top().second;
      deadlines_.pop();
      auto it = parked_.find(id);
      if (it == parked_.end()) continue;
      if (!it->second.c->dead) reply(*it->second.c, store_proto::st_timeout);
      unpark(it);
    }
    while (!handshakes_.empty() && now - handshakes_.front().first > handshake_limit) {
      auto it = clients_.find(handshakes_.front().second);
      handshakes_.pop_front();
      if (it != clients_.end() && !it->second->dead && it->second->hs)
        drop(*it->second, "connection from " + it->second->from + " did not authenticate within 10 s");
    }
  }
  void flush_pending() {
    for (auto* c : pending_) {
      c->pending = false;
      if (!c->dead && !c->out.empty()) flush(*c);  // what is left goes when EPOLLOUT says so
    }
    pending_.clear();
  }
  void flush(client& c) {
    while (!c.out.empty()) {
      ssize_t w = ::send(c.s.native_handle(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        c.out.erase(0, static_cast<std::size_t>(w));
        bytes_out_ += static_cast<std::uint64_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      kill(c);
      return;
    }
  }
  /// Records the first loss (`why`) and answers every parked wait that cannot be met with it.
  void declare_lost(const std::string& why) {
    lost_ = why;
    log_.warn("store: " + lost_);
    kv_["gsync/lost"] = lost_;
    for (auto& [id, p] : parked_) {
      if (!p.c->dead) answer(p);
      p.c->parked_ids.clear();
    }
    parked_.clear();
    waiting_.clear();
    deadlines_ = {};
    flush_pending();
  }
  /// Frees the clients that died this round; a rank's death without goodbye is the job's loss.
  void reap() {
    while (!dying_.empty()) {
      auto batch = std::move(dying_);
      dying_.clear();
      for (client* c : batch) {
        if (c->rank >= 0 && !c->left) {
          --active_count_;
          if (lost_.empty()) {
            // A rank that failed said why first (transport/mesh/failure.ipp: "gsync/failed/R" = "<errc> <message>"):
            // its message names the rank whose loss started it.
            std::string why;
            if (auto f = kv_.find("gsync/failed/" + std::to_string(c->rank)); f != kv_.end())
              why = "rank " + std::to_string(c->rank) + " failed: " + f->second.substr(std::min(f->second.size(), f->second.find(' ') + 1));
            else
              why = "rank " + std::to_string(c->rank) + " is lost (its connection to the store closed without goodbye: "
                    "the process died, was killed, or failed)";
            declare_lost(why);  // may kill more clients (failed sends): the next batch
          }
        }
      }
      for (client* c : batch) {
        for (auto id : c->parked_ids) parked_.erase(id);
        c->parked_ids.clear();
        if (c->pending) std::erase(pending_, c);
        ::epoll_ctl(ep_, EPOLL_CTL_DEL, c->s.native_handle(), nullptr);
        clients_.erase(c->id);
      }
    }
    active_.store(active_count_, std::memory_order_release);
  }

  asio::io_context io_;
  detail::net::tcp_acceptor acc_;
  logger log_;
  int ep_ = -1;                                 // the epoll instance
  bool accept_paused_ = false;                  // listener out of the interest set until accept_pause_until_
  clock::time_point accept_pause_until_{};      // (out of descriptors)
  std::atomic<bool> out_of_fds_{false};  // accept failed for want of descriptors (see accept_all, linger)
  int spare_ = -1;                         // a descriptor held back to turn connections away when out of them
  auth::job_key key_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{1 << 30};  // connected ranks that have not said goodbye (1<<30: not counted yet)
  int active_count_ = 0;              // the same, kept by the server thread
  std::uint64_t next_client_id_ = 1, next_parked_id_ = 1;
  std::uint64_t requests_ = 0, bytes_out_ = 0;  // for the closing INFO line
  std::unordered_map<std::uint64_t, std::unique_ptr<client>> clients_;
  std::vector<client*> pending_;  // clients with output queued this round
  std::vector<client*> dying_;    // clients that died this round, freed by reap
  std::deque<std::pair<clock::time_point, std::uint64_t>> handshakes_;  // client ids in order of connection
  std::unordered_map<std::uint64_t, parked> parked_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiting_;  // key -> parked ids waiting for it
  using deadline = std::pair<clock::time_point, std::uint64_t>;
  std::priority_queue<deadline, std::vector<deadline>, std::greater<>> deadlines_;
  std::unordered_map<std::string, std::string> kv_;
  std::string lost_;  // the first rank lost, once one is
  std::set<int> joined_;  // ranks that said hello (each joins once)
  std::thread thread_;
};

}  // namespace gsync::bootstrap
