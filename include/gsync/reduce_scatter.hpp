#pragma once
/// \file
/// `gsync::reduce_scatter`: every rank contributes N blocks of c elements; rank r receives block r
/// reduced element-wise over all ranks.
///
/// \code
///   std::vector<float> in(comm.size() * c), out(c);
///   gsync::reduce_scatter(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::sum{});
///   // in place (as NCCL): the output is block r of the input buffer
///   gsync::reduce_scatter(comm, std::span<const float>{buf}, std::span<float>{buf}.subspan(r * c, c));
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; algo/select_collectives.hpp
/// chooses the algorithm; algo/ring.hpp runs the schedule over core/primitives.hpp. Memory: the
/// input is only read (in place, only block r is written); partials travel through the
/// communicator's fixed scratch, nothing is allocated per call.

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

static_assert(algo::latency_bound_bytes == communicator<transport::inproc>::scratch_bytes,
              "the automatic choice of reduce_scatter's dissemination schedule assumes the communicator's scratch size");

namespace detail {

template <class Algo, class Space = host_memory, class X, class T, class Op>
void run_reduce_scatter(communicator<X>& comm, message_id id, const T* in, T* out, std::size_t c, const Op& op) {
  id.fp.algo = algo_code_of<Algo>();
  auto p = make_primitives<Space>(comm, id, in, out, c, op);
  static_assert(reduce_scatter_algorithm<Algo, decltype(p)>, "this algorithm policy has no reduce_scatter schedule");
  Algo::reduce_scatter(p);
}

/// Runs reduce_scatter ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T, class Op>
void reduce_scatter_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::size_t c, const Op& op) {
  const message_id id{tag_reduce_scatter, tk.seq, make_fingerprint<T>(c, op_code_of<Op>(), -1)};
  op_scope scope(comm, "reduce_scatter", tk, id);
  if (c == 0) return;
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const auto ch = algo::choose_reduce_scatter(c * sizeof(T), comm.size(), comm.segment_bytes(),
                                                comm.settings().algo_reduce_scatter);
    log_choice(comm, "reduce_scatter", dtype_of<T>, c, op_name<Op>(), ch, [](auto i) { return algo::name(i); });
    algo::visit(ch.id, [&](auto a) {
      using A = decltype(a);
      if constexpr (reduce_scatter_algorithm<A, primitives_t<Space, T, Op, X>>) run_reduce_scatter<A, Space>(comm, id, in, out, c, op);
    });
  } else {
    run_reduce_scatter<Algo, Space>(comm, id, in, out, c, op);
  }
}

/// Checks reduce_scatter arguments (sizes, the only in-place form).
template <class X, class T>
void check_reduce_scatter(const communicator<X>& comm, std::span<const T> in, std::span<T> out) {
  const std::size_t n = static_cast<std::size_t>(comm.size()), c = out.size();
  check_extent("reduce_scatter", "input", in.size(), sizeof(T));
  check_blocks("reduce_scatter", "input", in.size(), n, c, "world size x output elements");
  const bool in_place = static_cast<const void*>(out.data()) == static_cast<const void*>(in.data() + comm.rank() * c);
  if (!in_place && overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("reduce_scatter", "input and output overlap, but the output is not block " + std::to_string(comm.rank()) +
                                  " of the input (the only in-place form)");
}

/// Numbers a reduce_scatter and runs it (inline, or behind pending asynchronous operations).
template <class Algo, class Space = host_memory, class X, class T, class Op>
void reduce_scatter_impl(communicator<X>& comm, const T* in, T* out, std::size_t c, const Op& op) {
  launch(comm, "reduce_scatter", [=](communicator<X>& x, op_ticket tk) { reduce_scatter_run<Algo, Space>(x, tk, in, out, c, op); });
}

}  // namespace detail

/// Reduce-scatter: out[i] = op over ranks of in[r*c + i] on rank r, with c = out.size() and
/// in.size() = N*c on every rank. In place when `out` is block r of the input
/// (`out.data() == in.data() + r*c`); any other overlap is rejected.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring`).
/// \tparam X transport of the communicator. \tparam T element type. \tparam Op reduction operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void reduce_scatter(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op = {}) {
  detail::check_reduce_scatter<X, T>(comm, in, out);
  detail::reduce_scatter_impl<Algo, memory_space_of_t<decltype(out)>>(comm, in.data(), out.data(), out.size(), op);
}

/// Asynchronous reduce_scatter: same arguments and checks (thrown here), queued on the progress
/// engine. `in` and `out` must stay alive and untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request reduce_scatter_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op = {}) {
  detail::check_reduce_scatter<X, T>(comm, in, out);
  using space = memory_space_of_t<decltype(out)>;  // std::span: host memory
  return detail::launch_async(comm, "reduce_scatter", [op, i = in.data(), o = out.data(), c = out.size()](communicator<X>& x, op_ticket tk) {
    detail::reduce_scatter_run<Algo, space>(x, tk, i, o, c, op);
  });
}

namespace detail {
inline namespace GSYNC_TU_NS {  // may use a user operator's GPU kernel (detail/hd.hpp)
/// Launches a reduce_scatter of device buffers on `s`: the host schedule on mirrors of the input
/// (N blocks, windowed alike) and of the output.
template <class Algo, class X, class T, class Op>
request reduce_scatter_device(communicator<X>& comm, const T* in, T* out, std::size_t c, const Op& op, cuda_stream s) {
  if constexpr (ipc_eligible<Algo, T, Op>) {
    if (auto st = ipc_state_of(comm); st && st->flat()) {
      cuda::ipc::group* g = st->group.get();
      ipc_log_shape(comm, device_shape<T>("reduce_scatter", c, op_name<Op>()), "");
      return ipc_launch(comm, std::move(st), "reduce_scatter", s, [&](std::chrono::milliseconds limit) {
        cuda::ipc_reduction::builtin_args b;
        return cuda::ipc::reduce_scatter(*g, ipc_reduction_of<T>(op, b), in, out, c, dtype_of<T>, s, limit);
      });
    }
  }
  const std::size_t n = static_cast<std::size_t>(comm.size());
  cuda::detail::staged_plan plan{staged(in, n, c, true, false), staged(out, 1, c, false, true), false};
  plan.cut(comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "reduce_scatter", s, plan, [&] {
    return [op, plan, tk = collective_tickets(comm, plan.windows)](communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      reduce_scatter_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), plan.out.elems_of(w), op);
    };
  });
}
}  // namespace GSYNC_TU_NS
}  // namespace detail

inline namespace GSYNC_TU_NS {  // the device overloads (detail/hd.hpp)

/// Reduce-scatter of device memory, ordered on CUDA stream `stream` as the device allreduce (allreduce.hpp): returns once
/// queued; later work on `stream` sees the result. Over CUDA IPC between the GPUs of one machine, else staged through host memory
/// (dispatch/ipc_collective.hpp, cuda/staging.hpp).
/// Same sizes and in-place form as the host overload.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void reduce_scatter(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, Op op, cuda_stream stream) {
  detail::check_reduce_scatter<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  (void)detail::reduce_scatter_device<Algo>(comm, in.data(), out.data(), out.size(), op, stream);
}

/// The device reduce_scatter with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request reduce_scatter_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, Op op,
                             cuda_stream stream) {
  detail::check_reduce_scatter<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  return detail::reduce_scatter_device<Algo>(comm, in.data(), out.data(), out.size(), op, stream);
}

}  // namespace GSYNC_TU_NS

}  // namespace gsync
