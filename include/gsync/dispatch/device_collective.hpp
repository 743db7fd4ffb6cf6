#pragma once
/// \file
/// The launcher of collectives on device buffers (`device_span`) with a CUDA stream: what every
/// collective's device overload shares. It numbers the operation on the calling thread, closes a
/// gate on the user's stream and queues a job on the communicator's progress engine that runs the
/// collective's host schedule over pinned mirrors (cuda/staging.hpp). The call returns once the
/// work is ordered on the stream (NCCL's contract); the request it makes finishes when the results
/// are in device memory. An error after the call (a lost peer, a timeout, a CUDA error) releases
/// the stream, breaks the communicator (the next call throws it) and fails the request.
///
/// Only the window callback is templated on the element type; the rest runs in cuda/staging.hpp.
/// Under nvcc, or with GSYNC_WITH_CUDA, this header also installs the real CUDA runtime.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/core/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/staged_primitives.hpp"
#include "gsync/cuda/staging.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/dispatch/barrier_run.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/device_span.hpp"

#if defined(__CUDACC__) || (defined(GSYNC_WITH_CUDA) && GSYNC_WITH_CUDA)
#include "gsync/cuda/cuda_runtime_api.hpp"
#endif
#if defined(__CUDACC__)
#include "gsync/cuda/ipc_kernels.cuh"  // device collectives between GPUs of one machine (dispatch/ipc_collective.hpp)
#endif

namespace gsync::detail {

/// Registers `st`'s mirrors with `comm`'s RDMA adapters where they are not yet (at their
/// creation, and after they grew): windows then go to peers across hosts without a copy. Through
/// the transport, not communicator::register_memory: that waits for the operations queued before
/// (which may need this rank's next call on another communicator). A registration refused
/// (RLIMIT_MEMLOCK, say) leaves the copy, with a warning; a broken transport is the next
/// operation's to report.
template <class X>
void register_staging(communicator<X>& comm, cuda::detail::device_state& st) {
  if constexpr (registering_transport<X>) {
    st.register_mirrors([&](std::byte* p, std::size_t n) {
      try {
        return comm.transport().register_memory(std::span<const std::byte>(p, n));
      } catch (const error& e) {
        if (e.kind() == errc::system)
          comm.log().warn(std::string("device staging: the mirrors stay unregistered, windows are copied to the RDMA links: ") + e.what());
        return memory_registration();
      }
    });
  }
}

/// The staging resources of `comm`, made on its first device operation (on the caller's current
/// device, through the installed CUDA runtime; pools sized up front, cuda/staging.hpp).
template <class X>
std::shared_ptr<cuda::detail::device_state> device_state_of(communicator<X>& comm) {
  auto& slot = comm.device_state_slot();
  if (!slot) {
    auto st = std::make_shared<cuda::detail::device_state>(cuda::current_runtime_api(), comm.settings().cuda_staging_bytes,
                                                           std::chrono::steady_clock::now() + comm.issue_timeout());
    register_staging(comm, *st);  // here, before any job of the caller's operation is queued
    slot = st;
  }
  return std::static_pointer_cast<cuda::detail::device_state>(slot);
}

/// A barrier after device allocations: no rank's stream waits for the others before every rank
/// has allocated (ranks of one process sharing a device must not allocate under a held stream).
template <class X>
void device_barrier(communicator<X>& comm) {
  launch(comm, "prepare_device", [](communicator<X>& c, op_ticket tk) { barrier_run<algo::automatic>(c, tk); });
}

/// Makes `comm`'s staging resources and passes a barrier, once per communicator (at its first
/// device collective, or at prepare_device): no rank closes a gate on a stream before every rank
/// has allocated, so ranks of one process sharing a device never allocate (which synchronises
/// the device) while another's stream waits for them.
template <class X>
std::shared_ptr<cuda::detail::device_state> prepared_device_state(communicator<X>& comm) {
  auto st = device_state_of(comm);
  if (!st->collectively_prepared) {
    device_barrier(comm);
    st->collectively_prepared = true;
  }
  return st;
}

/// A gate held by a queued job: released exactly once, when the job ends or is dropped unrun.
class gate_hold {
 public:
  gate_hold(std::shared_ptr<cuda::detail::device_state> st, cuda::detail::device_state::closed_gate g) noexcept
      : st_(std::move(st)), value_(g.value), start_(g.start), hold_(std::move(g.hold)) {}
  gate_hold(gate_hold&& o) noexcept
      : st_(std::move(o.st_)), value_(o.value_), start_(std::exchange(o.start_, nullptr)), hold_(std::move(o.hold_)) {}
  gate_hold& operator=(gate_hold&&) = delete;
  ~gate_hold() { release(); }
  cuda::detail::device_state& state() const noexcept { return *st_; }  ///< the resources
  /// The start event, handed to the run (which returns it to the pool).
  cuda::event_handle take_start() noexcept { return std::exchange(start_, nullptr); }
  /// Opens the gate (idempotent): the stream is no longer held.
  void release() noexcept {
    if (!st_) return;
    if (start_) st_->give_event(std::exchange(start_, nullptr));
    st_->release(value_);
    hold_.end();
    st_.reset();
  }

