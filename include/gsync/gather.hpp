#pragma once
/// \file
/// `gsync::gather`: every rank contributes a block of c elements; the root receives the N blocks,
/// block r from rank r (MPI_Gather with equal counts; torch.distributed.gather).
///
/// \code
///   std::vector<float> in(c), out(comm.rank() == root ? comm.size() * c : 0);
///   gsync::gather(comm, std::span<const float>{in}, std::span<float>{out}, root);
///   // in place on the root: its input is block root of its output
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; dispatch/chosen.hpp picks the
/// algorithm (GSYNC_ALGO_GATHER); algo/direct.hpp runs the linear schedule over
/// core/primitives.hpp. Blocks land straight in the root's output; no scratch.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

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

/// Runs gather ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T>
void gather_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::size_t c, int root) {
  using P = primitives_t<Space, T, op::sum, X>;
  static_assert(std::is_same_v<Algo, algo::automatic> || gather_algorithm<Algo, P>, "this algorithm policy has no gather schedule");
  const message_id id{tag_gather, tk.seq, make_fingerprint<T>(c, 0, root)};
  op_scope scope(comm, "gather", tk, id);
  if (c == 0) return;
  run_chosen<Algo>(comm, "gather", comm.settings().algo_gather, algo::collective_id_of<algo::direct>, c * sizeof(T), dtype_of<T>, c, "",
                   [&](auto a) {
                     using A = decltype(a);
                     if constexpr (gather_algorithm<A, P>) {
                       message_id i = id;
                       i.fp.algo = algo_code_of<A>();
                       auto p = make_primitives<Space>(comm, i, in, out, c, op::sum{});
                       A::gather(p, root);
                     }
                   });
}

/// Checks gather arguments: the root, the root's output (N x input), the only in-place form.
template <class X, class T>
void check_gather(const communicator<X>& comm, std::span<const T> in, std::span<T> out, int root) {
  const std::size_t n = static_cast<std::size_t>(comm.size()), c = in.size();
  check_rank("gather", "root", root, comm.size());
  check_extent("gather", "input", in.size(), sizeof(T));
  if (comm.rank() != root) return;  // the output is the root's only
  check_blocks("gather", "output", out.size(), n, c, "on the root: world size x input elements");
  const bool in_place = static_cast<const void*>(in.data()) == static_cast<const void*>(out.data() + static_cast<std::size_t>(root) * c);
  if (!in_place && overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("gather", "input and output overlap, but the input is not block " + std::to_string(root) +
                          " of the root's output (the only in-place form)");
}

}  // namespace detail

/// Gather to `root`: on the root, out[b*c + i] = in[i] of rank b, with c = in.size() on every
/// rank and out.size() = N*c; other ranks' `out` is not used (may be empty). In place on the root
/// when `in` is block root of its output; any other overlap is rejected.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::direct`).
/// \tparam X transport of the communicator. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void gather(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, int root) {
  detail::check_gather<X, T>(comm, in, out, root);
  using space = memory_space_of_t<decltype(out)>;
  detail::launch(comm, "gather", [i = in.data(), o = out.data(), c = in.size(), root](communicator<X>& x, op_ticket tk) {
    detail::gather_run<Algo, space>(x, tk, i, o, c, root);
  });
}

/// Asynchronous gather: same arguments and checks (thrown here), queued on the progress engine.
/// `in` and `out` must stay alive and untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request gather_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, int root) {
  detail::check_gather<X, T>(comm, in, out, root);
  using space = memory_space_of_t<decltype(out)>;
  return detail::launch_async(comm, "gather", [i = in.data(), o = out.data(), c = in.size(), root](communicator<X>& x, op_ticket tk) {
    detail::gather_run<Algo, space>(x, tk, i, o, c, root);
  });
}

namespace detail {
/// Launches a gather of device buffers on `s`: the host schedule on mirrors (host staging).
template <class Algo, class X, class T>
request gather_device(communicator<X>& comm, const T* in, T* out, std::size_t c, int root, cuda_stream s) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  const bool is_root = comm.rank() == root;
  auto plan = rooted_plan<T>(staged(in, 1, c, true, false), staged(out, is_root ? n : 0, c, false, true), n, c,
                             comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "gather", s, plan, [&] {
    return [plan, root, tk = collective_tickets(comm, plan.windows)](communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      gather_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), plan.in.elems_of(w), root);
    };
  });
}
}  // namespace detail

/// Gather of device memory, ordered on CUDA stream `stream` as the device allreduce
/// (allreduce.hpp): returns once queued; later work on `stream` sees the result. Staged through
/// host memory (cuda/staging.hpp). Same sizes and in-place form as the host overload.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void gather(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, int root, cuda_stream stream) {
  detail::check_gather<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), root);
  (void)detail::gather_device<Algo>(comm, in.data(), out.data(), in.size(), root, stream);
}

/// The device gather with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request gather_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, int root,
                     cuda_stream stream) {
  detail::check_gather<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), root);
  return detail::gather_device<Algo>(comm, in.data(), out.data(), in.size(), root, stream);
}

}  // namespace gsync
