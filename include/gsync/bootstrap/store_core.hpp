#pragma once
/// \file
/// The rendezvous store's state machine, without sockets: connections as byte streams in and out,
/// the job-key handshake, request frames, the keys and values, parked gets and waits with their
/// deadlines, and the lost-rank rule of bootstrap/store_protocol.hpp. `store_server` (bootstrap/
/// store_server.hpp) moves bytes between sockets and this; tests/fuzz/fuzz_store.cpp drives it
/// directly with made-up connections and byte streams.
///
/// Everything a client sends is bounded (`store_limits`), since any process that reaches the port
/// may connect: before it has proved the job key, a connection buffers at most the handshake's
/// bytes, waits at most `handshake_ms`, and counts against a per-address and a total limit; after,
/// a request is at most `frame_bytes`, a key `key_bytes`, a value `value_bytes`, all values
/// together `total_bytes` in `max_keys` keys, a connection parks at most `parked_per_conn`
/// requests and may leave at most `out_bytes` of replies unread. A request over a limit on
/// contents is answered `bad` with the reason (the client raises invalid_argument) and the
/// connection goes on; a stream that breaks the protocol or a limit on buffering is dropped.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"

namespace gsync::bootstrap {

/// Bounds on what the store holds for its clients (see the file comment).
struct store_limits {
  std::size_t key_bytes = store_proto::max_key;      ///< one key
  std::size_t value_bytes = store_proto::max_value;  ///< one value
  std::size_t total_bytes = std::size_t{256} << 20;  ///< every key and value together
  std::size_t max_keys = std::size_t{1} << 20;       ///< keys
  std::size_t frame_bytes = store_proto::max_frame;  ///< one request
  std::size_t out_bytes = std::size_t{64} << 20;     ///< replies a connection has not read yet
  std::size_t parked_per_conn = 1024;                ///< gets and waits parked per connection
  std::size_t preauth_per_source = 256;              ///< connections of one address still in the handshake
  std::size_t preauth_total = 1024;                  ///< all connections still in the handshake
  std::size_t connections = 65536;                   ///< connections
  std::chrono::milliseconds handshake_ms{10000};     ///< to prove the key
  /// How soon a client that stopped answering without closing is dropped (detail::set_liveness).
  std::chrono::milliseconds liveness{10000};
};

/// The store's state (see the file comment). Single-threaded: the server's loop owns it.
class store_core {
 public:
  using clock = std::chrono::steady_clock;

  store_core(auth::job_key key, logger log, store_limits lim = {}) : key_(std::move(key)), log_(log), lim_(lim) {}
  /// The limits in force.
  const store_limits& limits() const noexcept { return lim_; }

