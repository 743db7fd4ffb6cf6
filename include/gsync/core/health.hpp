#pragma once
/// \file
/// `gsync::health_report`, what `communicator::health()` says without blocking: whether the
/// communicator can still be used, and if not, why and which rank was lost. A rank between
/// operations (computing, loading data) learns of a peer that stopped, vanished or exited from
/// the transport's heartbeat (transport/mesh/heartbeat.hpp) within GSYNC_LIVENESS_S:
/// \code
///   if (auto h = comm.health(); !h) {   // a peer is gone: go on without it
///     log(h.message);
///     comm = comm.shrink();
///   }
/// \endcode

#include <concepts>
#include <string>

#include "gsync/core/error.hpp"

namespace gsync {

/// The state of a communicator (see the file comment). Healthy: `ok()`, `kind` is `errc{}`.
struct health_report {
  /// `errc{}` while healthy; else the kind of error the next operation will fail with (usually
  /// `errc::peer_lost`), or the one an operation failed with already.
  errc kind{};
  /// The rank known lost first, in the numbering of the job's world communicator; -1 if none.
  int lost_rank = -1;
  /// What happened, naming the ranks (empty while healthy).
  std::string message;
  /// True while no failure is known.
  bool ok() const noexcept { return kind == errc{}; }
  /// `ok()`.
  explicit operator bool() const noexcept { return ok(); }
};

/// A transport that reports, without blocking and from any thread, failures it knows of outside
/// any operation (`x.health()`): a peer its liveness checks found stopped or gone, or its own
/// earlier failure.
/// \tparam X a transport type.
template <class X>
concept health_reporting_transport = requires(const X& x) {
  { x.health() } noexcept -> std::same_as<health_report>;
};

}  // namespace gsync
