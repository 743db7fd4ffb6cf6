// libFuzzer target: the store's state machine (bootstrap/store_core.hpp) driven as its server
// drives it, by a script read from the input: connections open (from a few addresses), send bytes
// in pieces (raw, or after a correct handshake, so that requests get past it), read their
// replies, hang up; time passes. After every step the bounds must hold: no connection holds more
// unread replies than its limit, the store no more bytes and keys than its limits, at most the
// allowed connections are still in the handshake; and every reply on the wire is well framed.
// Nothing may throw out of it (the server drops a connection whose bytes make it throw, but none
// should).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gsync/bootstrap/store_core.hpp"

namespace {
struct script {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  std::string bytes(std::size_t k) {
    k = std::min(k, n);
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gsync::bootstrap;
  using clock = store_core::clock;
  store_limits lim;
  lim.total_bytes = 1 << 16;
  lim.max_keys = 64;
  lim.value_bytes = 4096;
  lim.key_bytes = 256;
  lim.out_bytes = 1 << 16;
  lim.parked_per_conn = 8;
  lim.preauth_per_source = 3;
  lim.preauth_total = 6;
  lim.connections = 12;
  lim.handshake_ms = std::chrono::milliseconds(50);
  store_core core(auth::job_key{}, gsync::logger(-1, gsync::log_level::none), lim);
  script s{data, size};
  auto now = clock::time_point{} + std::chrono::hours(1);
  std::vector<std::uint64_t> open;
  std::uint64_t next = 16;
  std::vector<std::string> wire(64);  // replies received per connection id (ids < 64 kept)
  while (s.n) {
    const std::uint8_t op = s.byte();
    const std::size_t k = open.empty() ? 0 : s.byte() % open.size();
    switch (op % 6) {
      case 0: {  // a connection opens, perhaps completing the handshake (an empty key: zero proofs)
        const std::uint64_t id = next++;
        const std::string from = "10.0.0." + std::to_string(s.byte() % 4) + ":" + std::to_string(id);
        if (!core.open(id, from, now)) break;
        open.push_back(id);
        if (op & 0x80) {
          std::string hello(gsync::bootstrap::auth::magic.data(), gsync::bootstrap::auth::magic.size());
          hello.append(auth::nonce_bytes, '\1');
          core.received(id, hello.data(), hello.size());
          const std::string proof(auth::mac_bytes, '\0');
          core.received(id, proof.data(), proof.size());
        }
        break;
      }
      case 1: {  // bytes on a connection
        if (open.empty()) break;
        const std::string b = s.bytes(s.byte());
        core.received(open[k], b.data(), b.size());
        break;
      }
      case 2: {  // a well-framed request with fuzzed contents
        if (open.empty()) break;
        const std::string body = s.bytes(1 + s.byte());
        std::string f;
        store_proto::put<std::uint32_t>(f, static_cast<std::uint32_t>(body.size()));
        f += body;
        core.received(open[k], f.data(), f.size());
        break;
      }
      case 3:  // the client reads what it was sent
        if (open.empty()) break;
        if (std::string* out = core.output(open[k])) {
          if (open[k] < wire.size()) wire[open[k]] += *out;
          core.count_sent(out->size());
          out->clear();
        }
        break;
      case 4:  // the client hangs up
        if (!open.empty()) core.hangup(open[k]);
        break;
      default:  // time passes
        now += std::chrono::milliseconds(s.byte());
        break;
    }
    core.expire(now);
    (void)core.take_ready();
    for (auto id : core.take_dead()) std::erase(open, id);
    for (auto id : open)
      if (const std::string* out = core.output(id); out && out->size() > lim.out_bytes) __builtin_trap();
    if (core.stored_bytes() > lim.total_bytes + 8192 || core.connections() > lim.connections) __builtin_trap();
  }
  // Every reply stream is whole frames of a known status (the handshake's 48 bytes first).
  for (auto& w : wire) {
    if (w.size() < auth::challenge_bytes) continue;
    std::size_t at = auth::challenge_bytes;
    while (at + 4 <= w.size()) {
      std::uint32_t len = 0;
      std::memcpy(&len, w.data() + at, 4);
      if (len == 0 || len > store_proto::max_frame) __builtin_trap();
      if (at + 4 + len > w.size()) break;
      if (static_cast<std::uint8_t>(w[at + 4]) > store_proto::st_lost) __builtin_trap();
      at += 4 + len;
    }
  }
  return 0;
}