  /// A new connection `id` (unique, never reused) from address `from` ("ip:port"). False when a
  /// limit refuses it: the caller closes it at once. When the handshake slots (of its address, or
  /// in all) are taken, the oldest connection still in the handshake there makes room instead: a
  /// stranger holding slots cannot keep a rank out, since a rank proves the key within
  /// milliseconds and only a newer connection can push it out.
  bool open(std::uint64_t id, const std::string& from, clock::time_point now) {
    const std::string source = from.substr(0, from.rfind(':'));
    if (conns_.size() >= lim_.connections) {
      note_drop("connection from " + from + " refused: " + std::to_string(conns_.size()) + " connections are open");
      return false;
    }
    if (preauth_of_[source] >= lim_.preauth_per_source) evict_oldest_preauth(&source);
    if (preauth_ >= lim_.preauth_total) evict_oldest_preauth(nullptr);
    if (preauth_ >= lim_.preauth_total || preauth_of_[source] >= lim_.preauth_per_source) {  // nothing to evict (limits of 0)
      if (preauth_of_[source] == 0) preauth_of_.erase(source);
      note_drop("connection from " + from + " refused: too many connections still in the handshake");
      return false;
    }
    auto c = std::make_unique<conn>();
    c->id = id;
    c->since = now;
    c->from = from;
    c->source = source;
    c->hs = std::make_unique<auth::server_handshake>(key_);
    ++preauth_;
    ++preauth_of_[source];
    handshakes_.emplace_back(now, id);
    conns_.emplace(id, std::move(c));
    return true;
  }
  /// Bytes received on connection `id`: answers what they complete. The connection may die.
  void received(std::uint64_t id, const char* p, std::size_t n) {
    conn* c = find(id);
    if (!c || c->dead) return;
    c->heard = true;
    c->in.append(p, n);
    process(*c);
  }
  /// The peer of `id` closed its side (or its socket failed): what it sent before still counts.
  void hangup(std::uint64_t id) {
    if (conn* c = find(id)) kill(*c);
  }
  /// Replies waiting to be sent on `id` (the caller erases what it sent), or null.
  std::string* output(std::uint64_t id) {
    conn* c = find(id);
    return c && !c->dead ? &c->out : nullptr;
  }
  /// Sent bytes, for the closing report.
  void count_sent(std::size_t n) noexcept { bytes_out_ += n; }
  /// Connections with new replies since the last call.
  std::vector<std::uint64_t> take_ready() {
    std::vector<std::uint64_t> r;
    r.swap(ready_);
    for (auto id : r)
      if (conn* c = find(id)) c->queued = false;
    return r;
  }
  /// Connections that died since the last call, forgotten here: the caller closes their sockets.
  std::vector<std::uint64_t> take_dead() {
    std::vector<std::uint64_t> out;
    while (!dying_.empty()) {
      auto batch = std::move(dying_);
      dying_.clear();
      for (auto id : batch) {
        conn* c = find(id);
        if (!c) continue;
        if (c->rank >= 0 && !c->left) {
          --active_;
          // A rank's death without goodbye is the job's loss. A rank that failed said why first
          // (transport/mesh/failure.ipp: "gsync/failed/R" = "<errc> <message>").
          if (lost_.empty()) {
            std::string why;
            if (auto f = kv_.find("gsync/failed/" + std::to_string(c->rank)); f != kv_.end())
              why = "rank " + std::to_string(c->rank) + " failed: " + f->second.substr(std::min(f->second.size(), f->second.find(' ') + 1));
            else
              why = "rank " + std::to_string(c->rank) + " is lost (its connection to the store closed without goodbye: "
                    "the process died, was killed, or failed)";
            declare_lost(why);
          }
        }
      }
      for (auto id : batch) {
        auto it = conns_.find(id);
        if (it == conns_.end()) continue;
        for (auto pid : it->second->parked_ids) parked_.erase(pid);
        if (it->second->hs) leave_preauth(*it->second);
        conns_.erase(it);
        out.push_back(id);
      }
    }
    return out;
  }
  /// Times out parked requests and handshakes whose deadlines passed.
  void expire(clock::time_point now) {
    while (!deadlines_.empty() && deadlines_.top().first <= now) {
      const auto id = deadlines_.top().second;
      deadlines_.pop();
      auto it = parked_.find(id);
      if (it == parked_.end()) continue;
      if (conn* c = find(it->second.conn_id); c && !c->dead) reply(*c, store_proto::st_timeout);
      unpark(it);
    }
    while (!handshakes_.empty() && now - handshakes_.front().first >= lim_.handshake_ms) {
      conn* c = find(handshakes_.front().second);
      handshakes_.pop_front();
      if (c && !c->dead && c->hs) drop(*c, "connection from " + c->from + " did not authenticate in time");
    }
  }
  /// When `expire` has work next (time_point::max() when nothing waits).
  clock::time_point next_deadline() const {
    auto until = clock::time_point::max();
    if (!deadlines_.empty()) until = deadlines_.top().first;
    if (!handshakes_.empty()) until = std::min(until, handshakes_.front().first + lim_.handshake_ms);
    return until;
  }
  /// Records the first loss (`why`) and answers every parked wait that cannot be met with it.
  void declare_lost(const std::string& why) {
    lost_ = why;
    log_.warn("store: " + lost_);
    put("gsync/lost", lost_, /*internal=*/true);
    for (auto& [id, p] : parked_) {
      if (conn* c = find(p.conn_id); c && !c->dead) answer(*c, p);
      if (conn* c = find(p.conn_id)) c->parked_ids.clear();
    }
    parked_.clear();
    waiting_.clear();
    deadlines_ = {};
  }
  bool lost() const noexcept { return !lost_.empty(); }  ///< a rank was lost
  int active() const noexcept { return active_; }      ///< ranks joined and not gone
  /// Ranks joined and not gone, not counting those in `except` (ranks known lost that may still
  /// hold their connections: a stopped process).
  int active_except(const std::vector<int>& except) const noexcept {
    if (except.empty()) return active_;
    int n = 0;
    for (const auto& [id, c] : conns_)
      if (c->rank >= 0 && !c->left && !c->dead && std::find(except.begin(), except.end(), c->rank) == except.end()) ++n;
    return n;
  }
  std::size_t connections() const noexcept { return conns_.size(); }  ///< open connections
  std::uint64_t requests() const noexcept { return requests_; }       ///< requests served
  std::uint64_t bytes_sent() const noexcept { return bytes_out_; }    ///< reply bytes sent
  std::size_t stored_bytes() const noexcept { return kv_bytes_; }      ///< keys and values held

