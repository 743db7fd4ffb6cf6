#pragma once
/// \file
/// File descriptors at set-up. A rank holds about two sockets per peer it talks to over TCP plus a
/// few of its own (listeners, the store, Asio's event descriptors), so the common soft limit of
/// 1024 ends a job of a few hundred ranks. Before connecting, set-up raises this process's soft
/// RLIMIT_NOFILE towards the hard limit when the job needs more (as MPI launchers do), and a set-up
/// that still runs out raises `gsync::error` naming the limit and how to raise it, instead of
/// letting a `std::system_error` escape or a listener spin on EMFILE.

#include <sys/resource.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

#include "gsync/core/error.hpp"
#include "gsync/detail/build_mode.hpp"

namespace gsync::bootstrap {

/// Descriptors a rank of a `world`-rank job may hold at most: two per peer, and a margin for its
/// listeners, the store (rank 0 holds one connection per rank), event descriptors and the user.
inline std::uint64_t fd_needed(int world) noexcept {
  const std::uint64_t n = world > 0 ? static_cast<std::uint64_t>(world) : 1;
  return 3 * n + 64;
}

/// This process's soft and hard RLIMIT_NOFILE, or none when it cannot be read.
inline std::optional<rlimit> fd_limits() noexcept {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return std::nullopt;
  return r;
}

/// Raises the soft limit to at least `needed` (at most the hard limit) when it is lower. Returns a
/// line for the log when it changed the limit, or when the hard limit is too low as well.
GSYNC_DECL std::optional<std::string> ensure_fd_room(std::uint64_t needed) noexcept;

/// True for the errors of running out of descriptors (per process or system-wide).
inline bool out_of_descriptors(const std::error_code& e) noexcept {
  // Asio's own system category does not always map to the generic conditions: compare the value too.
  return e == std::errc::too_many_files_open || e == std::errc::too_many_files_open_in_system ||
         (e.category() != gsync::error_category() && (e.value() == EMFILE || e.value() == ENFILE));
}

/// True for a system error whose text is the operating system's for running out of descriptors
/// (raised by a call that only had errno's text to give), and that does not carry the advice yet.
GSYNC_DECL bool mentions_out_of_descriptors(const error& e);

/// The error for running out of descriptors (`what`: where) in a `world`-rank job (0: unknown).
GSYNC_DECL error fd_exhausted(const std::string& what, int world);

}  // namespace gsync::bootstrap

#if !defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/bootstrap/fd_limit.ipp"
#endif
