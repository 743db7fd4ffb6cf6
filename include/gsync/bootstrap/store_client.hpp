#pragma once
/// \file
/// The rendezvous store's client (bootstrap/store.hpp), one per rank: connects to the server with
/// retries, proves the job key, and sends set / get / add / wait / check / hello / bye requests with
/// a deadline on each. Its waits run on its own io_context, an Asio timer holding each deadline.

#include <sys/socket.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/core/error.hpp"
#include "gsync/bootstrap/socket.hpp"

namespace gsync::bootstrap {

/// A connection to the store. Calls are serialized by a mutex, so one client may be shared by threads.
class store_client {
 public:
  /// Connects to host:port, retrying until `dl` (the server may start later than this rank), and
  /// runs the job-key handshake (errc::auth_failed if the store holds another key).
  /// `liveness`: how soon a store that stops answering without closing is noticed (bootstrap/socket.hpp).
  /// `connect_by`: connect by then, without retrying a refusal (a store known to be up: refused
  /// means gone), the handshake by `dl`; unset: retry until `dl`.
  store_client(const std::string& host, std::uint16_t port, deadline dl, const auth::job_key& key = auth::job_key::from_env(),
               std::chrono::milliseconds liveness = detail::default_liveness, std::optional<deadline> connect_by = {})
      : s_(io_) {
    auto addr = detail::resolve_host(io_, host);
    s_ = detail::connect_retry(io_, asio::ip::tcp::endpoint(addr, port), connect_by ? *connect_by : dl, "the gsync store (rank 0) at " + host, {},
                               /*retry_refused=*/!connect_by);
    detail::tune_control_socket(s_.native_handle(), liveness);
    what_ = "the gsync store (served by rank 0) at " + host + ":" + std::to_string(port);
    auth::client_handshake(s_, key, dl, what_);
  }

