#pragma once
/// \file
/// `gsync::barrier`: returns on a rank only once every rank has called it.
///
/// \code
///   gsync::barrier(comm);
/// \endcode
///
/// Call path: this file numbers the operation; the dissemination schedule (algo/dissemination.hpp)
/// exchanges ceil(log2 N) rounds of zero-byte messages over core/primitives.hpp.

#include <cstdint>
#include <type_traits>

#include "gsync/algo/select.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/dispatch/barrier_run.hpp"
#include "gsync/dispatch/collective.hpp"

namespace gsync {

/// Barrier: blocks until every rank of `comm` has entered it (deadline: the communicator's timeout).
/// \tparam Algo algorithm policy (`algo::automatic` = `algo::dissemination`).
/// \tparam X transport of the communicator.
template <algorithm Algo = algo::automatic, transport_policy X>
void barrier(communicator<X>& comm) {
  detail::launch(comm, "barrier", [](communicator<X>& c, op_ticket tk) { detail::barrier_run<Algo>(c, tk); });
}

/// Asynchronous barrier: the request finishes once every rank has entered the barrier (issued
/// its matching barrier or barrier_async).
/// \tparam Algo algorithm policy. \tparam X transport of the communicator.
template <algorithm Algo = algo::automatic, transport_policy X>
request barrier_async(communicator<X>& comm) {
  return detail::launch_async(comm, "barrier", [](communicator<X>& c, op_ticket tk) { detail::barrier_run<Algo>(c, tk); });
}

}  // namespace gsync
