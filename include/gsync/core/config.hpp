#pragma once
/// \file
/// Reading configuration from the environment: the GSYNC_* variables of the communicator and of the
/// transport are parsed here, with errors that name the variable and the value. What a program
/// passes explicitly (a `config` it fills, `transport::tcp_options`) is used as given: the
/// environment is read only by the `from_env` functions.

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "gsync/core/error.hpp"
#include "gsync/transport/tcp_options.hpp"

namespace gsync {

namespace detail {

/// The value of environment variable `name`, or nothing when unset or empty.
inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

/// Parses a size with an optional K/M/G suffix (powers of 1024): "64K" -> 65536.
inline std::optional<std::size_t> parse_size(const std::string& s) {
  if (s.empty()) return std::nullopt;
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos, 10);
  } catch (...) {
    return std::nullopt;
  }
  std::string suffix = s.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.empty()) return v;
  if (suffix.size() != 1) return std::nullopt;
  switch (suffix[0]) {
    case 'k': case 'K': return v << 10;
    case 'm': case 'M': return v << 20;
    case 'g': case 'G': return v << 30;
    default: return std::nullopt;
  }
}

/// Reads an integer variable, throwing invalid_argument when it is set but not an integer in range.
inline std::optional<long long> env_int(const char* name, long long lo, long long hi) {
  auto v = env(name);
  if (!v) return std::nullopt;
  try {
    std::size_t pos = 0;
    long long x = std::stoll(*v, &pos, 10);
    if (pos == v->size() && x >= lo && x <= hi) return x;
  } catch (...) {
  }
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not an integer in [" +
                                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

/// The whole of `v` as a number in (0, 1e9), else nullopt.
inline std::optional<double> parse_positive(const std::string& v) {
  try {
    std::size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos == v.size() && x > 0 && x < 1e9) return x;
  } catch (...) {
  }
  return std::nullopt;
}

/// Reads a seconds value (may be fractional), throwing invalid_argument on garbage.
inline std::optional<std::chrono::milliseconds> env_seconds(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  if (auto x = parse_positive(*v)) return std::chrono::milliseconds(static_cast<long long>(*x * 1000.0));
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not a positive number of seconds");
}

/// A positive number of variable `name`, or 0 when unset; throws invalid_argument otherwise.
inline double env_positive(const char* name) {
  auto v = env(name);
  if (!v) return 0;
  if (auto x = parse_positive(*v)) return *x;
  throw error(errc::invalid_argument, std::string(name) + "='" + *v + "' is not a positive number");
}

/// The transport settings of the GSYNC_* variables, over `o` where a variable is unset. Every
/// value is checked here, before any connection, so that a bad one fails every rank the same way.
inline transport::tcp_options tcp_options_from_env(transport::tcp_options o = {}) {
  if (auto v = env("GSYNC_SHM_DISABLE"); v && *v != "0") o.shm = false;
  if (auto v = env("GSYNC_SHM_MEMBARRIER"); v && *v == "0") o.shm_light = false;
  if (auto b = env("GSYNC_SHM_BYTES")) {
    auto v = parse_size(*b);
    if (!v || !transport::tcp_options::valid_ring_bytes(*v))
      throw error(errc::invalid_argument, "GSYNC_SHM_BYTES='" + *b + "' is not a size between 4K and 1G, multiple of 64");
    o.shm_ring_bytes = *v;
  }
  if (auto b = env("GSYNC_SOCKET_BUFFER")) {
    auto v = parse_size(*b);
    if (!v || !transport::tcp_options::valid_socket_buffer(static_cast<long long>(*v))) throw error(errc::invalid_argument, "GSYNC_SOCKET_BUFFER='" + *b + "' is not a size such as 4M");
    o.socket_buffer_bytes = static_cast<int>(*v);  // 0: leave the kernel's autotuning alone
  }
  if (auto w = env_int("GSYNC_STALL_WARN_S", 0, 1000000)) o.stall_warn_s = static_cast<int>(*w);
  if (auto c = env("GSYNC_TCP_CONGESTION")) o.congestion = (*c == "default") ? std::string{} : *c;
  if (auto sp = env_int("GSYNC_SPIN_US", 0, 1000000)) o.spin_us = static_cast<int>(*sp);
  if (auto y = env_int("GSYNC_YIELD_US", 0, 10000000)) o.yield_us = static_cast<int>(*y);
  if (auto y = env_int("GSYNC_TCP_YIELD_US", 0, 10000000)) o.tcp_yield_us = static_cast<int>(*y);
  if (auto v = env("GSYNC_NET_PROBE")) {
    if (*v != "0" && *v != "1") throw error(errc::invalid_argument, "GSYNC_NET_PROBE='" + *v + "' must be 0 (off) or 1 (on, the default)");
    o.net_probe = *v == "1";
  }
  if (const double g = env_positive("GSYNC_NET_GBPS")) o.net_gbps = g;
  if (const double l = env_positive("GSYNC_NET_LATENCY_US")) o.net_latency_us = l;
  if (auto i = env("GSYNC_SOCKET_IFNAME")) o.socket_ifname = *i;
  return o;
}

}  // namespace detail

