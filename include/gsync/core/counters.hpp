#pragma once
/// \file
/// Per-communicator operation counters: how many times each kind of operation ran ("allreduce",
/// "broadcast", "send", ...), how many payload bytes the callers passed, how long the calls took
/// (total and longest), and how many failed.
///
/// `op_counters::record` is called once per finished operation with the kind, the payload size
/// and the elapsed seconds; `get`, `snapshot`, `total` and `report` read the totals back, and
/// `report` prints them as a table for people. One lock guards everything, so every member may
/// be called from any thread (the user thread and a communicator's progress-engine thread both
/// record). The few distinct kinds (under 16 in gsync) are kept in the order they first came, and
/// sorted by name when read back. gsync's operations record through `record_static`, whose kind
/// is a string literal: after its first call the kind is found by its address, without comparing
/// characters, so a send/recv loop that alternates kinds pays far less for its counting than when
/// each record searched by name (benchmarks/results/README.md).
///
/// Conventions: `calls`, `bytes` and `seconds` count every recorded call, failed ones included;
/// `failures` counts the calls recorded with `failed = true` among them.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gsync/core/error.hpp"
#include "gsync/detail/spin_mutex.hpp"

namespace gsync {

namespace detail {

/// A byte count for people, in powers of 1024 (as GSYNC_*_BYTES values are parsed): "0 B", "512 B",
/// "1.5 KiB", "64.0 MiB", "2.00 GiB". Three significant digits from KiB up.
inline std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  // Keep three significant digits, and move to the next unit when rounding reaches 1024.
  const int decimals = v < 9.995 ? 2 : v < 99.95 ? 1 : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  if (std::string_view(buf) == "1024" && u + 1 < std::size(units)) {
    ++u;
    std::snprintf(buf, sizeof buf, "%.2f", 1.0);
  }
  return std::string(buf) + " " + units[u];
}

}  // namespace detail

/// Totals of one kind of operation on one communicator.
struct op_totals {
  std::uint64_t calls = 0;     ///< recorded calls, failed ones included
  std::uint64_t bytes = 0;     ///< sum of the payload bytes the callers passed
  double seconds = 0;          ///< sum of the calls' elapsed seconds
  double max_seconds = 0;      ///< the longest single call, in seconds
  std::uint64_t failures = 0;  ///< calls recorded as failed

  /// Mean seconds per call (0 when there were no calls).
  double mean_seconds() const noexcept { return calls ? seconds / static_cast<double>(calls) : 0.0; }

  /// Adds `o` into this: sums, except `max_seconds`, which becomes the larger of the two.
  op_totals& operator+=(const op_totals& o) noexcept {
    calls += o.calls;
    bytes += o.bytes;
    seconds += o.seconds;
    max_seconds = std::max(max_seconds, o.max_seconds);
    failures += o.failures;
    return *this;
  }

  friend bool operator==(const op_totals&, const op_totals&) = default;
};

/// Per-communicator counters; every member is safe to call from any thread (one lock).
class op_counters {
 public:
  op_counters() = default;
  /// Copies the totals of `o` (taken under its lock).
  op_counters(const op_counters& o) : kinds_(o.snapshot()) {}
  /// Replaces the totals with those of `o`.
  op_counters& operator=(const op_counters& o) {
    if (this != &o) {
      auto s = o.snapshot();
      std::lock_guard lk(m_);
      kinds_ = std::move(s);
      last_index_ = 0;
      n_static_ = 0;
    }
    return *this;
  }

  /// Adds one call of `kind` that carried `bytes` payload bytes and took `seconds` (>= 0).
  /// Throws gsync::error(errc::invalid_argument) for an empty kind or a negative or NaN time.
  void record(std::string_view kind, std::uint64_t bytes, double seconds, bool failed = false) {
    if (kind.empty()) throw error(errc::invalid_argument, "op_counters::record: the operation kind is empty");
    check_seconds(kind, seconds);
    std::lock_guard lk(m_);
    add(kinds_[index_of(kind)].second, bytes, seconds, failed);
  }

