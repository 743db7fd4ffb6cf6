#pragma once
/// \file
/// The hierarchical allreduce of device buffers, for communicators whose ranks span several hosts
/// with the same number of ranks (L) on each, when the ranks of every host formed a CUDA IPC group
/// (dispatch/ipc_setup.hpp). Everything is queued on the caller's stream and watched from the
/// communicator's progress engine, one job per level, run in order.
///
/// How chunks move.
/// - Three-level form (large messages): (1) reduce-scatter inside the host over CUDA IPC
///   (cuda/ipc_hierarchical.hpp): local rank i ends up with part i of the buffer combined over its
///   host, in its output buffer; (2) the ranks with local index i, one per host, allreduce part i
///   through host staging (dispatch/device_collective.hpp: the stream waits while the part is copied
///   to pinned memory, reduced across hosts by a host schedule, finalized, and copied back);
///   (3) allgather inside the host over CUDA IPC. Each host link carries 2(H-1)/H of the buffer,
///   as the host hierarchical algorithm's (algo/hierarchical.hpp).
/// - Two-level form (small messages): (1) allreduce inside the host over CUDA IPC (one-shot or
///   two-shot as for one host); (2) the ranks with local index i allreduce the whole buffer across
///   hosts through host staging. One level fewer, L times the bytes on each host's link.
/// The level inside the host leaves `avg` undivided (its kernels sum); the level across hosts
/// divides once by the world size. Every rank gets the same bits: each host's partial is combined
/// in rank order by one kernel, and every cross-host group runs the same schedule on equal inputs.
/// The cross-host schedule is the cheapest flat one for H ranks under the network model.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "gsync/algo/registry.hpp"
#include "gsync/algo/select.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/fingerprint.hpp"
#include "gsync/core/group_primitives.hpp"
#include "gsync/core/request.hpp"
#include "gsync/cuda/ipc_hierarchical.hpp"
#include "gsync/cuda/ipc_schedule.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/dispatch/ipc_collective.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::detail {

/// The device model of group `g`: its arena slot (the smallest any rank asked for, the same on
/// every rank) sets the chunks, so every rank makes the same choice.
inline algo::ipc_cost_model ipc_model_of(const cuda::ipc::group& g) noexcept {
  algo::ipc_cost_model m;
  m.slot_bytes = g.layout().slot_bytes;
  return m;
}

/// The schedule of a flat device algorithm (one host). \tparam A one_shot or two_shot.
template <class A>
inline constexpr cuda::ipc::schedule ipc_schedule_of = std::is_same_v<A, algo::two_shot> ? cuda::ipc::schedule::two_shot
                                                                                             : cuda::ipc::schedule::one_shot;

/// The flat allreduce schedule with the lowest estimate for `bytes` over `world` ranks on model `m`.
inline algo::allreduce_id cheapest_flat_allreduce(std::size_t bytes, int world, const cost_model& m) {
  algo::allreduce_id best = algo::allreduce_id_of<algo::ring>;
  double best_us = -1;
  algo::allreduce_registry::for_each([&](auto a, algo::allreduce_id id) {
    if constexpr (!algo::detail::across_hosts_only<decltype(a)>()) {
      const double t = algo::estimate_us(id, bytes, world, m);
      if (best_us < 0 || t < best_us) best = id, best_us = t;
    }
  });
  return best;
}

/// Allreduce window `tk` of the level across hosts: `data` (`count` elements, a staging mirror) is
/// combined in place among the ranks `st.cross` and finalized.
template <class X, class T, class Op>
void cross_host_allreduce_run(communicator<X>& comm, op_ticket tk, T* data, std::size_t count, const Op& op, const ipc_state& st) {
  message_id id{tag_allreduce, tk.seq, make_fingerprint<T>(count, op_code_of<Op>(), -1)};
  op_scope scope(comm, "allreduce", tk, id);
  if (count == 0) return;
  algo::visit(cheapest_flat_allreduce(count * sizeof(T), static_cast<int>(st.cross.size()), st.network), [&](auto a) {
    using A = decltype(a);
    if constexpr (!algo::detail::across_hosts_only<A>()) {  // never chosen (cheapest_flat_allreduce)
      id.fp.algo = algo_code_of<A>();
      auto p = make_primitives<staged_memory>(comm, id, data, data, count, op);
      group_primitives<decltype(p)> across(p, st.cross, st.host, 0, count, /*on_output=*/true, /*allow_final=*/true);
      A::allreduce(across);
    }
  });
}

