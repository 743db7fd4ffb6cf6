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
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>
#include <mutex>
#include <optional>
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
    auto v = env_debug_level();
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

/// Expands `%r` (the text `rank`), `%h` (host name) and `%p` (process id) in a per-rank file path template;
/// any other `%x` is kept as it is. `has_rank` tells whether `%r` occurred.
inline std::string expand_rank_path(std::string_view tmpl, std::string_view rank, bool& has_rank) {
  std::string path;
  has_rank = false;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if (c != '%' || i + 1 == tmpl.size()) {
      path += c;
      continue;
    }
    const char k = tmpl[++i];
    if (k == 'r') {
      path += rank;
      has_rank = true;
    } else if (k == 'p') {
      path += std::to_string(::getpid());
    } else if (k == 'h') {
      char h[256] = {};
      ::gethostname(h, sizeof h - 1);
      path += h;
    } else {
      path += '%';
      path += k;
    }
  }
  return path;
}

/// The descriptor rank `rank`'s messages go to: 2 (stderr), or its GSYNC_DEBUG_FILE (see file comment).
inline int log_fd(int rank) {
  static const std::optional<std::string> tmpl = env_debug_file();
  if (!tmpl || tmpl->empty()) return 2;
  static std::mutex m;
  static std::vector<std::pair<int, int>> fds;  // (rank, descriptor): a few entries per process
  std::lock_guard lk(m);
  for (const auto& [r, fd] : fds)
    if (r == rank) return fd;
  const std::string r = rank >= 0 ? std::to_string(rank) : "x";
  bool has_rank = false;
  std::string path = expand_rank_path(*tmpl, r, has_rank);
  if (!has_rank) path += "." + r;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string w = "[gsync] WARN: cannot open GSYNC_DEBUG_FILE " + path + ": " + std::strerror(errno) + "; logging to stderr\n";
    [[maybe_unused]] auto n = ::write(2, w.data(), w.size());
    fd = 2;
  }
  fds.emplace_back(rank, fd);
  return fd;
}

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
    if (!enabled(l)) return;
    static constexpr const char* names[] = {"", "WARN", "INFO", "TRACE"};
    std::string line = rank_ >= 0 ? "[gsync rank " + std::to_string(rank_) + "] " : std::string("[gsync] ");
    line += names[static_cast<int>(l)];
    line += ": ";
    line += msg;
    line += '\n';
    [[maybe_unused]] auto r = ::write(detail::log_fd(rank_), line.data(), line.size());
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
