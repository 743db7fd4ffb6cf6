#pragma once
/// \file
/// The rendezvous store's wire protocol (bootstrap/store.hpp): command and status codes, message
/// framing, and the bounds-checked decoding of a request. Shared by the store server and client;
/// no sockets and no Asio here.
///
/// Wire protocol, all integers little-endian host order:
///   request  = u32 length | u8 command | body        reply = u32 length | u8 status | body
///   string   = u32 length | bytes
///   set:  string key, string value          -> ok
///   get:  u32 timeout_ms, string key        -> ok string value | timeout
///   add:  string key, i64 delta             -> ok i64 value
///   wait: u32 timeout_ms, u32 n, n x string -> ok | timeout
///   check: string key                       -> ok u8 exists
///   mget: u32 timeout_ms, u32 n, n x string -> ok n x string value | timeout   (waits for all n;
///                                              one round trip for what n gets would take)
///   hello: i32 rank                         -> ok u8 1     (this connection belongs to that rank)
///                                           -> ok u8 0     (that rank has joined this store before: the
///                                                           hello is from the job's next communicator,
///                                                           which closes and connects again)
///   bye:   (empty)                          -> no reply    (the rank leaves normally)
/// A rank whose connection closes without "bye" (killed, crashed, or unwinding after an error) is
/// lost: the server records `gsync/lost` and answers every pending and later get / wait that is
/// not satisfied yet with `lost` and the rank, so that no rank waits for a dead one until its
/// deadline. A set of a key under `gsync/commit/` after a loss is answered `lost` and not done:
/// a barrier that completes by such a set either completes before any loss, for every rank
/// waiting on it, or for none (transport/mesh/setup.ipp, a shrink's set-up).
/// The server accepts at most 16 MiB per request, keys of 4 KiB and values of 1 MiB; a request over
/// a limit on contents is answered `bad` with the reason (bootstrap/store_core.hpp lists them all),
/// a client that sends anything malformed is disconnected and logged, other clients carry on.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gsync::bootstrap {

namespace store_proto {
enum : std::uint8_t { cmd_set = 1, cmd_get = 2, cmd_add = 3, cmd_wait = 4, cmd_check = 5, cmd_hello = 6, cmd_bye = 7, cmd_mget = 8 };
enum : std::uint8_t { st_ok = 0, st_timeout = 1, st_bad = 2, st_lost = 3 };  // bad: refused, with the reason
inline constexpr std::uint32_t max_frame = 16u << 20;  ///< bytes of one request or reply
inline constexpr std::size_t max_key = 4096;          ///< bytes of one key
inline constexpr std::size_t max_value = 1u << 20;    ///< bytes of one value

/// Appends a fixed-size integer.
template <class I> void put(std::string& b, I v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); }
/// Appends a length-prefixed string.
inline void put_str(std::string& b, std::string_view s) {
  put<std::uint32_t>(b, static_cast<std::uint32_t>(s.size()));
  b.append(s.data(), s.size());
}
/// Bounds-checked reader over a received frame body.
struct reader {
  const char* p;
  std::size_t n;
  template <class I> bool get(I& v) {
    if (n < sizeof v) return false;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    n -= sizeof v;
    return true;
  }
  bool get_str(std::string& s) {
    std::uint32_t len = 0;
    if (!get(len) || len > n) return false;
    s.assign(p, len);
    p += len;
    n -= len;
    return true;
  }
};

/// One decoded request.
struct request {
  std::uint8_t cmd = 0;             ///< cmd_*
  std::uint32_t timeout_ms = 0;     ///< get / wait
  std::vector<std::string> keys;    ///< set, add, check, get: one; wait, mget: up to 65536
  std::string value;                ///< set
  std::int64_t delta = 0;           ///< add
  std::int32_t rank = -1;           ///< hello
};

/// Decodes request frame `f` (command byte, then body). Returns false, with the reason in `why`,
/// for anything malformed: unknown command, short or trailing bytes, over-long strings.
/// Everything the server reads from a client goes through here (and tests/fuzz/ fuzzes it).
inline bool parse_request(std::string_view f, request& r, std::string& why) {
  if (f.empty()) {
    why = "empty request";
    return false;
  }
  reader rd{f.data() + 1, f.size() - 1};
  r = request{};
  r.cmd = static_cast<std::uint8_t>(f[0]);
  auto key = [&] {
    std::string k;
    if (!rd.get_str(k)) return false;
    r.keys.push_back(std::move(k));
    return true;
  };
  bool ok = false;
  switch (r.cmd) {
    case cmd_set: ok = key() && rd.get_str(r.value); break;
    case cmd_get: ok = rd.get(r.timeout_ms) && key(); break;
    case cmd_wait:
    case cmd_mget: {
      std::uint32_t n = 0;
      ok = rd.get(r.timeout_ms) && rd.get(n) && n <= 65536;
      for (std::uint32_t i = 0; ok && i < n; ++i) ok = key();
      break;
    }
    case cmd_add: ok = key() && rd.get(r.delta); break;
    case cmd_check: ok = key(); break;
    case cmd_hello: ok = rd.get(r.rank) && r.rank >= 0; break;
    case cmd_bye: ok = true; break;
    default: why = "unknown command " + std::to_string(r.cmd); return false;
  }
  if (!ok) why = "malformed request (command " + std::to_string(r.cmd) + ")";
  else if (rd.n) why = "trailing bytes after request (command " + std::to_string(r.cmd) + ")";
  return ok && rd.n == 0;
}
/// Decodes the body of a reply to get: one string, nothing after it.
inline bool decode_value(std::string_view body, std::string& v) {
  reader rd{body.data(), body.size()};
  return rd.get_str(v) && rd.n == 0;
}
/// Decodes the body of a reply to mget of `n` keys: `n` strings, appended to `out`, nothing after.
inline bool decode_values(std::string_view body, std::size_t n, std::vector<std::string>& out) {
  reader rd{body.data(), body.size()};
  for (std::size_t i = 0; i < n; ++i)
    if (!rd.get_str(out.emplace_back())) return false;
  return rd.n == 0;
}
/// Decodes the body of a reply to add: one 64-bit integer.
inline bool decode_i64(std::string_view body, std::int64_t& v) {
  reader rd{body.data(), body.size()};
  return rd.get(v) && rd.n == 0;
}
}  // namespace store_proto

}  // namespace gsync::bootstrap