/// Queues the level across hosts on `s`: an in-place staged allreduce of `data[part]` among the
/// ranks `st->cross`. `windows_of_all` is the number of staging windows of the largest part any
/// rank stages, so that every rank numbers the same operations.
template <class X, class T, class Op>
request cross_host_launch(communicator<X>& comm, const std::shared_ptr<ipc_state>& st, T* data, cuda::ipc::range part,
                          std::size_t largest, const Op& op, cuda_stream s) {
  cuda::detail::staged_plan plan{staged(data + part.first, 1, part.count, true, false), staged(data + part.first, 1, part.count, false, true),
                                 true};
  plan.cut(comm.settings().cuda_staging_bytes);
  cuda::detail::staged_plan widest{staged(data, 1, largest, true, false), staged(data, 1, largest, false, true), true};
  widest.cut(comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "allreduce", s, plan, [&] {
    return [op, plan, state = st, tk = collective_tickets(comm, widest.windows)](communicator<X>& c, std::size_t w, std::byte* m, std::byte*) {
      cross_host_allreduce_run(c, tk[w], mirror_as<T>(m), plan.in.elems_of(w), op, *state);
    };
  });
}

inline namespace GSYNC_TU_NS {  // uses ipc_reduction_of (detail/hd.hpp)

/// Launches the hierarchical device allreduce (see the file comment) from `in` to `out` (may be
/// equal) on `s`; returns the request of its last level. `how` says why it runs (for the log).
template <class X, class T, class Op>
request hierarchical_allreduce_device(communicator<X>& comm, std::shared_ptr<ipc_state> st, const T* in, T* out, std::size_t count,
                                      const Op& op, cuda_stream s, const std::string& how) {
  cuda::ipc::group& g = *st->group;
  // The staging memory of the level across hosts, made before this rank's stream is held.
  (void)prepared_device_state(comm);
  const std::size_t bytes = count * sizeof(T);
  const auto form = cuda::ipc::choose_form(bytes, g.size());
  // Inside the host the kernels only combine; avg (or a user operator's finalize) divides once, across hosts.
  cuda::ipc_reduction::builtin_args b;
  const cuda::ipc_reduction inner = ipc_reduction_of<T>(op, b).unfinalized();
  const int hosts = static_cast<int>(st->cross.size());
  if (comm.log().enabled(log_level::info)) {
    // The level across hosts chooses its schedule per staging window (cross_host_allreduce_run).
    const std::size_t across = form == cuda::ipc::hier_form::two_level ? bytes : cuda::ipc::part(count, g.size(), 0, sizeof(T)).count * sizeof(T);
    const std::size_t window = std::min(across, std::max(comm.settings().cuda_staging_bytes, sizeof(T)) / sizeof(T) * sizeof(T));
    ipc_log_shape(comm, device_shape<T>("allreduce", count, op_name<Op>()),
                  "hierarchical_ipc: " + how + "; " + std::string(cuda::ipc::name(form)) + " (" + std::to_string(g.size()) + " ranks per host, " +
                      std::to_string(hosts) + " hosts; across hosts " + std::string(algo::name(cheapest_flat_allreduce(window, hosts, st->network))) +
                      " on windows of up to " + std::to_string(window) + " bytes through host staging)");
  }
  if (form == cuda::ipc::hier_form::two_level) {
    const auto inside = algo::choose_device_allreduce(bytes, g.size(), 1, ipc_model_of(g), comm.settings().cuda_ipc.algo);
    const auto sch = algo::device_allreduce_registry::visit(inside.id, [](auto a) { return ipc_schedule_of<decltype(a)>; });
    (void)ipc_launch(comm, st, "allreduce", s, [&](std::chrono::milliseconds limit) {
      return cuda::ipc::allreduce(g, inner, in, out, count, dtype_of<T>, sch, s, limit);
    });
    return cross_host_launch(comm, st, out, cuda::ipc::range{0, count}, count, op, s);
  }
  (void)ipc_launch(comm, st, "allreduce", s, [&](std::chrono::milliseconds limit) {
    return cuda::ipc::reduce_scatter_parts(g, inner, in, out, count, dtype_of<T>, s, limit);
  });
  (void)cross_host_launch(comm, st, out, cuda::ipc::part(count, g.size(), g.rank(), sizeof(T)),
                          cuda::ipc::part(count, g.size(), 0, sizeof(T)).count, op, s);
  return ipc_launch(comm, st, "allreduce", s, [&](std::chrono::milliseconds limit) {
    return cuda::ipc::allgather_parts(g, out, count, dtype_of<T>, s, limit);
  });
}

}  // namespace GSYNC_TU_NS

}  // namespace gsync::detail
