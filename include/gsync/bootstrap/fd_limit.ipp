#pragma once
/// \file
/// Definitions of bootstrap/fd_limit.hpp's out-of-line functions: included by that header in the
/// header-only mode, by gsync/impl/src.hpp with GSYNC_SEPARATE_COMPILATION.

#include <algorithm>

#include "gsync/bootstrap/fd_limit.hpp"

namespace gsync::bootstrap {

GSYNC_DECL std::optional<std::string> ensure_fd_room(std::uint64_t needed) noexcept {
  try {
    auto r = fd_limits();
    if (!r || r->rlim_cur == RLIM_INFINITY || r->rlim_cur >= needed) return std::nullopt;
    const rlim_t want = r->rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(needed) : std::min<rlim_t>(r->rlim_max, needed);
    const rlim_t before = r->rlim_cur;
    if (want > before) {
      rlimit n = *r;
      n.rlim_cur = want;
      if (::setrlimit(RLIMIT_NOFILE, &n) != 0) return std::nullopt;
    }
    std::string s = "file descriptor limit (ulimit -n) " + std::to_string(before);
    if (want > before) s += " raised to " + std::to_string(want);
    if (want < needed)
      s += "; the job may need " + std::to_string(needed) + " but the hard limit is " + std::to_string(r->rlim_max) +
           " (raise it: ulimit -Hn, LimitNOFILE= in systemd, --ulimit nofile= in docker)";
    return s;
  } catch (...) {
    return std::nullopt;
  }
}

GSYNC_DECL bool mentions_out_of_descriptors(const error& e) {
  if (e.kind() != errc::system) return false;
  const std::string w = e.what();
  if (w.find("out of file descriptors") != std::string::npos) return false;
  for (int c : {EMFILE, ENFILE})
    if (w.find(std::generic_category().message(c)) != std::string::npos) return true;
  return false;
}

GSYNC_DECL error fd_exhausted(const std::string& what, int world) {
  std::string s = what + ": out of file descriptors";
  if (auto r = fd_limits())
    s += " (this process may open " + (r->rlim_cur == RLIM_INFINITY ? std::string("any number") : std::to_string(r->rlim_cur)) +
         ", hard limit " + (r->rlim_max == RLIM_INFINITY ? std::string("none") : std::to_string(r->rlim_max)) + ")";
  if (world > 0) s += "; a rank of " + std::to_string(world) + " ranks may need about " + std::to_string(fd_needed(world));
  s += ": raise the limit (ulimit -n / ulimit -Hn, LimitNOFILE= in systemd, --ulimit nofile= in docker), or the system-wide "
       "one (fs.file-max) when the error says 'in system'";
  return error(errc::system, s);
}

}  // namespace gsync::bootstrap
