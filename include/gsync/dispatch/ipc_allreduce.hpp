#pragma once
/// \file
/// Which algorithm runs an allreduce of device buffers, and the launch of those over CUDA IPC.
/// - A device algorithm of algo/cuda_ipc.hpp, forced by the template argument or GSYNC_ALGO, runs
///   where the communicator's GPUs formed a CUDA IPC group of the right shape, and fails with
///   invalid_argument saying why anywhere else.
/// - The automatic algorithm takes CUDA IPC where the group, the element type and the operator
///   allow (`algo::choose_device_allreduce` picks among the device algorithms by their models),
///   and otherwise host staging (the host algorithm chosen per window, dispatch/device_collective.hpp).
/// - A host algorithm (template argument or GSYNC_ALGO) runs on host staging.
/// Each choice is logged once per shape at GSYNC_DEBUG=INFO, with its reason.

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "gsync/algo/registry.hpp"
#include "gsync/algo/select.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"
#include "gsync/cuda/ipc_api.hpp"
#include "gsync/cuda/ipc_plan.hpp"
#include "gsync/cuda/ipc_schedule.hpp"
#include "gsync/dispatch/ipc_collective.hpp"
#include "gsync/dispatch/ipc_hierarchical.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::detail {
inline namespace GSYNC_TU_NS {  // depends on what this file can reduce (detail/hd.hpp)


/// Why device algorithm `A` cannot run an allreduce of `T` with `Op` on a communicator whose CUDA
/// IPC state is `st`; empty when it can.
template <class A, class T, class Op>
std::string ipc_refusal(const ipc_state* st) {
  if constexpr (!ipc_reducible<T, Op>) {
    return ipc_kernel_gap<T, Op>();
  } else {
    if (!st || !st->group) return "CUDA IPC does not apply to this communicator: " + (st ? st->refusal : std::string("it failed"));
    if (A::across_hosts_only && !st->across_hosts)
      return "every rank is on one host (" + algo::device_allreduce_names() + ": one_shot and two_shot run there)";
    if (!A::across_hosts_only && st->across_hosts)
      return "the ranks span " + std::to_string(st->cross.size()) +
             " hosts, and it runs among the GPUs of one host (hierarchical_ipc spans hosts)";
    return {};
  }
}

/// Launches device algorithm `A` (checked runnable) from `in` to `out` on `s`; `how` says why it
/// runs, for the log.
template <class A, class X, class T, class Op>
  requires ipc_reducible<T, Op>
request ipc_allreduce_launch(communicator<X>& comm, std::shared_ptr<ipc_state> st, const T* in, T* out, std::size_t count,
                             const Op& op, cuda_stream s, const std::string& how) {
  if constexpr (A::across_hosts_only) {
    return hierarchical_allreduce_device(comm, std::move(st), in, out, count, op, s, how);
  } else {
    cuda::ipc::group* g = st->group.get();
    ipc_log_shape(comm, device_shape<T>("allreduce", count, op_name<Op>()), std::string(A::name) + ": " + how);
    return ipc_launch(comm, std::move(st), "allreduce", s, [&](std::chrono::milliseconds limit) {
      cuda::ipc_reduction::builtin_args b;
      return cuda::ipc::allreduce(*g, ipc_reduction_of<T>(op, b), in, out, count, dtype_of<T>, ipc_schedule_of<A>, s, limit);
    });
  }
}

/// Runs device algorithm `A`, forced by `by` ("allreduce<one_shot>", "GSYNC_ALGO=one_shot"), or
/// throws invalid_argument saying why it cannot run here.
template <class A, class X, class T, class Op>
request forced_ipc_allreduce(communicator<X>& comm, const T* in, T* out, std::size_t count, const Op& op, cuda_stream s,
                             const std::string& by) {
  std::shared_ptr<ipc_state> st;
  if constexpr (ipc_reducible<T, Op>) {
    st = ipc_state_of(comm);  // collective, the same decision on every rank
    if (!st && comm.broken()) comm.engine().throw_broken();
  }
  if (std::string why = ipc_refusal<A, T, Op>(st.get()); !why.empty())
    throw error(errc::invalid_argument, "allreduce of device buffers: " + std::string(A::name) + " (forced by " + by + ") cannot run: " + why);
  if constexpr (ipc_reducible<T, Op>)
    return ipc_allreduce_launch<A>(comm, std::move(st), in, out, count, op, s, "forced by " + by);
  else
    return {};  // not reached: ipc_refusal names the type or the operator
}

/// The automatic choice over CUDA IPC where the communicator's group serves it (`st->group`).
template <class X, class T, class Op>
  requires ipc_reducible<T, Op>
request automatic_ipc_allreduce(communicator<X>& comm, std::shared_ptr<ipc_state> st, const T* in, T* out, std::size_t count,
                                const Op& op, cuda_stream s) {
  const int hosts = st->across_hosts ? static_cast<int>(st->cross.size()) : 1;
  const auto ch = algo::choose_device_allreduce(count * sizeof(T), st->group->size(), hosts, ipc_model_of(*st->group),
                                                comm.settings().cuda_ipc.algo, st->network);
  const bool logging = comm.log().enabled(log_level::info);
  return algo::device_allreduce_registry::visit(ch.id, [&](auto a) {
    return ipc_allreduce_launch<decltype(a)>(comm, std::move(st), in, out, count, op, s, logging ? ch.reason() : std::string());
  });
}

/// Logs once per shape, at INFO, that a device allreduce runs on host staging, and why.
template <class T, class X>
void log_staged_allreduce(communicator<X>& comm, std::size_t count, std::string_view op, const std::string& why) {
  if (!comm.log().enabled(log_level::info)) return;
  std::string shape = device_shape<T>("allreduce", count, op);
  if (comm.first_time(shape)) comm.log().info(shape + " -> host staging: " + why);
}

}  // namespace GSYNC_TU_NS
}  // namespace gsync::detail