 private:
  std::shared_ptr<cuda::detail::device_state> st_;
  std::uint64_t value_ = 0;
  cuda::event_handle start_ = nullptr;
  cuda::detail::stream_hold hold_;
};

/// The queued job of one staged operation.
/// \tparam X transport. \tparam F `void(communicator<X>&, std::size_t w, std::byte* in_mirror,
/// std::byte* out_mirror)`: runs the collective's schedule on window `w` of the plan.
template <class X, class F>
struct staged_job {
  gate_hold gate;
  cuda::detail::staged_plan plan;
  std::chrono::milliseconds limit;
  F run_window;

  void operator()(communicator<X>& comm) {
    try {
      gate.state().run(plan, gate.take_start(), limit, [&](std::size_t w, std::byte* in_m, std::byte* out_m) {
        comm.engine().shared()->tick();  // each window is bounded by the timeout: progress for the gate watchdog
        run_window(comm, w, in_m, out_m);
      });
    } catch (...) {
      gate.release();  // the stream goes on; the error breaks the communicator
      throw;
    }
    gate.release();
  }
  void skipped() noexcept { gate.release(); }
};

/// Launches a staged operation (see the file comment) and returns its request (empty when the
/// plan moves nothing). \param kind the collective's name; \param s the user's stream;
/// \param plan the buffers, already cut into windows; \param number called once the call is
/// known to go ahead: numbers the operation's messages (collective or point-to-point tickets)
/// and returns the window runner (see staged_job); \param collective false for point-to-point
/// operations (which cannot pass the barrier of prepared_device_state).
template <class X, class N>
request staged_launch(communicator<X>& comm, const char* kind, cuda_stream s, const cuda::detail::staged_plan& plan, N number,
                      bool collective = true) {
  if (comm.broken()) comm.engine().throw_broken();
  auto st = collective ? prepared_device_state(comm) : device_state_of(comm);
  if (st->api().capturing(s))
    throw error(errc::invalid_argument, std::string(kind) +
                                            ": the stream is being captured into a CUDA graph; device collectives through host "
                                            "staging cannot be captured (run them outside the capture)");
  st->ensure_capacity(plan.mirror_bytes(), std::chrono::steady_clock::now() + comm.issue_timeout());
  register_staging(comm, *st);
  auto run_window = number();
  if (plan.windows == 0) return {};  // nothing to move (numbered as the host path numbers it)
  const std::chrono::milliseconds limit = comm.issue_timeout();
  auto closed = st->close_gate(s, limit * static_cast<long>(plan.windows) + std::chrono::seconds(10));
  const std::uint64_t value = closed.value;
  gate_hold gate(st, std::move(closed));
  // The engine opens the gate; should the engine itself stop (a user operator that never returns), the watchdog does.
  cuda::detail::gate_watchdog::instance().watch(st, value, comm.engine().shared(), limit,
                                                std::string(kind) + " (rank " + std::to_string(comm.rank()) + ")");
  return comm.issue(kind, staged_job<X, decltype(run_window)>{std::move(gate), plan, limit, std::move(run_window)});
}

/// A device buffer of `blocks` blocks of `block_elems` elements of T.
/// \tparam T element type (const for inputs).
template <class T>
cuda::detail::staged_buffer staged(T* dev, std::size_t blocks, std::size_t block_elems, bool copy_in, bool copy_out) {
  cuda::detail::staged_buffer b;
  b.dev = reinterpret_cast<std::byte*>(const_cast<std::remove_const_t<T>*>(dev));
  b.blocks = blocks;
  b.block_elems = block_elems;
  b.elem = sizeof(T);
  b.copy_in = copy_in;
  b.copy_out = copy_out;
  return b;
}

/// Tickets of `windows` consecutive collectives (at least one: an empty operation is numbered too).
template <class X>
std::vector<op_ticket> collective_tickets(communicator<X>& comm, std::size_t windows) {
  std::vector<op_ticket> t;
  for (std::size_t w = 0; w < std::max<std::size_t>(windows, 1); ++w) t.push_back(comm.next_op());
  return t;
}

/// Waits until the running window's whole mirror has arrived: for window runners that read the
/// mirror themselves rather than through staged primitives (which wait piece by piece).
inline void mirror_ready() {
  if (cuda::detail::current_readiness) cuda::detail::current_readiness->ensure_all();
}

/// The mirror at `p` as elements of T.
template <class T>
T* mirror_as(std::byte* p) noexcept {
  return reinterpret_cast<T*>(p);
}

}  // namespace gsync::detail
