#pragma once
/// \file
/// `gsync::allgather`: every rank contributes a block of c elements; every rank receives the N
/// blocks, block r from rank r.
///
/// \code
///   std::vector<float> in(c), out(comm.size() * c);
///   gsync::allgather(comm, std::span<const float>{in}, std::span<float>{out});
///   // in place (as NCCL): the input is block r of the output buffer
///   gsync::allgather(comm, std::span<const float>{buf}.subspan(r * c, c), std::span<float>{buf});
/// \endcode
///
/// Call path: this file, then dispatch/host_allgather.hpp (arguments checked, the operation numbered); algo/select_collectives.hpp
/// chooses the algorithm; algo/ring.hpp runs the schedule over core/primitives.hpp. No scratch:
/// blocks go straight into place in the output.

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
#include "gsync/device_span.hpp"
#include "gsync/dispatch/host_allgather.hpp"
#include "gsync/dispatch/ipc_setup.hpp"

namespace gsync {


/// Allgather: out[b*c + i] = in[i] of rank b, with c = in.size() and out.size() = N*c on every
/// rank. In place when `in` is block r of the output (`in.data() == out.data() + r*c`); any other
/// overlap is rejected.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring`).
/// \tparam X transport of the communicator. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void allgather(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out) {
  detail::check_allgather<X, T>(comm, in, out);
  detail::allgather_impl<Algo, memory_space_of_t<decltype(out)>>(comm, in.data(), out.data(), in.size());
}

/// Asynchronous allgather: same arguments and checks (thrown here), queued on the progress
/// engine. `in` and `out` must stay alive and untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request allgather_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out) {
  detail::check_allgather<X, T>(comm, in, out);
  using space = memory_space_of_t<decltype(out)>;  // std::span: host memory
  return detail::launch_async(comm, "allgather", [i = in.data(), o = out.data(), c = in.size()](communicator<X>& x, op_ticket tk) {
    detail::allgather_run<Algo, space>(x, tk, i, o, c);
  });
}

namespace detail {
/// Launches an allgather of device buffers on `s`: the host schedule on mirrors of the input and
/// of the output (N blocks, windowed alike).
template <class Algo, class X, class T>
request allgather_device(communicator<X>& comm, const T* in, T* out, std::size_t c, cuda_stream s) {
  if constexpr (ipc_eligible<Algo, T, op::sum>) {
    if (auto st = ipc_state_of(comm); st && st->flat()) {
      cuda::ipc::group* g = st->group.get();
      ipc_log_shape(comm, device_shape<T>("allgather", c, ""), "");
      return ipc_launch(comm, std::move(st), "allgather", s, [&](std::chrono::milliseconds limit) {
        return cuda::ipc::allgather(*g, in, out, c, dtype_of<T>, s, limit);
      });
    }
  }
  const std::size_t n = static_cast<std::size_t>(comm.size());
  cuda::detail::staged_plan plan{staged(in, 1, c, true, false), staged(out, n, c, false, true), false};
  plan.cut(comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "allgather", s, plan, [&] {
    return [plan, tk = collective_tickets(comm, plan.windows)](communicator<X>& x, std::size_t w, std::byte* im, std::byte* om) {
      allgather_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(im), mirror_as<T>(om), plan.in.elems_of(w));
    };
  });
}
}  // namespace detail

/// Allgather of device memory, ordered on CUDA stream `stream` as the device allreduce (allreduce.hpp): returns once
/// queued; later work on `stream` sees the result. Over CUDA IPC between the GPUs of one machine, else staged through host memory
/// (dispatch/ipc_collective.hpp, cuda/staging.hpp).
/// Same sizes and in-place form as the host overload.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void allgather(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, cuda_stream stream) {
  detail::check_allgather<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  (void)detail::allgather_device<Algo>(comm, in.data(), out.data(), in.size(), stream);
}

/// The device allgather with a request that finishes once the result is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request allgather_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, cuda_stream stream) {
  detail::check_allgather<X, T>(comm, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  return detail::allgather_device<Algo>(comm, in.data(), out.data(), in.size(), stream);
}

}  // namespace gsync
