#pragma once
/// \file
/// `gsync::allreduce`: every rank contributes a buffer; every rank receives the element-wise
/// reduction over all ranks.
///
/// \code
///   auto comm = gsync::tcp_communicator::from_env();
///   gsync::allreduce(comm, std::span<float>{grad}, gsync::op::avg{});                 // in place
///   gsync::allreduce(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::sum{});
///   gsync::allreduce<gsync::algo::ring>(comm, std::span<double>{w}, gsync::op::max{});
/// \endcode
///
/// `gsync::allreduce_async` (same arguments) queues the operation on the communicator's progress
/// engine and returns a `gsync::request` (see async.hpp); the synchronous call is the same
/// operation run inline (or queued and waited for when asynchronous work is pending).
///
/// The call path, top to bottom: this file checks arguments and numbers the operation;
/// algo/select.hpp turns runtime facts into an algorithm type; the algorithm (algo/ring.hpp) runs
/// its schedule over primitives (core/primitives.hpp), which move bytes through the transport
/// (transport/tcp.hpp, whose endpoint is transport/mesh/; transport/inproc.hpp).
///
/// Memory: no allocation proportional to the message. Out of place, the input is only read. The
/// only scratch is fixed per communicator: the TCP transport's 256 KiB staging buffer and the
/// communicator's 256 KiB scratch buffer (used by recursive doubling).

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "gsync/algo/select.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/primitives.hpp"
#include "gsync/core/request.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/dispatch/ipc_allreduce.hpp"
#include "gsync/dispatch/ipc_collective.hpp"
#include "gsync/dispatch/ipc_hierarchical.hpp"
#include "gsync/dispatch/ipc_setup.hpp"
#include "gsync/device_span.hpp"

namespace gsync {

namespace detail {

template <class Algo, class Space = host_memory, class X, class T, class Op>
void run_allreduce(communicator<X>& comm, message_id id, const T* in, T* out, std::size_t count, const Op& op) {
  if constexpr (!algo::device_allreduce_algorithm<Algo>) {  // those are refused before (check_host_algorithm)
    id.fp.algo = algo_code_of<Algo>();
    auto p = make_primitives<Space>(comm, id, in, out, count, op);
    Algo::allreduce(p);
  }
}

/// Refuses a device algorithm (algo/cuda_ipc.hpp) for an allreduce of host memory.
template <class Algo>
void check_host_algorithm() {
  if constexpr (algo::device_allreduce_algorithm<Algo>)
    throw error(errc::invalid_argument, "allreduce<algo::" + std::string(Algo::name) +
                                            ">: runs on device buffers over CUDA IPC (device_span); host memory runs " +
                                            algo::allreduce_names());
}

/// Runs allreduce ticket `tk` (numbered at issue by comm.next_op()) on `comm`.
template <class Algo, class Space = host_memory, class X, class T, class Op>
void allreduce_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::size_t count, const Op& op) {
  const message_id id{tag_allreduce, tk.seq, make_fingerprint<T>(count, op_code_of<Op>(), -1)};
  op_scope scope(comm, "allreduce", tk, id);
  if (count == 0) return;
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const std::size_t bytes = count * sizeof(T);
    const bool logging = comm.log().enabled(log_level::info);
    if (!logging)  // the same sizes come back every step: reuse the choice (core/choice_memo.hpp)
      if (const auto code = comm.allreduce_choices().find(bytes, comm.segment_bytes()))
        return algo::visit(algo::allreduce_id{*code}, [&](auto a) { run_allreduce<decltype(a), Space>(comm, id, in, out, count, op); });
    const auto ch = algo::choose_allreduce(bytes, comm.size(), local_costs_of(comm.transport()), comm.settings().algo,
                                             &comm.placement(), nullptr, comm.segment_bytes());
    comm.allreduce_choices().put(bytes, comm.segment_bytes(), ch.id.index);
    if (logging) {
      std::string shape = "allreduce(" + std::string(name(dtype_of<T>)) + ", " + std::to_string(count) + ", " +
                          std::string(op_name<Op>()) + ")";
      if (comm.first_time(shape)) {
        shape += " -> " + std::string(algo::name(ch.id)) + ": " + ch.reason();
        comm.log().info(shape);
      }
    }
    algo::visit(ch.id, [&](auto a) { run_allreduce<decltype(a), Space>(comm, id, in, out, count, op); });
  } else {
    run_allreduce<Algo, Space>(comm, id, in, out, count, op);
  }
}

