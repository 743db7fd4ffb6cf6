#pragma once
/// \file
/// Reading configuration from the environment: every GSYNC_* variable is parsed here, with errors
/// that name the variable and the value.

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "gsync/core/error.hpp"

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
    return c;
  }
};

}  // namespace gsync
