#pragma once
/// \file
/// Definitions of core/log.hpp's out-of-line functions: included by that header in the header-only
/// mode, by gsync/impl/src.hpp with GSYNC_SEPARATE_COMPILATION (detail/build_mode.hpp).

#include "gsync/core/log.hpp"

namespace gsync {

namespace detail {

GSYNC_DECL log_level log_level_from_env() {
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

GSYNC_DECL std::string expand_rank_path(std::string_view tmpl, std::string_view rank, bool& has_rank) {
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

GSYNC_DECL int log_fd(int rank) {
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

}  // namespace detail

GSYNC_DECL void logger::write_line(log_level l, std::string_view msg) const {
  static constexpr const char* names[] = {"", "WARN", "INFO", "TRACE"};
  std::string line = rank_ >= 0 ? "[gsync rank " + std::to_string(rank_) + "] " : std::string("[gsync] ");
  line += names[static_cast<int>(l)];
  line += ": ";
  line += msg;
  line += '\n';
  [[maybe_unused]] auto r = ::write(detail::log_fd(rank_), line.data(), line.size());
}

}  // namespace gsync