/// Numbers an allreduce and runs it: inline, or queued behind pending asynchronous operations.
template <class Algo, class Space = host_memory, class X, class T, class Op>
void allreduce_impl(communicator<X>& comm, const T* in, T* out, std::size_t count, const Op& op) {
  check_host_algorithm<Algo>();
  launch(comm, "allreduce", [=](communicator<X>& c, op_ticket tk) { allreduce_run<Algo, Space>(c, tk, in, out, count, op); });
}

/// Numbers an allreduce and queues it on the progress engine.
template <class Algo, class Space = host_memory, class X, class T, class Op>
request allreduce_issue(communicator<X>& comm, const T* in, T* out, std::size_t count, const Op& op) {
  check_host_algorithm<Algo>();
  return launch_async(comm, "allreduce", [=](communicator<X>& c, op_ticket tk) { allreduce_run<Algo, Space>(c, tk, in, out, count, op); });
}

/// Checks out-of-place allreduce arguments: equal sizes, same buffer or no overlap.
template <class T>
void check_allreduce(std::span<const T> in, std::span<T> out) {
  check_extent("allreduce", "input", in.size(), sizeof(T));
  if (in.size() != out.size())
    throw error(errc::invalid_argument, "allreduce: input has " + std::to_string(in.size()) + " elements but output has " +
                                            std::to_string(out.size()));
  if (static_cast<const void*>(in.data()) != static_cast<const void*>(out.data()) &&
      overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    throw error(errc::invalid_argument, "allreduce: input and output overlap partially (use the same buffer for in place)");
}

inline namespace GSYNC_TU_NS {  // may use a user operator's GPU kernel (detail/hd.hpp)

/// Launches an allreduce of device buffers on stream `s` (in == out: in place): over CUDA IPC
/// (dispatch/ipc_allreduce.hpp says which algorithm), or the host schedule in place on one pinned
/// mirror, filled from `in` and copied back to `out`.
template <class Algo, class X, class T, class Op>
request allreduce_device(communicator<X>& comm, const T* in, T* out, std::size_t count, const Op& op, cuda_stream s) {
  if constexpr (algo::device_allreduce_algorithm<Algo>) {
    return forced_ipc_allreduce<Algo>(comm, in, out, count, op, s, "allreduce<algo::" + std::string(Algo::name) + ">");
  } else {
    if constexpr (std::is_same_v<Algo, algo::automatic>) {
      const std::string& forced = comm.settings().algo;
      if (const auto d = algo::parse_device_allreduce(forced))
        return algo::device_allreduce_registry::visit(
            *d, [&](auto a) { return forced_ipc_allreduce<decltype(a)>(comm, in, out, count, op, s, "GSYNC_ALGO=" + forced); });
      if (forced.empty() || forced == "auto" || forced == "automatic") {
        if constexpr (ipc_eligible<Algo, T, Op>) {
          auto st = ipc_state_of(comm);
          if (st && st->group) return automatic_ipc_allreduce(comm, std::move(st), in, out, count, op, s);
          if (st) log_staged_allreduce<T>(comm, count, op_name<Op>(), st->refusal);
        } else {
          log_staged_allreduce<T>(comm, count, op_name<Op>(), ipc_kernel_gap<T, Op>());
        }
      } else {
        (void)algo::parse_allreduce(forced, "GSYNC_ALGO");  // an unknown name fails here, at the call
        if (comm.first_time("GSYNC_ALGO on device buffers"))
          comm.log().warn("GSYNC_ALGO=" + forced + " is a host algorithm: device allreduces run it through host staging, not CUDA IPC "
                          "(GSYNC_ALGO=one_shot, two_shot or hierarchical_ipc force a device one)");
        log_staged_allreduce<T>(comm, count, op_name<Op>(), "GSYNC_ALGO=" + forced + " names a host algorithm");
      }
    } else {
      log_staged_allreduce<T>(comm, count, op_name<Op>(), "allreduce<algo::" + std::string(Algo::name) + "> is a host algorithm");
    }
    cuda::detail::staged_plan plan{staged(in, 1, count, true, false), staged(out, 1, count, false, true), true};
    plan.cut(comm.settings().cuda_staging_bytes);
    return staged_launch(comm, "allreduce", s, plan, [&] {
      return [op, plan, tk = collective_tickets(comm, plan.windows)](communicator<X>& c, std::size_t w, std::byte* m, std::byte*) {
        allreduce_run<Algo, staged_memory>(c, tk[w], mirror_as<T>(m), mirror_as<T>(m), plan.in.elems_of(w), op);
      };
    });
  }
}

}  // namespace GSYNC_TU_NS
}  // namespace detail