  /// `record` for a kind whose characters never change and outlive the counters (a string
  /// literal): the kind is remembered by its address, so later calls with the same address skip
  /// the search by name. Two addresses with the same characters are the same kind. Throws as
  /// `record` does, and for a null `kind`.
  void record_static(const char* kind, std::uint64_t bytes, double seconds, bool failed = false) {
    if (!kind || !*kind) throw error(errc::invalid_argument, "op_counters::record: the operation kind is empty");
    check_seconds(kind, seconds);
    std::lock_guard lk(m_);
    std::size_t i = 0;
    while (i < n_static_ && static_[i].first != kind) ++i;
    std::size_t k;
    if (i < n_static_) {
      k = static_[i].second;
    } else {
      k = index_of(kind);
      if (n_static_ < static_.size()) static_[n_static_++] = {kind, static_cast<std::uint32_t>(k)};
    }
    add(kinds_[k].second, bytes, seconds, failed);
  }

  /// The totals of `kind`; all zeros if it was never recorded.
  op_totals get(std::string_view kind) const {
    std::lock_guard lk(m_);
    for (const auto& e : kinds_)
      if (e.first == kind) return e.second;
    return op_totals{};
  }

  /// Every recorded kind with its totals, sorted by kind.
  std::vector<std::pair<std::string, op_totals>> snapshot() const {
    std::vector<std::pair<std::string, op_totals>> v;
    {
      std::lock_guard lk(m_);
      v = kinds_;
    }
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return v;
  }

  /// The sum over all kinds (`max_seconds` is the longest call of any kind).
  op_totals total() const {
    std::lock_guard lk(m_);
    op_totals t;
    for (const auto& k : kinds_) t += k.second;
    return t;
  }

  /// A multi-line table for people: one row per kind (sorted) and a total row, with columns kind,
  /// calls, bytes (B/KiB/MiB/GiB), total s, mean us, max us, failures. Says so when nothing was recorded.
  std::string report() const {
    const auto rows = snapshot();
    if (rows.empty()) return "no operations recorded\n";
    op_totals sum;
    std::size_t width = 5;  // "total"
    for (const auto& r : rows) {
      sum += r.second;
      width = std::max(width, r.first.size());
    }
    std::string out;
    char line[256];
    const int w = static_cast<int>(std::min<std::size_t>(width, 64));
    std::snprintf(line, sizeof line, "%-*s %10s %11s %11s %11s %11s %8s\n", w, "kind", "calls", "bytes", "total s",
                  "mean us", "max us", "failures");
    out += line;
    auto row = [&](std::string_view name, const op_totals& t) {
      std::snprintf(line, sizeof line, "%-*.*s %10llu %11s %11.6f %11.1f %11.1f %8llu\n", w, w, std::string(name).c_str(),
                    static_cast<unsigned long long>(t.calls), detail::format_bytes(t.bytes).c_str(), t.seconds,
                    t.mean_seconds() * 1e6, t.max_seconds * 1e6, static_cast<unsigned long long>(t.failures));
      out += line;
    };
    for (const auto& r : rows) row(r.first, r.second);
    row("total", sum);
    return out;
  }

  /// Forgets every kind and total.
  void reset() {
    std::lock_guard lk(m_);
    kinds_.clear();
    n_static_ = 0;
  }

 private:
  using entry = std::pair<std::string, op_totals>;

  static void check_seconds(std::string_view kind, double seconds) {
    if (!(seconds >= 0.0))
      throw error(errc::invalid_argument, "op_counters::record(\"" + std::string(kind) + "\"): elapsed time " +
                                              std::to_string(seconds) + " s is negative or not a number");
  }

  static void add(op_totals& t, std::uint64_t bytes, double seconds, bool failed) noexcept {
    ++t.calls;
    t.bytes += bytes;
    t.seconds += seconds;
    if (seconds > t.max_seconds) t.max_seconds = seconds;
    if (failed) ++t.failures;
  }

  // The index of `kind` in kinds_, appended when new (m_ held). The last kind found is tried
  // first: a loop of one collective skips the search.
  std::size_t index_of(std::string_view kind) {
    if (last_index_ < kinds_.size() && kinds_[last_index_].first == kind) return last_index_;
    std::size_t i = 0;
    while (i < kinds_.size() && kinds_[i].first != kind) ++i;
    if (i == kinds_.size()) kinds_.emplace_back(std::string(kind), op_totals{});
    last_index_ = i;
    return i;
  }

  mutable detail::spin_mutex m_;
  std::vector<entry> kinds_;  // in the order of their first record: indexes never move
  std::size_t last_index_ = 0;  // where index_of found the last kind (checked before use)
  std::array<std::pair<const char*, std::uint32_t>, 16> static_{};  // record_static's addresses -> index
  std::size_t n_static_ = 0;
};

}  // namespace gsync
