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

#include "gsync/algo/dissemination.hpp"
#include "gsync/algo/select.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/detail/collective.hpp"

namespace gsync {

/// Barrier: blocks until every rank of `comm` has entered it (deadline: the communicator's timeout).
/// \tparam Algo algorithm policy (`algo::automatic` = `algo::dissemination`).
/// \tparam X transport of the communicator.
template <algorithm Algo = algo::automatic, transport_policy X>
void barrier(communicator<X>& comm) {
  using A = std::conditional_t<std::is_same_v<Algo, algo::automatic>, algo::dissemination, Algo>;
  const message_id id{detail::tag_barrier, comm.next_seq()};
  auto p = detail::make_primitives<std::uint8_t>(comm, id, nullptr, nullptr, 0, op::sum{});
  static_assert(barrier_algorithm<A, decltype(p)>, "this algorithm policy has no barrier schedule");
  A::barrier(p);
}

}  // namespace gsync
