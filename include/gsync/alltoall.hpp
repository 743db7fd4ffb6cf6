#pragma once
/// \file
/// `gsync::alltoall`: every rank sends block j of its input to rank j and receives block j of its
/// output from rank j.
///
/// \code
///   std::vector<int> in(comm.size() * c), out(comm.size() * c);
///   gsync::alltoall(comm, std::span<const int>{in}, std::span<int>{out});
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; algo/select_collectives.hpp
/// chooses the algorithm; algo/pairwise.hpp runs the schedule over core/primitives.hpp. No
/// scratch. In place is not supported: input and output must not overlap.

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

template <class Algo, class Space = host_memory, class X, class T>
void run_alltoall(communicator<X>& comm, message_id id, const T* in, T* out, std::size_t c) {
  id.fp.algo = algo_code_of<Algo>();
  auto p = make_primitives<Space>(comm, id, in, out, c, op::sum{});
  static_assert(alltoall_algorithm<Algo, decltype(p)>, "this algorithm policy has no alltoall schedule");
  Algo::alltoall(p);
}

/// Runs alltoall ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T>
void alltoall_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::size_t c) {
  const message_id id{tag_alltoall, tk.seq, make_fingerprint<T>(c, 0, -1)};
  op_scope scope(comm, "alltoall", tk, id);
  if (c == 0) return;
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const auto ch = algo::choose_alltoall(c * sizeof(T), comm.size(), comm.segment_bytes(), comm.settings().algo_alltoall);
    log_choice(comm, "alltoall", dtype_of<T>, c, "", ch, [](auto i) { return algo::name(i); });
    algo::visit(ch.id, [&](auto a) {
      using A = decltype(a);
      if constexpr (alltoall_algorithm<A, primitives_t<Space, T, op::sum, X>>) run_alltoall<A, Space>(comm, id, in, out, c);
    });
  } else {
    run_alltoall<Algo, Space>(comm, id, in, out, c);
  }
}

/// Checks alltoall arguments (sizes, one block per rank, no overlap).
template <class X, class T>
void check_alltoall(const communicator<X>& comm, std::span<const T> in, std::span<T> out) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  check_extent("alltoall", "input", in.size(), sizeof(T));
  check_size("alltoall", "output", out.size(), in.size(), "as many elements as the input");
  if (in.size() % n != 0)
    invalid("alltoall", "input has " + std::to_string(in.size()) + " elements, not a multiple of the world size " +
                            std::to_string(n) + " (one block per rank)");
  if (overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("alltoall", "input and output overlap (in-place alltoall is not supported)");
}

/// Numbers an alltoall and runs it (inline, or behind pending asynchronous operations).
template <class Algo, class Space = host_memory, class X, class T>
void alltoall_impl(communicator<X>& comm, const T* in, T* out, std::size_t c) {
  launch(comm, "alltoall", [=](communicator<X>& x, op_ticket tk) { alltoall_run<Algo, Space>(x, tk, in, out, c); });
}

}  // namespace detail

/// Alltoall: out[j*c + i] on rank r = in[r*c + i] on rank j, with in.size() = out.size() = N*c
/// on every rank. Input and output must not overlap (no in-place form).
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::pairwise`).
/// \tparam X transport of the communicator. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void alltoall(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out) {
  detail::check_alltoall<X, T>(comm, in, out);
  detail::alltoall_impl<Algo, memory_space_of_t<decltype(out)>>(comm, in.data(), out.data(), in.size() / static_cast<std::size_t>(comm.size()));
}

/// Asynchronous alltoall: same arguments and checks (thrown here), queued on the progress
/// engine. `in` and `out` must stay alive and untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request alltoall_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out) {
  detail::check_alltoall<X, T>(comm, in, out);
  using space = memory_space_of_t<decltype(out)>;  // std::span: host memory
  return detail::launch_async(comm, "alltoall", [i = in.data(), o = out.data(), c = in.size() / static_cast<std::size_t>(comm.size())](
                                                    communicator<X>& x, op_ticket tk) { detail::alltoall_run<Algo, space>(x, tk, i, o, c); });
}

namespace detail {
/// Launches an alltoall of device buffers on `s`: the host schedule on mirrors of the input and
/// the output (N blocks each, windowed alike).
template <class Algo, class X, class T>
request alltoall_device(communicator<X>& comm, const T* in, T* out, std::size_t c, cuda_stream s) {
  if constexpr (ipc_eligible<Algo, T, op::sum>) {
    if (auto st = ipc_state_of(comm); st && st->flat()) {
      cuda::ipc::group* g = st->group.get();
      ipc_log_shape(comm, device_shape<T>("alltoall", c, ""), "");
      return ipc_launch(comm, std::move(st), "alltoall", s, [&](std::chrono::milliseconds limit) {
        return cuda::ipc::alltoall(*g, in, out, c, dtype_of<T>, s, limit);
      });
    }
  }
  const std::size_t n = static_cast<std::size_t>(comm.size());
  cuda::detail::staged_plan plan{staged(in, n, c, true, false), staged(out, n, c, false, true), false};
  plan.cut(comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "alltoall", s, plan, [&] {
    return [plan, tk = collective_tickets(comm, plan.windows)](communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      alltoall_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), plan.in.elems_of(w));
    };
  });
}
}  // namespace detail

/// Alltoall of device memory, ordered on CUDA stream `stream` as the device allreduce (allreduce.hpp): returns once
/// queued; later work on `stream` sees the result. Over CUDA IPC between the GPUs of one machine, else staged through host memory
/// (dispatch/ipc_collective.hpp, cuda/staging.hpp).
/// Same sizes as the host overload; the buffers must not overlap.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void alltoall(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, cuda_stream stream) {
  detail::check_alltoall<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  (void)detail::alltoall_device<Algo>(comm, in.data(), out.data(), out.size() / static_cast<std::size_t>(comm.size()), stream);
}

/// The device alltoall with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request alltoall_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, cuda_stream stream) {
  detail::check_alltoall<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  return detail::alltoall_device<Algo>(comm, in.data(), out.data(), out.size() / static_cast<std::size_t>(comm.size()), stream);
}

}  // namespace gsync
