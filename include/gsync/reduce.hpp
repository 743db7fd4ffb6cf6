#pragma once
/// \file
/// `gsync::reduce`: every rank contributes a buffer; the root receives the element-wise reduction
/// over all ranks. (core/reduce.hpp, a different file, holds the element loops.)
///
/// \code
///   gsync::reduce(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::sum{}, /*root=*/0);
///   gsync::reduce(comm, std::span<const float>{buf}, std::span<float>{buf}, gsync::op::max{}, 0);  // in place
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; algo/select_collectives.hpp
/// chooses the algorithm (binomial tree for small buffers, pipelined chain for large ones);
/// algo/binomial_tree.hpp or algo/ring.hpp runs the schedule over core/primitives.hpp. Memory:
/// the input is only read; non-root ranks keep partials in the communicator's fixed scratch.

#include <cstdint>
#include <span>
#include <type_traits>

#include "gsync/algo/select_collectives.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/dispatch/ipc_collective.hpp"
#include "gsync/dispatch/ipc_setup.hpp"
#include "gsync/device_span.hpp"

namespace gsync {

namespace detail {

template <class Algo, class Space = host_memory, class X, class T, class Op>
void run_reduce(communicator<X>& comm, message_id id, const T* in, T* out, std::size_t count, const Op& op, int root) {
  id.fp.algo = algo_code_of<Algo>();
  auto p = make_primitives<Space>(comm, id, in, out, count, op);
  static_assert(rooted_reduce_algorithm<Algo, decltype(p)>, "this algorithm policy has no reduce schedule");
  Algo::reduce(p, root);
}

/// Runs reduce ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T, class Op>
void reduce_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::size_t count, const Op& op, int root) {
  const message_id id{tag_reduce, tk.seq, make_fingerprint<T>(count, op_code_of<Op>(), root)};
  op_scope scope(comm, "reduce", tk, id);
  if (count == 0) return;
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const auto ch = algo::choose_reduce(count * sizeof(T), comm.size(), comm.segment_bytes(), comm.settings().algo_reduce,
                                          &comm.placement());
    log_choice(comm, "reduce", dtype_of<T>, count, op_name<Op>(), ch, [](auto i) { return algo::name(i); });
    algo::visit(ch.id, [&](auto a) {
      using A = decltype(a);
      if constexpr (rooted_reduce_algorithm<A, primitives_t<Space, T, Op, X>>) run_reduce<A, Space>(comm, id, in, out, count, op, root);
    });
  } else {
    run_reduce<Algo, Space>(comm, id, in, out, count, op, root);
  }
}

/// Checks reduce arguments (root; on the root, the output size and overlap).
template <class X, class T>
void check_reduce(const communicator<X>& comm, std::span<const T> in, std::span<T> out, int root) {
  check_rank("reduce", "root", root, comm.size());
  check_extent("reduce", "input", in.size(), sizeof(T));
  if (comm.rank() == root) {
    check_size("reduce", "output", out.size(), in.size(), "on the root, the output has as many elements as the input");
    if (static_cast<const void*>(in.data()) != static_cast<const void*>(out.data()) &&
        overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
      invalid("reduce", "input and output overlap partially (use the same buffer for in place)");
  }
}

/// Numbers a reduce and runs it (inline, or behind pending asynchronous operations).
template <class Algo, class Space = host_memory, class X, class T, class Op>
void reduce_impl(communicator<X>& comm, const T* in, T* out, std::size_t count, const Op& op, int root) {
  launch(comm, "reduce", [=](communicator<X>& x, op_ticket tk) { reduce_run<Algo, Space>(x, tk, in, out, count, op, root); });
}

}  // namespace detail

/// Reduce to `root`: on the root, out[i] = op over ranks of in[i]. `in` has the same size on every
/// rank; `out` is used on the root only (there it has in.size() elements and may be the same
/// buffer as `in`, but must not partially overlap it); elsewhere it is never written and may be
/// empty. 0 <= root < N.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring` (pipelined chain),
/// `algo::binomial_tree`). \tparam X transport of the communicator. \tparam T element type.
/// \tparam Op reduction operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void reduce(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op = {}, int root = 0) {
  detail::check_reduce<X, T>(comm, in, out, root);
  detail::reduce_impl<Algo, memory_space_of_t<decltype(out)>>(comm, in.data(), out.data(), in.size(), op, root);
}

/// Asynchronous reduce: same arguments and checks (thrown here), queued on the progress engine.
/// `in` and `out` must stay alive and untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request reduce_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op = {},
                     int root = 0) {
  detail::check_reduce<X, T>(comm, in, out, root);
  using space = memory_space_of_t<decltype(out)>;  // std::span: host memory
  return detail::launch_async(comm, "reduce", [op, root, i = in.data(), o = out.data(), n = in.size()](communicator<X>& x, op_ticket tk) {
    detail::reduce_run<Algo, space>(x, tk, i, o, n, op, root);
  });
}

namespace detail {
inline namespace GSYNC_TU_NS {  // may use a user operator's GPU kernel (detail/hd.hpp)
/// Launches a reduce of device buffers on `s`: every rank copies its input in; the root copies the
/// result out. The host schedule runs on mirrors of both.
template <class Algo, class X, class T, class Op>
request reduce_device(communicator<X>& comm, const T* in, T* out, std::size_t count, const Op& op, int root, cuda_stream s) {
  if constexpr (ipc_eligible<Algo, T, Op>) {
    if (auto st = ipc_state_of(comm); st && st->flat()) {
      cuda::ipc::group* g = st->group.get();
      ipc_log_shape(comm, device_shape<T>("reduce", count, op_name<Op>()), "");
      return ipc_launch(comm, std::move(st), "reduce", s, [&](std::chrono::milliseconds limit) {
        cuda::ipc_reduction::builtin_args b;
        return cuda::ipc::reduce(*g, ipc_reduction_of<T>(op, b), in, out, count, dtype_of<T>, root, s, limit);
      });
    }
  }
  const bool is_root = comm.rank() == root;
  cuda::detail::staged_plan plan{staged(in, 1, count, true, false), staged(out, 1, count, false, is_root), false};
  plan.cut(comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "reduce", s, plan, [&] {
    return [op, plan, root, tk = collective_tickets(comm, plan.windows)](communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      reduce_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), plan.in.elems_of(w), op, root);
    };
  });
}
}  // namespace GSYNC_TU_NS
}  // namespace detail

inline namespace GSYNC_TU_NS {  // the device overloads (detail/hd.hpp)

/// Reduce of device memory to `root`, ordered on CUDA stream `stream` as the device allreduce (allreduce.hpp): returns once
/// queued; later work on `stream` sees the result. Over CUDA IPC between the GPUs of one machine, else staged through host memory
/// (dispatch/ipc_collective.hpp, cuda/staging.hpp).
/// Same sizes as the host overload (`out` is read only on the root).
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void reduce(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, Op op, int root,
            cuda_stream stream) {
  detail::check_reduce<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), root);
  (void)detail::reduce_device<Algo>(comm, in.data(), out.data(), in.size(), op, root, stream);
}

/// The device reduce with a request that finishes once the root's result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request reduce_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, Op op, int root,
                     cuda_stream stream) {
  detail::check_reduce<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), root);
  return detail::reduce_device<Algo>(comm, in.data(), out.data(), in.size(), op, root, stream);
}

}  // namespace GSYNC_TU_NS

}  // namespace gsync