/// Per-communicator settings. `from_env()` reads the GSYNC_* variables; setters on the communicator
/// change them later.
struct config {
  /// Deadline of every blocking wait (GSYNC_TIMEOUT_S, default 300 s).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Pipelining unit of the ring and other segmented schedules (GSYNC_SEGMENT_BYTES, default 512K).
  std::size_t segment_bytes = 512 * 1024;
  /// Algorithm forced for every allreduce (GSYNC_ALGO), empty = automatic.
  std::string algo;
  /// Algorithm forced for every broadcast (GSYNC_ALGO_BROADCAST), empty = automatic.
  std::string algo_broadcast;
  /// Algorithm forced for every reduce (GSYNC_ALGO_REDUCE), empty = automatic.
  std::string algo_reduce;
  /// Algorithm forced for every allgather (GSYNC_ALGO_ALLGATHER), empty = automatic.
  std::string algo_allgather;
  /// Algorithm forced for every reduce-scatter (GSYNC_ALGO_REDUCE_SCATTER), empty = automatic.
  std::string algo_reduce_scatter;
  /// Algorithm forced for every alltoall (GSYNC_ALGO_ALLTOALL), empty = automatic.
  std::string algo_alltoall;
  /// Deterministic mode (GSYNC_DETERMINISTIC=1): every result is bitwise equal from run to run for
  /// the same world size and placement. The automatic choices then read only the placement, the
  /// sizes and these settings, never what the start-up probe measured (`join` skips the probe;
  /// the links count as assumed, or as given by GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US).
  bool deterministic = false;
  /// Settings of the TCP / shared-memory transport, for communicators that `join` a job
  /// (transport/tcp_options.hpp; GSYNC_SHM_*, GSYNC_SOCKET_*, GSYNC_SPIN_US, GSYNC_NET_*, ...).
  transport::tcp_options transport;

  /// Settings from the environment, defaults where unset.
  static config from_env() {
    config c;
    if (auto t = detail::env_seconds("GSYNC_TIMEOUT_S")) c.timeout = *t;
    if (auto s = detail::env("GSYNC_SEGMENT_BYTES")) {
      auto b = detail::parse_size(*s);
      if (!b || *b == 0) throw error(errc::invalid_argument, "GSYNC_SEGMENT_BYTES='" + *s + "' is not a size such as 512K");
      c.segment_bytes = *b;
    }
    if (auto a = detail::env("GSYNC_ALGO")) c.algo = *a;
    // Names are checked where they are used (algo/select_collectives.hpp), which knows the valid ones.
    if (auto a = detail::env("GSYNC_ALGO_BROADCAST")) c.algo_broadcast = *a;
    if (auto a = detail::env("GSYNC_ALGO_REDUCE")) c.algo_reduce = *a;
    if (auto a = detail::env("GSYNC_ALGO_ALLGATHER")) c.algo_allgather = *a;
    if (auto a = detail::env("GSYNC_ALGO_REDUCE_SCATTER")) c.algo_reduce_scatter = *a;
    if (auto a = detail::env("GSYNC_ALGO_ALLTOALL")) c.algo_alltoall = *a;
    if (auto d = detail::env("GSYNC_DETERMINISTIC")) {
      if (*d != "0" && *d != "1") throw error(errc::invalid_argument, "GSYNC_DETERMINISTIC='" + *d + "' must be 0 or 1");
      c.deterministic = *d == "1";
    }
    c.transport = detail::tcp_options_from_env();
    return c;
  }
};

}  // namespace gsync