  store_client(const store_client&) = delete;
  store_client& operator=(const store_client&) = delete;
  /// Says goodbye to the server when leaving normally; when destroyed during stack unwinding (this
  /// rank failed), it closes without one, so that the server reports this rank as lost.
  ~store_client() {
    if (rank_ < 0 || broken_ || std::uncaught_exceptions() > 0) return;
    std::string req;
    store_proto::put<std::uint32_t>(req, 1);
    req.push_back(static_cast<char>(store_proto::cmd_bye));
    [[maybe_unused]] auto w = ::send(s_.native_handle(), req.data(), req.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  /// Tells the server that this connection belongs to `rank` (see the lost-rank rule in
  /// bootstrap/store_protocol.hpp).
  /// Returns false, without joining, when `rank` has joined this store before: it is the store of
  /// the job's previous communicator, not yet closed.
  bool hello(int rank, deadline dl) {
    std::string b;
    store_proto::put<std::int32_t>(b, rank);
    const std::string r = call(store_proto::cmd_hello, b, dl);
    if (r == std::string(1, '\0')) return false;
    rank_ = rank;
    return true;
  }

  /// Sets key to value.
  /// Throws invalid_argument, and sends nothing, for a key over 4 KiB or a value over 1 MiB; the
  /// store may refuse more (its total, bootstrap/store_core.hpp), with invalid_argument too.
  void set(const std::string& key, const std::string& value, deadline dl) {
    if (key.size() > store_proto::max_key || value.size() > store_proto::max_value)
      throw error(errc::invalid_argument, "store: key of " + std::to_string(key.size()) + " bytes, value of " + std::to_string(value.size()) +
                                              " bytes for key '" + key.substr(0, 100) + "': at most " + std::to_string(store_proto::max_key) +
                                              " and " + std::to_string(store_proto::max_value) + " bytes");
    std::string b;
    store_proto::put_str(b, key);
    store_proto::put_str(b, value);
    call(store_proto::cmd_set, b, dl);
  }
  /// The value of key, waiting until some rank sets it; throws timeout at dl.
  std::string get(const std::string& key, deadline dl) {
    std::string b;
    store_proto::put<std::uint32_t>(b, server_ms(dl));
    store_proto::put_str(b, key);
    auto r = call(store_proto::cmd_get, b, dl, "waiting for key '" + key + "'");
    std::string v;
    if (!store_proto::decode_value(r, v)) malformed();
    return v;
  }
  /// The values of `keys`, in order, waiting until every one is set: one round trip (set-up reads
  /// every rank's record this way). Throws timeout at dl.
  std::vector<std::string> get_many(const std::vector<std::string>& keys, deadline dl) {
    std::vector<std::string> v;
    v.reserve(keys.size());
    constexpr std::size_t most = 65536;  // keys per request (store_protocol.hpp)
    for (std::size_t at = 0; at < keys.size(); at += most) {
      const std::size_t n = std::min(most, keys.size() - at);
      std::string b;
      store_proto::put<std::uint32_t>(b, server_ms(dl));
      store_proto::put<std::uint32_t>(b, static_cast<std::uint32_t>(n));
      for (std::size_t i = 0; i < n; ++i) store_proto::put_str(b, keys[at + i]);
      std::string which = n == 1 ? "key '" + keys[at] + "'" : std::to_string(n) + " keys";
      auto r = call(store_proto::cmd_mget, b, dl, "waiting for " + which);
      if (!store_proto::decode_values(r, n, v)) malformed();
    }
    return v;
  }
  /// Atomically adds delta to the integer at key (missing = 0); returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta, deadline dl) {
    std::string b;
    store_proto::put_str(b, key);
    store_proto::put<std::int64_t>(b, delta);
    auto r = call(store_proto::cmd_add, b, dl);
    std::int64_t v = 0;
    if (!store_proto::decode_i64(r, v)) malformed();
    return v;
  }
  /// Waits until every key exists; throws timeout at dl.
  void wait(const std::vector<std::string>& keys, deadline dl) {
    std::string b;
    store_proto::put<std::uint32_t>(b, server_ms(dl));
    store_proto::put<std::uint32_t>(b, static_cast<std::uint32_t>(keys.size()));
    for (auto& k : keys) store_proto::put_str(b, k);
    std::string which = keys.size() == 1 ? "key '" + keys[0] + "'" : std::to_string(keys.size()) + " keys";
    call(store_proto::cmd_wait, b, dl, "waiting for " + which);
  }
  /// True when key exists now.
  bool check(const std::string& key, deadline dl) {
    std::string b;
    store_proto::put_str(b, key);
    auto r = call(store_proto::cmd_check, b, dl);
    return !r.empty() && r[0] != 0;
  }

 private:
  [[noreturn]] void malformed() {
    broken_ = true;  // the stream cannot be trusted past a reply it cannot read
    throw error(errc::mismatch, "malformed reply from " + what_);
  }
  static std::uint32_t server_ms(deadline dl) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(dl - std::chrono::steady_clock::now()).count();
    return static_cast<std::uint32_t>(std::clamp<long long>(ms, 0, 0x7fffffff));
  }
  std::string call(std::uint8_t cmd, const std::string& body, deadline dl, const std::string& doing = "") {
    std::lock_guard lk(m_);
    if (broken_) throw error(errc::peer_lost, "connection to " + what_ + " is unusable after an earlier error");
    bool refused = false;
    try {
      std::string req;
      store_proto::put<std::uint32_t>(req, static_cast<std::uint32_t>(1 + body.size()));
      req.push_back(static_cast<char>(cmd));
      req += body;
      // The server answers a timed-out wait itself; allow it a moment past the deadline to do so.
      // Other requests are answered at once or not at all (a stopped server): the deadline holds.
      const bool waits = cmd == store_proto::cmd_get || cmd == store_proto::cmd_mget || cmd == store_proto::cmd_wait;
      const deadline reply_dl = waits ? dl + std::chrono::seconds(2) : dl;
      detail::write_all(s_, req.data(), req.size(), reply_dl, what_);
      std::uint32_t len = 0;
      detail::read_all(s_, &len, 4, reply_dl, what_);
      if (len == 0 || len > store_proto::max_frame) throw error(errc::mismatch, "malformed reply from " + what_);
      std::string r(len, '\0');
      detail::read_all(s_, r.data(), len, reply_dl, what_);
      if (r[0] == store_proto::st_lost)
        throw error(errc::peer_lost, "store: " + r.substr(1) + (doing.empty() ? std::string{} : " (this rank was " + doing + ")"));
      if (r[0] == store_proto::st_timeout)
        throw error(errc::timeout, "store: timed out " + (doing.empty() ? std::string("in a store call") : doing));
      if (r[0] == store_proto::st_bad) {  // refused, with the reason; the connection goes on
        refused = true;
        throw error(errc::invalid_argument, r.size() > 1 ? r.substr(1) : std::string("store: request refused"));
      }
      if (r[0] != store_proto::st_ok) throw error(errc::mismatch, "malformed reply from " + what_);
      return r.substr(1);
    } catch (const error& e) {
      if (!refused && (e.kind() != errc::timeout || std::string_view(e.what()).find("store: timed out") == std::string_view::npos)) broken_ = true;
      throw;
    }
  }

  asio::io_context io_;  // s_'s; run by the thread in a call (under m_) or in the constructor
  detail::net::tcp_socket s_;
  std::string what_;
  std::mutex m_;
  bool broken_ = false;
  int rank_ = -1;
};

}  // namespace gsync::bootstrap
