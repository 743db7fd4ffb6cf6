#pragma once
/// \file
/// `gsync::alltoallv`: rank i sends `send_counts[j]` elements to every rank j and receives
/// `recv_counts[j]` from it, blocks packed in rank order on both sides (MPI_Alltoallv without
/// displacements; torch's all_to_all_single with splits). Rank i's send_counts[j] must equal
/// rank j's recv_counts[i].
///
/// \code
///   // rank r sends r+1 elements to every rank, so it receives j+1 from rank j
///   std::vector<std::size_t> sc(n, r + 1), rc(n);
///   for (int j = 0; j < n; ++j) rc[j] = j + 1;
///   gsync::alltoallv(comm, std::span<const int>{in}, sc, std::span<int>{out}, rc);
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; dispatch/chosen.hpp picks the
/// algorithm (GSYNC_ALGO_ALLTOALLV); algo/pairwise.hpp runs the schedule over
/// core/primitives.hpp. No scratch; input and output must not overlap.

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

/// Runs alltoallv ticket `tk` (numbered at issue) on `comm`; `in_total`, `out_total`: the sums of
/// the counts; `completes` false for a window of a staged alltoallv that is not this rank's last.
template <class Algo, class Space = host_memory, class X, class T>
void alltoallv_run(communicator<X>& comm, op_ticket tk, const T* in, std::span<const std::size_t> send_counts, T* out,
                   std::span<const std::size_t> recv_counts, std::size_t in_total, std::size_t out_total, bool completes = true) {
  using P = primitives_t<Space, T, op::sum, X>;
  static_assert(std::is_same_v<Algo, algo::automatic> || alltoallv_algorithm<Algo, P>, "this algorithm policy has no alltoallv schedule");
  // The counts differ from rank to rank: the fingerprint carries none (a frame's length still
  // has to match what its receiver expects).
  const message_id id{tag_alltoallv, tk.seq, make_fingerprint<T>(0, 0, -1)};
  op_scope scope(comm, "alltoallv", tk, id, completes);
  if (in_total == 0 && out_total == 0) return;
  run_chosen<Algo>(comm, "alltoallv", comm.settings().algo_alltoallv, algo::collective_id_of<algo::pairwise>, in_total * sizeof(T),
                   dtype_of<T>, in_total, "", [&](auto a) {
                     using A = decltype(a);
                     if constexpr (alltoallv_algorithm<A, P>) {
                       message_id i = id;
                       i.fp.algo = algo_code_of<A>();
                       auto p = make_primitives<Space>(comm, i, in, out, std::max(in_total, out_total), op::sum{});
                       A::alltoallv(p, send_counts, recv_counts);
                     }
                   });
}

/// Checks alltoallv arguments (one count per rank on each side, the sizes, this rank's own block
/// the same size both ways, no overlap); returns the sums of the send and receive counts.
template <class X, class T>
std::pair<std::size_t, std::size_t> check_alltoallv(const communicator<X>& comm, std::span<const T> in, std::span<const std::size_t> send_counts,
                                                    std::span<T> out, std::span<const std::size_t> recv_counts) {
  check_counts("alltoallv", "send_counts", send_counts, comm.size());
  check_counts("alltoallv", "recv_counts", recv_counts, comm.size());
  const std::size_t in_total = checked_total("alltoallv", send_counts), out_total = checked_total("alltoallv", recv_counts);
  check_extent("alltoallv", "input", in_total, sizeof(T));
  check_extent("alltoallv", "output", out_total, sizeof(T));
  check_size("alltoallv", "input", in.size(), in_total, "the sum of send_counts");
  check_size("alltoallv", "output", out.size(), out_total, "the sum of recv_counts");
  const auto r = static_cast<std::size_t>(comm.rank());
  if (send_counts[r] != recv_counts[r])
    invalid("alltoallv", "this rank sends itself " + std::to_string(send_counts[r]) + " elements (send_counts[" + std::to_string(r) +
                             "]) but receives " + std::to_string(recv_counts[r]) + " from itself (recv_counts[" + std::to_string(r) + "])");
  if (overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("alltoallv", "input and output overlap (in-place alltoallv is not supported)");
  return {in_total, out_total};
}

}  // namespace detail

