#pragma once
/// \file
/// `gsync::allgatherv`: rank b contributes `counts[b]` elements; every rank receives all the
/// blocks packed in rank order (MPI_Allgatherv without displacements; torch's uneven all_gather).
///
/// \code
///   std::vector<std::size_t> counts = {3, 0, 5};       // the same on every rank
///   std::vector<float> in(counts[comm.rank()]), out(8);
///   gsync::allgatherv(comm, std::span<const float>{in}, std::span<float>{out}, counts);
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; dispatch/chosen.hpp picks the
/// algorithm (GSYNC_ALGO_ALLGATHERV); algo/ring.hpp runs the schedule over core/primitives.hpp.
/// Blocks land straight in the output; no scratch.

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

/// Runs allgatherv ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T>
void allgatherv_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::span<const std::size_t> counts, std::size_t total) {
  using P = primitives_t<Space, T, op::sum, X>;
  static_assert(std::is_same_v<Algo, algo::automatic> || allgatherv_algorithm<Algo, P>,
                "this algorithm policy has no allgatherv schedule");
  const message_id id{tag_allgatherv, tk.seq, make_fingerprint<T>(total, 0, -1)};
  op_scope scope(comm, "allgatherv", tk, id);
  if (total == 0) return;
  run_chosen<Algo>(comm, "allgatherv", comm.settings().algo_allgatherv, algo::collective_id_of<algo::ring>, total * sizeof(T),
                   dtype_of<T>, total, "", [&](auto a) {
                     using A = decltype(a);
                     if constexpr (allgatherv_algorithm<A, P>) {
                       message_id i = id;
                       i.fp.algo = algo_code_of<A>();
                       auto p = make_primitives<Space>(comm, i, in, out, total, op::sum{});
                       A::allgatherv(p, counts);
                     }
                   });
}

/// Checks allgatherv arguments (one count per rank, the input's and output's sizes, the only
/// in-place form) and returns the output's size.
template <class X, class T>
std::size_t check_allgatherv(const communicator<X>& comm, std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
  check_counts("allgatherv", "counts", counts, comm.size());
  const std::size_t total = checked_total("allgatherv", counts), mine = counts[static_cast<std::size_t>(comm.rank())];
  check_extent("allgatherv", "output", total, sizeof(T));
  check_size("allgatherv", "input", in.size(), mine, "counts[rank]");
  check_size("allgatherv", "output", out.size(), total, "the sum of counts");
  const std::size_t at = block_offset(counts, comm.rank());
  const bool in_place = static_cast<const void*>(in.data()) == static_cast<const void*>(out.data() + at);
  if (!in_place && overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("allgatherv", "input and output overlap, but the input is not block " + std::to_string(comm.rank()) +
                              " of the output (the only in-place form)");
  return total;
}

}  // namespace detail

/// Allgatherv: rank b's `counts[b]` input elements land at out[counts[0] + ... + counts[b-1]] on
/// every rank; in.size() = counts[rank], out.size() = the sum of counts, `counts` the same on every
/// rank (a count may be 0). In place when `in` is this rank's block of the output; any other
/// overlap is rejected.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring`).
/// \tparam X transport of the communicator. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void allgatherv(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, std::span<const std::size_t> counts) {
  const std::size_t total = detail::check_allgatherv<X, T>(comm, in, out, counts);
  using space = memory_space_of_t<decltype(out)>;
  detail::launch(comm, "allgatherv", [i = in.data(), o = out.data(), counts, total](communicator<X>& x, op_ticket tk) {
    detail::allgatherv_run<Algo, space>(x, tk, i, o, counts, total);
  });
}

/// Asynchronous allgatherv: same arguments and checks (thrown here), queued on the progress
/// engine; `counts` is copied. `in` and `out` must stay alive and untouched until the request
/// finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request allgatherv_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                         std::span<const std::size_t> counts) {
  const std::size_t total = detail::check_allgatherv<X, T>(comm, in, out, counts);
  using space = memory_space_of_t<decltype(out)>;
  return detail::launch_async(comm, "allgatherv", [i = in.data(), o = out.data(), cv = std::vector<std::size_t>(counts.begin(), counts.end()),
                                                   total](communicator<X>& x, op_ticket tk) {
    detail::allgatherv_run<Algo, space>(x, tk, i, o, cv, total);
  });
}

namespace detail {
/// Launches an allgatherv of device buffers on `s`: the host schedule on mirrors of windows of
/// the same columns of every block (dispatch/staging_plans.hpp).
template <class Algo, class X, class T>
request allgatherv_device(communicator<X>& comm, const T* in, T* out, std::span<const std::size_t> counts, cuda_stream s) {
  const std::size_t n = counts.size(), mine = counts[static_cast<std::size_t>(comm.rank())];
  const std::size_t we = varied_window(comm.settings().cuda_staging_bytes, n + 1, sizeof(T));
  auto plan = varied_plan(staged(in, 1, mine, true, false), staged_varied(out, counts, false, true), we);
  return staged_launch(comm, "allgatherv", s, plan, [&] {
    return [cv = std::vector<std::size_t>(counts.begin(), counts.end()), we, tk = collective_tickets(comm, plan.windows)](
               communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      const auto sub = window_counts(cv, w, we);
      allgatherv_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), sub, sum_of(sub));
    };
  });
}
}  // namespace detail

/// Allgatherv of device memory, ordered on CUDA stream `stream` as the device allreduce
/// (allreduce.hpp): returns once queued; later work on `stream` sees the result. Staged through
/// host memory in windows of the same columns of every block. Same sizes and in-place form as
/// the host overload; `counts` is host memory, copied.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void allgatherv(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, std::span<const std::size_t> counts,
                cuda_stream stream) {
  (void)detail::check_allgatherv<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), counts);
  (void)detail::allgatherv_device<Algo>(comm, in.data(), out.data(), counts, stream);
}

/// The device allgatherv with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request allgatherv_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out,
                         std::span<const std::size_t> counts, cuda_stream stream) {
  (void)detail::check_allgatherv<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), counts);
  return detail::allgatherv_device<Algo>(comm, in.data(), out.data(), counts, stream);
}

}  // namespace gsync