 private:
  struct conn {
    std::uint64_t id = 0;
    std::string in, out;
    bool dead = false;
    bool queued = false;                         // in ready_
    std::unique_ptr<auth::server_handshake> hs;  // until it has proved the key
    clock::time_point since{};
    std::string from, source;                    // "ip:port", "ip"
    int rank = -1;                               // announced by hello
    bool left = false;                           // said bye
    bool heard = false;                          // has sent a byte
    std::vector<std::uint64_t> parked_ids;       // its parked requests
  };
  struct parked {
    std::uint64_t conn_id;
    std::uint8_t cmd;
    std::vector<std::string> keys;
    clock::time_point dl;
    std::size_t have = 0;  // keys[0 .. have) exist (keys are never removed): each set resumes there
  };

  conn* find(std::uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
  }
  // Drops the oldest connection still in the handshake (from `source` when given) that has not
  // sent a byte, else the oldest one: a silent flood never pushes out a client mid-handshake.
  // Entries of connections no longer in the handshake are pruned from the front (expire() drops
  // the rest in time).
  void evict_oldest_preauth(const std::string* source) {
    const auto candidate = [&](std::uint64_t id) {
      conn* c = find(id);
      return c && !c->dead && c->hs ? c : nullptr;
    };
    while (!handshakes_.empty() && !candidate(handshakes_.front().second)) handshakes_.pop_front();
    std::size_t pick = handshakes_.size();
    for (std::size_t i = 0; i < handshakes_.size(); ++i) {
      conn* c = candidate(handshakes_[i].second);
      if (!c || (source && c->source != *source)) continue;
      if (pick == handshakes_.size()) pick = i;
      if (!c->heard) {
        pick = i;
        break;
      }
    }
    if (pick == handshakes_.size()) return;
    conn* c = candidate(handshakes_[pick].second);
    handshakes_.erase(handshakes_.begin() + static_cast<std::ptrdiff_t>(pick));
    leave_preauth(*c);
    c->hs.reset();  // counted out of the handshake slots now (take_dead would do it later)
    note_drop("connection from " + c->from + " dropped: the oldest of those still in the handshake, to make room for a new one");
    kill(*c);
  }
  void leave_preauth(conn& c) {
    --preauth_;
    if (auto it = preauth_of_.find(c.source); it != preauth_of_.end() && --it->second == 0) preauth_of_.erase(it);
  }
  void note_drop(const std::string& why) { drops_.warn(log_, "store: " + why); }
  void drop(conn& c, const std::string& why) {
    note_drop("dropping client connection: " + why);
    kill(c);
  }
  void kill(conn& c) {
    if (c.dead) return;
    c.dead = true;
    dying_.push_back(c.id);
  }
  void process(conn& c) {
    if (c.hs) {
      const auto st = c.hs->feed(c.in, c.out);
      if (st == auth::server_handshake::state::failed) return drop(c, "connection from " + c.from + " rejected: " + c.hs->why());
      if (!c.out.empty()) queue(c);
      if (st == auth::server_handshake::state::need_more) {
        // The handshake's bytes only, nothing beyond: a stranger cannot make the store buffer.
        if (c.in.size() > auth::hello_bytes + auth::mac_bytes) drop(c, "connection from " + c.from + " sent more than the handshake before proving the key");
        return;
      }
      c.hs.reset();  // authenticated; requests may follow in the same read
      leave_preauth(c);
    }
    while (!c.dead && c.in.size() >= 4) {
      std::uint32_t len;
      std::memcpy(&len, c.in.data(), 4);
      if (len == 0 || len > lim_.frame_bytes) return drop(c, "bad request length " + std::to_string(len) + " from " + c.from);
      if (c.in.size() < 4 + std::size_t{len}) break;
      handle(c, std::string_view(c.in).substr(4, len));
      c.in.erase(0, 4 + std::size_t{len});
    }
  }
  void queue(conn& c) {
    if (c.out.size() > lim_.out_bytes) return drop(c, "client " + c.from + " does not read its replies (" + std::to_string(c.out.size() >> 20) + " MiB unread)");
    if (!c.queued) {
      c.queued = true;
      ready_.push_back(c.id);
    }
  }
  void reply(conn& c, std::uint8_t st, std::string_view body = {}) {
    store_proto::put<std::uint32_t>(c.out, static_cast<std::uint32_t>(1 + body.size()));
    c.out.push_back(static_cast<char>(st));
    c.out.append(body);
    queue(c);
  }
  void refuse(conn& c, const std::string& why) { reply(c, store_proto::st_bad, why); }
  bool ready(parked& p) const {
    while (p.have < p.keys.size() && kv_.count(p.keys[p.have])) ++p.have;
    return p.have == p.keys.size();
  }
  void answer(conn& c, parked& p) {
    if (!lost_.empty() && !ready(p)) return reply(c, store_proto::st_lost, lost_);
    if (p.cmd == store_proto::cmd_get) {
      std::string b;
      store_proto::put_str(b, kv_.at(p.keys[0]));
      reply(c, store_proto::st_ok, b);
    } else if (p.cmd == store_proto::cmd_mget) {
      std::size_t total = 1;
      for (auto& k : p.keys) total += 4 + kv_.at(k).size();
      if (total > store_proto::max_frame) return refuse(c, "the values asked for exceed a reply's " + std::to_string(store_proto::max_frame >> 20) + " MiB");
      std::string b;
      b.reserve(total);
      for (auto& k : p.keys) store_proto::put_str(b, kv_.at(k));
      reply(c, store_proto::st_ok, b);
    } else {
      reply(c, store_proto::st_ok);
    }
  }
  void park(conn& c, parked p) {
    const auto id = next_parked_id_++;
    waiting_[p.keys[p.have]].push_back(id);
    deadlines_.emplace(p.dl, id);
    c.parked_ids.push_back(id);
    parked_.emplace(id, std::move(p));
  }
  void unpark(std::unordered_map<std::uint64_t, parked>::iterator it) {
    if (conn* c = find(it->second.conn_id)) std::erase(c->parked_ids, it->first);
    parked_.erase(it);  // its entries in waiting_ and deadlines_ are skipped when met
  }
  // `key` was set: answers the requests that waited for it and have all their keys now, and moves
  // the others on to the next key they miss.
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
        if (conn* c = find(p.conn_id); c && !c->dead) answer(*c, p);
        unpark(it);
      } else {
        waiting_[p.keys[p.have]].push_back(id);
      }
    }
  }
  // Stores key = value within the limits; the reason when refused. Internal records always fit.
  std::string put(const std::string& key, std::string value, bool internal = false) {
    auto it = kv_.find(key);
    const std::size_t old = it == kv_.end() ? 0 : key.size() + it->second.size();
    if (!internal) {
      if (key.size() > lim_.key_bytes) return "key of " + std::to_string(key.size()) + " bytes (at most " + std::to_string(lim_.key_bytes) + ")";
      if (value.size() > lim_.value_bytes)
        return "value of " + std::to_string(value.size()) + " bytes for key '" + key.substr(0, 100) + "' (at most " + std::to_string(lim_.value_bytes) + ")";
      if (it == kv_.end() && kv_.size() >= lim_.max_keys) return "the store holds " + std::to_string(kv_.size()) + " keys, its limit";
      if (kv_bytes_ - old + key.size() + value.size() > lim_.total_bytes)
        return "the store holds " + std::to_string(kv_bytes_ >> 20) + " MiB, and its limit is " + std::to_string(lim_.total_bytes >> 20) + " MiB";
    }
    kv_bytes_ = kv_bytes_ - old + key.size() + value.size();
    kv_[key] = std::move(value);
    return {};
  }
  void handle(conn& c, std::string_view frame) {
    using namespace store_proto;
    request rq;
    std::string why;
    if (!parse_request(frame, rq, why)) return drop(c, why + " from " + c.from);
    ++requests_;
    for (const auto& k : rq.keys)
      if (k.size() > lim_.key_bytes) return refuse(c, "key of " + std::to_string(k.size()) + " bytes (at most " + std::to_string(lim_.key_bytes) + ")");
    switch (rq.cmd) {
      case cmd_set: {
        const std::string& key = rq.keys[0];
        if (!lost_.empty() && key.starts_with("gsync/commit/")) return reply(c, st_lost, lost_);  // store_protocol.hpp
        if (std::string no = put(key, std::move(rq.value)); !no.empty()) return refuse(c, "store: refused to set " + no);
        reply(c, st_ok);
        wake(key);
        // A rank recording its failure ("gsync/failed/R" = "<errc> <message>") is going down: the
        // ranks waiting for keys it would have set learn why now, not when its connection closes
        // (a rank that fails in set-up, before its hello, is never counted as lost).
        constexpr std::string_view failed = "gsync/failed/";  // then the rank's number, nothing after
        if (lost_.empty() && key.starts_with(failed) && key.size() > failed.size() &&
            key.find_first_not_of("0123456789", failed.size()) == std::string::npos) {
          const std::string& v = kv_[key];
          declare_lost("rank " + key.substr(failed.size()) + " failed: " + v.substr(std::min(v.size(), v.find(' ') + 1)));
        }
        return;
      }
      case cmd_get: case cmd_wait: case cmd_mget: {
        parked p{c.id, rq.cmd, std::move(rq.keys), clock::now() + std::chrono::milliseconds(rq.timeout_ms)};
        if (ready(p) || !lost_.empty()) return answer(c, p);
        if (c.parked_ids.size() >= lim_.parked_per_conn) return refuse(c, "store: more than " + std::to_string(lim_.parked_per_conn) + " requests of one connection waiting");
        return park(c, std::move(p));
      }
      case cmd_add: {
        std::int64_t v = 0;
        if (auto it = kv_.find(rq.keys[0]); it != kv_.end()) {
          const auto& s = it->second;
          if (std::from_chars(s.data(), s.data() + s.size(), v).ec != std::errc{}) v = 0;
        }
        if (__builtin_add_overflow(v, rq.delta, &v)) return refuse(c, "store: add overflows a 64-bit counter");
        if (std::string no = put(rq.keys[0], std::to_string(v)); !no.empty()) return refuse(c, "store: refused to add: " + no);
        std::string b;
        store_proto::put<std::int64_t>(b, v);
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
          ++active_;
        }
        reply(c, st_ok, std::string(1, mine ? '\1' : '\0'));
        return;
      }
      case cmd_bye:
        if (c.rank >= 0 && !c.left) --active_;
        c.left = true;
        return;
      default: {  // cmd_check
        reply(c, st_ok, std::string(1, kv_.count(rq.keys[0]) ? '\1' : '\0'));
        return;
      }
    }
  }

  auth::job_key key_;
  logger log_;
  store_limits lim_;
  std::unordered_map<std::uint64_t, std::unique_ptr<conn>> conns_;
  std::unordered_map<std::string, std::size_t> preauth_of_;  // connections in the handshake per address
  std::size_t preauth_ = 0;
  std::deque<std::pair<clock::time_point, std::uint64_t>> handshakes_;  // connection ids in order of arrival
  std::vector<std::uint64_t> ready_, dying_;
  std::unordered_map<std::uint64_t, parked> parked_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiting_;  // key -> parked ids waiting for it
  using timed = std::pair<clock::time_point, std::uint64_t>;
  std::priority_queue<timed, std::vector<timed>, std::greater<>> deadlines_;
  std::unordered_map<std::string, std::string> kv_;
  std::size_t kv_bytes_ = 0;
  std::string lost_;      // the first rank lost, once one is
  std::set<int> joined_;  // ranks that said hello (each joins once)
  int active_ = 0;        // joined ranks that have not left
  std::uint64_t next_parked_id_ = 1, requests_ = 0, bytes_out_ = 0;
  flood_log drops_{"connections dropped"};  // a stranger's flood, logged at a bounded rate
};

}  // namespace gsync::bootstrap
