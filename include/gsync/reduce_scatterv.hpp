#pragma once
/// \file
/// `gsync::reduce_scatterv`: every rank contributes N blocks packed in rank order, block b of
/// `counts[b]` elements; rank r receives block r reduced element-wise over all ranks
/// (MPI_Reduce_scatter; torch's uneven reduce_scatter).
///
/// \code
///   std::vector<std::size_t> counts = {3, 0, 5};       // the same on every rank
///   std::vector<float> in(8), out(counts[comm.rank()]);
///   gsync::reduce_scatterv(comm, std::span<const float>{in}, std::span<float>{out}, counts, gsync::op::sum{});
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; dispatch/chosen.hpp picks the
/// algorithm (GSYNC_ALGO_REDUCE_SCATTERV); algo/ring.hpp runs the schedule over
/// core/primitives.hpp. The input is only read (in place, only block r is written); partials
/// travel through the communicator's fixed scratch.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gsync/algo/select_collectives.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/device_span.hpp"
#include "gsync/dispatch/chosen.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/dispatch/staging_plans.hpp"

namespace gsync {

namespace detail {

/// Runs reduce_scatterv ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T, class Op>
void reduce_scatterv_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::span<const std::size_t> counts, std::size_t total,
                         const Op& op) {
  using P = primitives_t<Space, T, Op, X>;
  static_assert(std::is_same_v<Algo, algo::automatic> || reduce_scatterv_algorithm<Algo, P>,
                "this algorithm policy has no reduce_scatterv schedule");
  const message_id id{tag_reduce_scatterv, tk.seq, make_fingerprint<T>(total, op_code_of<Op>(), -1)};
  op_scope scope(comm, "reduce_scatterv", tk, id);
  if (total == 0) return;
  run_chosen<Algo>(comm, "reduce_scatterv", comm.settings().algo_reduce_scatterv, algo::collective_id_of<algo::ring>, total * sizeof(T),
                   dtype_of<T>, total, op_name<Op>(), [&](auto a) {
                     using A = decltype(a);
                     if constexpr (reduce_scatterv_algorithm<A, P>) {
                       message_id i = id;
                       i.fp.algo = algo_code_of<A>();
                       auto p = make_primitives<Space>(comm, i, in, out, total, op);
                       A::reduce_scatterv(p, counts);
                     }
                   });
}

/// Checks reduce_scatterv arguments (one count per rank, the sizes, the only in-place form) and
/// returns the input's size.
template <class X, class T>
std::size_t check_reduce_scatterv(const communicator<X>& comm, std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
  check_counts("reduce_scatterv", "counts", counts, comm.size());
  const std::size_t total = checked_total("reduce_scatterv", counts), mine = counts[static_cast<std::size_t>(comm.rank())];
  check_extent("reduce_scatterv", "input", total, sizeof(T));
  check_size("reduce_scatterv", "input", in.size(), total, "the sum of counts");
  check_size("reduce_scatterv", "output", out.size(), mine, "counts[rank]");
  const std::size_t at = block_offset(counts, comm.rank());
  const bool in_place = static_cast<const void*>(out.data()) == static_cast<const void*>(in.data() + at);
  if (!in_place && overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("reduce_scatterv", "input and output overlap, but the output is not block " + std::to_string(comm.rank()) +
                                   " of the input (the only in-place form)");
  return total;
}

}  // namespace detail

/// Reduce-scatterv: out[i] on rank r = op over ranks of in[counts[0] + ... + counts[r-1] + i],
/// with in.size() = the sum of counts and out.size() = counts[r], `counts` the same on every rank
/// (a count may be 0). In place when `out` is this rank's block of the input; any other overlap is
/// rejected.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring`).
/// \tparam X transport of the communicator. \tparam T element type. \tparam Op reduction operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void reduce_scatterv(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, std::span<const std::size_t> counts,
                     Op op = {}) {
  const std::size_t total = detail::check_reduce_scatterv<X, T>(comm, in, out, counts);
  using space = memory_space_of_t<decltype(out)>;
  detail::launch(comm, "reduce_scatterv", [op, i = in.data(), o = out.data(), counts, total](communicator<X>& x, op_ticket tk) {
    detail::reduce_scatterv_run<Algo, space>(x, tk, i, o, counts, total, op);
  });
}

/// Asynchronous reduce_scatterv: same arguments and checks (thrown here), queued on the progress
/// engine; `counts` is copied. `in` and `out` must stay alive and untouched until the request
/// finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request reduce_scatterv_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                              std::span<const std::size_t> counts, Op op = {}) {
  const std::size_t total = detail::check_reduce_scatterv<X, T>(comm, in, out, counts);
  using space = memory_space_of_t<decltype(out)>;
  return detail::launch_async(comm, "reduce_scatterv",
                              [op, i = in.data(), o = out.data(), cv = std::vector<std::size_t>(counts.begin(), counts.end()), total](
                                  communicator<X>& x, op_ticket tk) { detail::reduce_scatterv_run<Algo, space>(x, tk, i, o, cv, total, op); });
}

namespace detail {
inline namespace GSYNC_TU_NS {  // may use a user operator's GPU kernel (detail/hd.hpp)
/// Launches a reduce_scatterv of device buffers on `s`: the host schedule on mirrors of windows
/// of the same columns of every block (dispatch/staging_plans.hpp).
template <class Algo, class X, class T, class Op>
request reduce_scatterv_device(communicator<X>& comm, const T* in, T* out, std::span<const std::size_t> counts, const Op& op, cuda_stream s) {
  const std::size_t n = counts.size(), mine = counts[static_cast<std::size_t>(comm.rank())];
  const std::size_t we = varied_window(comm.settings().cuda_staging_bytes, n + 1, sizeof(T));
  auto plan = varied_plan(staged_varied(in, counts, true, false), staged(out, 1, mine, false, true), we);
  return staged_launch(comm, "reduce_scatterv", s, plan, [&] {
    return [op, cv = std::vector<std::size_t>(counts.begin(), counts.end()), we, tk = collective_tickets(comm, plan.windows)](
               communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      const auto sub = window_counts(cv, w, we);
      reduce_scatterv_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), sub, sum_of(sub), op);
    };
  });
}
}  // namespace GSYNC_TU_NS
}  // namespace detail

inline namespace GSYNC_TU_NS {  // the device overloads (detail/hd.hpp)

/// Reduce-scatterv of device memory, ordered on CUDA stream `stream` as the device allreduce
/// (allreduce.hpp): returns once queued; later work on `stream` sees the result. Staged through
/// host memory in windows of the same columns of every block. Same sizes and in-place form as
/// the host overload; `counts` is host memory, copied.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void reduce_scatterv(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out,
                     std::span<const std::size_t> counts, Op op, cuda_stream stream) {
  (void)detail::check_reduce_scatterv<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), counts);
  (void)detail::reduce_scatterv_device<Algo>(comm, in.data(), out.data(), counts, op, stream);
}

/// The device reduce_scatterv with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request reduce_scatterv_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out,
                              std::span<const std::size_t> counts, Op op, cuda_stream stream) {
  (void)detail::check_reduce_scatterv<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), counts);
  return detail::reduce_scatterv_device<Algo>(comm, in.data(), out.data(), counts, op, stream);
}

}  // namespace GSYNC_TU_NS

}  // namespace gsync
