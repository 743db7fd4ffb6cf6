#pragma once
/// \file
/// `gsync::broadcast`: the root's buffer is copied into every rank's buffer.
///
/// \code
///   gsync::broadcast(comm, std::span<float>{weights}, /*root=*/0);
///   gsync::broadcast<gsync::algo::binomial_tree>(comm, std::span<int>{flags}, 2);
/// \endcode
///
/// Call path: this file checks arguments and numbers the operation; algo/select_collectives.hpp
/// chooses the algorithm (binomial tree for small buffers, pipelined chain for large ones);
/// algo/binomial_tree.hpp or algo/ring.hpp runs the schedule over core/primitives.hpp. No scratch:
/// data is received straight into the buffer and forwarded from there.

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
void run_broadcast(communicator<X>& comm, message_id id, T* data, std::size_t count, int root) {
  id.fp.algo = algo_code_of<Algo>();
  auto p = make_primitives<Space>(comm, id, data, data, count, op::sum{});
  static_assert(broadcast_algorithm<Algo, decltype(p)>, "this algorithm policy has no broadcast schedule");
  Algo::broadcast(p, root);
  // A root receives nothing in a broadcast, so a rank that wrongly takes itself for the root would
  // return with its own data, unnoticed. The rank last in the schedule's order (the chain's tail;
  // in the tree, one of the last to receive) sends its root an empty frame of this operation: a
  // wrong root waits for it from a rank that sent it the true root's data instead, and fails with
  // a mismatch naming both calls, which the others then hear of. It costs the root one message time.
  if (const int n = comm.size(); n > 1) {
    const int last = (root + n - 1) % n;
    if (comm.rank() == last) {
      p.send(root, p.out(range{0, 0}));
      p.finish();
    } else if (comm.rank() == root) {
      p.recv(last, p.out(range{0, 0}));
    }
  }
}

/// Runs broadcast ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T>
void broadcast_run(communicator<X>& comm, op_ticket tk, T* data, std::size_t count, int root) {
  const message_id id{tag_broadcast, tk.seq, make_fingerprint<T>(count, 0, root)};
  op_scope scope(comm, "broadcast", tk, id);
  if (count == 0) return;
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const auto ch = algo::choose_broadcast(count * sizeof(T), comm.size(), comm.segment_bytes(), comm.settings().algo_broadcast,
                                             &comm.placement());
    log_choice(comm, "broadcast", dtype_of<T>, count, "", ch, [](auto i) { return algo::name(i); });
    algo::visit(ch.id, [&](auto a) {
      using A = decltype(a);
      if constexpr (broadcast_algorithm<A, primitives_t<Space, T, op::sum, X>>) run_broadcast<A, Space>(comm, id, data, count, root);
    });
  } else {
    run_broadcast<Algo, Space>(comm, id, data, count, root);
  }
}

/// Numbers a broadcast and runs it (inline, or behind pending asynchronous operations).
template <class Algo, class Space = host_memory, class X, class T>
void broadcast_impl(communicator<X>& comm, T* data, std::size_t count, int root) {
  launch(comm, "broadcast", [=](communicator<X>& x, op_ticket tk) { broadcast_run<Algo, Space>(x, tk, data, count, root); });
}

}  // namespace detail

/// Broadcast: on return every rank's `data` equals the root's. `data` has the same size on every
/// rank; 0 <= root < N.
/// \tparam Algo algorithm policy (`algo::automatic`, `algo::ring` (pipelined chain),
/// `algo::binomial_tree`). \tparam X transport of the communicator. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void broadcast(communicator<X>& comm, std::span<T> data, int root) {
  detail::check_rank("broadcast", "root", root, comm.size());
  detail::check_extent("broadcast", "data", data.size(), sizeof(T));
  detail::broadcast_impl<Algo, memory_space_of_t<decltype(data)>>(comm, data.data(), data.size(), root);
}

/// Asynchronous broadcast: same arguments and checks (thrown here), queued on the progress
/// engine. `data` must stay alive and untouched until the request finished.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request broadcast_async(communicator<X>& comm, std::span<T> data, int root) {
  detail::check_rank("broadcast", "root", root, comm.size());
  detail::check_extent("broadcast", "data", data.size(), sizeof(T));
  using space = memory_space_of_t<decltype(data)>;  // std::span: host memory
  return detail::launch_async(comm, "broadcast", [root, d = data.data(), n = data.size()](communicator<X>& x, op_ticket tk) {
    detail::broadcast_run<Algo, space>(x, tk, d, n, root);
  });
}

namespace detail {
/// Launches a broadcast of a device buffer on `s`: the root copies its buffer in, the others copy
/// the result out; the host schedule runs on one mirror.
template <class Algo, class X, class T>
request broadcast_device(communicator<X>& comm, T* data, std::size_t count, int root, cuda_stream s) {
  if constexpr (ipc_eligible<Algo, T, op::sum>) {
    if (auto st = ipc_state_of(comm); st && st->flat()) {
      cuda::ipc::group* g = st->group.get();
      ipc_log_shape(comm, device_shape<T>("broadcast", count, ""), "");
      return ipc_launch(comm, std::move(st), "broadcast", s, [&](std::chrono::milliseconds limit) {
        return cuda::ipc::broadcast(*g, data, count, dtype_of<T>, root, s, limit);
      });
    }
  }
  const bool is_root = comm.rank() == root;
  cuda::detail::staged_plan plan{staged(data, 1, count, is_root, false), staged(data, 1, count, false, !is_root), true};
  plan.cut(comm.settings().cuda_staging_bytes);
  return staged_launch(comm, "broadcast", s, plan, [&] {
    return [plan, root, tk = collective_tickets(comm, plan.windows)](communicator<X>& x, std::size_t w, std::byte* m, std::byte*) {
      broadcast_run<Algo, staged_memory>(x, tk[w], mirror_as<T>(m), plan.in.elems_of(w), root);
    };
  });
}
}  // namespace detail

/// Broadcast of device memory from `root`, ordered on CUDA stream `stream` as the device allreduce (allreduce.hpp): returns once
/// queued; later work on `stream` sees the result. Over CUDA IPC between the GPUs of one machine, else staged through host memory
/// (dispatch/ipc_collective.hpp, cuda/staging.hpp).
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
void broadcast(communicator<X>& comm, device_span<T> data, int root, cuda_stream stream) {
  detail::check_rank("broadcast", "root", root, comm.size());
  detail::check_extent("broadcast", "data", data.size(), sizeof(T));
  (void)detail::broadcast_device<Algo>(comm, data.data(), data.size(), root, stream);
}

/// The device broadcast with a request that finishes once the data is in device memory.
/// \tparam Algo algorithm policy. \tparam X transport. \tparam T element type.
template <algorithm Algo = algo::automatic, transport_policy X, element T>
request broadcast_async(communicator<X>& comm, device_span<T> data, int root, cuda_stream stream) {
  detail::check_rank("broadcast", "root", root, comm.size());
  detail::check_extent("broadcast", "data", data.size(), sizeof(T));
  return detail::broadcast_device<Algo>(comm, data.data(), data.size(), root, stream);
}

}  // namespace gsync