/// Out-of-place allreduce: out[i] = op over ranks of in[i]. `in` and `out` have the same size on
/// every rank; they may be the same buffer but must not partially overlap.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring`).
/// \tparam X transport of the communicator. \tparam T element type. \tparam Op reduction operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void allreduce(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op = {}) {
  detail::check_allreduce<T>(in, out);
  detail::allreduce_impl<Algo, memory_space_of_t<decltype(out)>>(comm, in.data(), out.data(), out.size(), op);
}

/// In-place allreduce: data[i] = op over ranks of data[i].
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void allreduce(communicator<X>& comm, std::span<T> data, Op op = {}) {
  detail::check_extent("allreduce", "data", data.size(), sizeof(T));
  detail::allreduce_impl<Algo, memory_space_of_t<decltype(data)>>(comm, data.data(), data.data(), data.size(), op);
}

/// Asynchronous out-of-place allreduce: checks the arguments now (invalid_argument is thrown
/// here, nothing queued), numbers the operation and queues it on the communicator's progress
/// engine. `in` and `out` must stay alive and unchanged until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request allreduce_async(communicator<X>& comm, std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op = {}) {
  detail::check_allreduce<T>(in, out);
  return detail::allreduce_issue<Algo, memory_space_of_t<decltype(out)>>(comm, in.data(), out.data(), out.size(), op);
}

/// Asynchronous in-place allreduce (see the out-of-place overload); `data` must stay alive and
/// untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request allreduce_async(communicator<X>& comm, std::span<T> data, Op op = {}) {
  detail::check_extent("allreduce", "data", data.size(), sizeof(T));
  return detail::allreduce_issue<Algo, memory_space_of_t<decltype(data)>>(comm, data.data(), data.data(), data.size(), op);
}

inline namespace GSYNC_TU_NS {  // the device overloads (detail/hd.hpp)

/// In-place allreduce of device memory, ordered on CUDA stream `stream` (NCCL's contract): returns
/// once the work is queued; later work on `stream` sees data[i] = op over ranks of data[i]. The
/// buffer must not change until then. An error after the call breaks the communicator and is
/// thrown by its next call (dispatch/ipc_collective.hpp and cuda/staging.hpp say how the data moves).
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator
/// (its calls usable in device code: see GSYNC_HD, detail/hd.hpp).
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void allreduce(communicator<X>& comm, device_span<T> data, Op op, cuda_stream stream) {
  detail::check_extent("allreduce", "data", data.size(), sizeof(T));
  (void)detail::allreduce_device<Algo>(comm, data.data(), data.data(), data.size(), op, stream);
}

/// Out-of-place allreduce of device memory on `stream`: out[i] = op over ranks of in[i]; `in` and
/// `out` have the same size and are the same buffer or do not overlap.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
void allreduce(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, Op op, cuda_stream stream) {
  detail::check_allreduce<T>(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  (void)detail::allreduce_device<Algo>(comm, in.data(), out.data(), out.size(), op, stream);
}

/// The in-place device allreduce, with a request that finishes once the results are in device
/// memory (and fails with the operation's error). The work is ordered on `stream` as well.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request allreduce_async(communicator<X>& comm, device_span<T> data, Op op, cuda_stream stream) {
  detail::check_extent("allreduce", "data", data.size(), sizeof(T));
  return detail::allreduce_device<Algo>(comm, data.data(), data.data(), data.size(), op, stream);
}

/// The out-of-place device allreduce with a request (see the in-place form).
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type. \tparam Op operator.
template <algorithm Algo = algo::automatic, transport_policy X, element T, class Op = op::sum>
  requires reduction_op<Op, T>
request allreduce_async(communicator<X>& comm, device_span<const std::type_identity_t<T>> in, device_span<T> out, Op op,
                        cuda_stream stream) {
  detail::check_allreduce<T>(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  return detail::allreduce_device<Algo>(comm, in.data(), out.data(), out.size(), op, stream);
}

}  // namespace GSYNC_TU_NS
}  // namespace gsync

#if defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/detail/compiled_instances.hpp"
// Compiled once in the library (gsync/impl/src.hpp): see detail/compiled_instances.hpp.
#define GSYNC_EXTERN_ALLREDUCE_RUN(T, Op) extern template GSYNC_ALLREDUCE_RUN_SIGNATURE(T, Op);
GSYNC_COMPILED_ALLREDUCE(GSYNC_EXTERN_ALLREDUCE_RUN)
#undef GSYNC_EXTERN_ALLREDUCE_RUN
#endif
