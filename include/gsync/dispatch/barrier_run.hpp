#pragma once
/// \file
/// `detail::barrier_run`: the schedule of one barrier (gsync::barrier, and the collective step that
/// prepares a communicator's device resources, dispatch/device_collective.hpp).

#include <type_traits>

#include "gsync/algo/dissemination.hpp"
#include "gsync/algo/select.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/dispatch/collective.hpp"

namespace gsync::detail {

/// Runs barrier ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class X>
void barrier_run(communicator<X>& comm, op_ticket tk) {
  using A = std::conditional_t<std::is_same_v<Algo, algo::automatic>, algo::dissemination, Algo>;
  message_id id{tag_barrier, tk.seq, make_fingerprint<void>(0)};
  id.fp.algo = algo_code_of<A>();
  op_scope scope(comm, "barrier", tk, id);
  // Empty messages, no buffer: host memory, which every transport moves by default.
  auto p = make_primitives<host_memory>(comm, id, static_cast<const std::uint8_t*>(nullptr), static_cast<std::uint8_t*>(nullptr), 0,
                                        op::sum{});
  static_assert(barrier_algorithm<A, decltype(p)>, "this algorithm policy has no barrier schedule");
  A::barrier(p);
}

}  // namespace gsync::detail