/// Alltoallv: input block j (`send_counts[j]` elements, blocks packed in rank order) goes to rank
/// j; output block j (`recv_counts[j]`) comes from rank j. Rank i's send_counts[j] must equal rank
/// j's recv_counts[i] (a count may be 0); a pair that disagrees fails with errc::mismatch, or
/// leaves a message that the next operation between them reports. Input and output must not
/// overlap.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::pairwise`).
/// \tparam X transport of the communicator. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void alltoallv(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<const std::size_t> send_counts, std::span<T> out,
               std::span<const std::size_t> recv_counts) {
  const auto [it, ot] = detail::check_alltoallv<X, T>(comm, in, send_counts, out, recv_counts);
  using space = memory_space_of_t<decltype(out)>;
  detail::launch(comm, "alltoallv", [i = in.data(), o = out.data(), send_counts, recv_counts, it = it, ot = ot](communicator<X>& x, op_ticket tk) {
    detail::alltoallv_run<Algo, space>(x, tk, i, send_counts, o, recv_counts, it, ot);
  });
}

/// Asynchronous alltoallv: same arguments and checks (thrown here), queued on the progress
/// engine; the counts are copied. `in` and `out` must stay alive and untouched until the request
/// finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request alltoallv_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<const std::size_t> send_counts,
                        std::span<T> out, std::span<const std::size_t> recv_counts) {
  const auto [it, ot] = detail::check_alltoallv<X, T>(comm, in, send_counts, out, recv_counts);
  using space = memory_space_of_t<decltype(out)>;
  return detail::launch_async(comm, "alltoallv",
                              [i = in.data(), o = out.data(), sc = std::vector<std::size_t>(send_counts.begin(), send_counts.end()),
                               rc = std::vector<std::size_t>(recv_counts.begin(), recv_counts.end()), it = it,
                               ot = ot](communicator<X>& x, op_ticket tk) { detail::alltoallv_run<Algo, space>(x, tk, i, sc, o, rc, it, ot); });
}

namespace detail {
/// Launches an alltoallv of device buffers on `s`: the host schedule on mirrors of windows of the
/// same columns of every pair's block (dispatch/staging_plans.hpp). A rank knows only its own
/// pairs' counts, so ranks may run different numbers of windows: the operation takes one ticket,
/// every window runs under it, and a pair's pieces fall in windows both its ranks run (window w
/// carries columns [w * we, (w + 1) * we) of every block, we being the same on every rank).
template <class Algo, class X, class T>
request alltoallv_device(communicator<X>& comm, const T* in, std::span<const std::size_t> send_counts, T* out,
                         std::span<const std::size_t> recv_counts, cuda_stream s) {
  const std::size_t n = send_counts.size();
  const std::size_t we = varied_window(comm.settings().cuda_staging_bytes, 2 * n, sizeof(T));
  auto plan = varied_plan(staged_varied(in, send_counts, true, false), staged_varied(out, recv_counts, false, true), we);
  plan.windows = std::max<std::size_t>(plan.windows, 1);  // an empty one still completes (shrink compares the counts)
  return staged_launch(comm, "alltoallv", s, plan, [&] {
    return [sc = std::vector<std::size_t>(send_counts.begin(), send_counts.end()), rc = std::vector<std::size_t>(recv_counts.begin(), recv_counts.end()),
            we, last = plan.windows - 1, tk = comm.next_op()](communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      const auto ws = window_counts(sc, w, we), wr = window_counts(rc, w, we);
      alltoallv_run<Algo, staged_memory>(x, tk, mirror_as<T>(im), ws, mirror_as<T>(om), wr, sum_of(ws), sum_of(wr), w == last);
    };
  });
}
}  // namespace detail

/// Alltoallv of device memory, ordered on CUDA stream `stream` as the device allreduce
/// (allreduce.hpp): returns once queued; later work on `stream` sees the result. Staged through
/// host memory in windows of the same columns of every block. Same sizes as the host overload;
/// the counts are host memory, copied.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void alltoallv(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, std::span<const std::size_t> send_counts, device_span<T> out,
               std::span<const std::size_t> recv_counts, cuda_stream stream) {
  (void)detail::check_alltoallv<X, T>(comm, std::span<const T>(in.data(), in.size()), send_counts, std::span<T>(out.data(), out.size()),
                                      recv_counts);
  (void)detail::alltoallv_device<Algo>(comm, in.data(), send_counts, out.data(), recv_counts, stream);
}

/// The device alltoallv with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request alltoallv_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, std::span<const std::size_t> send_counts,
                        device_span<T> out, std::span<const std::size_t> recv_counts, cuda_stream stream) {
  (void)detail::check_alltoallv<X, T>(comm, std::span<const T>(in.data(), in.size()), send_counts, std::span<T>(out.data(), out.size()),
                                      recv_counts);
  return detail::alltoallv_device<Algo>(comm, in.data(), send_counts, out.data(), recv_counts, stream);
}

}  // namespace gsync
