#pragma once
/// \file
/// Debug logging: `GSYNC_DEBUG=WARN|INFO|TRACE` (default WARN), one line per message with a
/// `[gsync rank R]` prefix, written with a single write(2) so lines of concurrent ranks and threads
/// do not interleave. To stderr, or with `GSYNC_DEBUG_FILE=path` to one file per rank: `%r` in the
/// path becomes the rank, `%h` the host name, `%p` the process id; a path without `%r` gets
/// `.<rank>` appended. Files are opened for appending on a rank's first message; if one cannot be
/// opened, that rank logs to stderr and says why once.

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "gsync/core/config.hpp"
#include "gsync/detail/build_mode.hpp"

namespace gsync {

/// Log verbosity.
enum class log_level : int { none = 0, warn = 1, info = 2, trace = 3 };

namespace detail {

/// Parses GSYNC_DEBUG once per process (any case; unknown values fall back to WARN with a warning).
GSYNC_DECL log_level log_level_from_env();

/// Expands `%r` (the text `rank`), `%h` (host name) and `%p` (process id) in a per-rank file path template;
/// any other `%x` is kept as it is. `has_rank` tells whether `%r` occurred.
GSYNC_DECL std::string expand_rank_path(std::string_view tmpl, std::string_view rank, bool& has_rank);

/// The descriptor rank `rank`'s messages go to: 2 (stderr), or its GSYNC_DEBUG_FILE (see file comment).
GSYNC_DECL int log_fd(int rank);

/// `v` with `digits` digits after the point ("23.4"), for messages.
inline std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

}  // namespace detail

/// A rank-prefixed logger. Cheap to copy; checks the level before formatting.
class logger {
 public:
  logger() = default;
  /// \param rank prefix rank (-1 before the rank is known).
  explicit logger(int rank) : rank_(rank), level_(detail::log_level_from_env()) {}
  /// A logger at level `level`, whatever GSYNC_DEBUG says.
  logger(int rank, log_level level) : rank_(rank), level_(level) {}
  /// True when messages at `l` are printed.
  bool enabled(log_level l) const noexcept { return static_cast<int>(l) <= static_cast<int>(level_); }
  /// Prints `msg` at level `l`.
  void write(log_level l, std::string_view msg) const {
    if (enabled(l)) write_line(l, msg);
  }
  void warn(std::string_view m) const { write(log_level::warn, m); }    ///< WARN message
  void info(std::string_view m) const { write(log_level::info, m); }    ///< INFO message
  void trace(std::string_view m) const { write(log_level::trace, m); }  ///< TRACE message
  int rank() const noexcept { return rank_; }                           ///< prefix rank

 private:
  GSYNC_DECL void write_line(log_level l, std::string_view msg) const;

  int rank_ = -1;
  log_level level_ = log_level::warn;
};

/// Warnings of a flood (connections refused or dropped): the first 16 in full, then one line per
/// 1000 with the count so far, so that a stranger cannot fill the log (or a disk, with
/// GSYNC_DEBUG_FILE). Not thread-safe: one per event loop.
class flood_log {
 public:
  /// \param counted what the count says, plural ("connections dropped").
  explicit flood_log(const char* counted) noexcept : counted_(counted) {}
  /// Counts one more and logs `what` through `log` when its turn has come.
  void warn(const logger& log, const std::string& what) {
    if (++n_ <= 16 || n_ % 1000 == 0) log.warn(what + (n_ > 16 ? " (" + std::to_string(n_) + " " + counted_ + " so far)" : ""));
  }

 private:
  const char* counted_;
  std::uint64_t n_ = 0;
};

}  // namespace gsync

#if !defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/core/log.ipp"
#endif
