#pragma once
/// \file
/// Debug logging to stderr: `GSYNC_DEBUG=WARN|INFO|TRACE` (default WARN), one line per message with
/// a `[gsync rank R]` prefix, written with a single write(2) so lines of concurrent ranks and threads
/// do not interleave.

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <string_view>

#include "gsync/core/config.hpp"

namespace gsync {

/// Log verbosity.
enum class log_level : int { none = 0, warn = 1, info = 2, trace = 3 };

namespace detail {

/// Parses GSYNC_DEBUG once per process (any case; unknown values fall back to WARN with a warning).
inline log_level log_level_from_env() {
  static const log_level lvl = [] {
    auto v = env("GSYNC_DEBUG");
    if (!v) return log_level::warn;
    std::string s;
    for (char ch : *v) s += static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
    if (s == "NONE" || s == "OFF") return log_level::none;
    if (s == "WARN") return log_level::warn;
    if (s == "INFO") return log_level::info;
    if (s == "TRACE") return log_level::trace;
    std::fprintf(stderr, "[gsync] WARN: GSYNC_DEBUG='%s' is not one of WARN, INFO, TRACE; using WARN\n", v->c_str());
    return log_level::warn;
  }();
  return lvl;
}

}  // namespace detail

/// A rank-prefixed logger. Cheap to copy; checks the level before formatting.
class logger {
 public:
  logger() = default;
  /// \param rank prefix rank (-1 before the rank is known).
  explicit logger(int rank) : rank_(rank), level_(detail::log_level_from_env()) {}
  /// True when messages at `l` are printed.
  bool enabled(log_level l) const noexcept { return static_cast<int>(l) <= static_cast<int>(level_); }
  /// Prints `msg` at level `l`.
  void write(log_level l, std::string_view msg) const {
    if (!enabled(l)) return;
    static constexpr const char* names[] = {"", "WARN", "INFO", "TRACE"};
    std::string line = rank_ >= 0 ? "[gsync rank " + std::to_string(rank_) + "] " : std::string("[gsync] ");
    line += names[static_cast<int>(l)];
    line += ": ";
    line += msg;
    line += '\n';
    [[maybe_unused]] auto r = ::write(2, line.data(), line.size());
  }
  void warn(std::string_view m) const { write(log_level::warn, m); }    ///< WARN message
  void info(std::string_view m) const { write(log_level::info, m); }    ///< INFO message
  void trace(std::string_view m) const { write(log_level::trace, m); }  ///< TRACE message
  int rank() const noexcept { return rank_; }                           ///< prefix rank

 private:
  int rank_ = -1;
  log_level level_ = log_level::warn;
};

}  // namespace gsync
