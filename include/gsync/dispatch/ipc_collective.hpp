#pragma once
/// \file
/// The launcher of collectives on device buffers over CUDA IPC (cuda/ipc_schedule.hpp): what the
/// device overloads of allreduce, reduce_scatter, allgather, broadcast and reduce share when every
/// rank of the communicator can map the others' GPU memory. The call queues the schedule on the
/// user's stream and returns (NCCL's contract); a job on the communicator's progress engine
/// watches it (cuda/ipc_group.hpp) and finishes the request once the stream has passed it, or
/// fails it, and breaks the communicator, when a peer died, stalled or enqueued something else.
///
/// Whether a communicator's device collectives use CUDA IPC is decided once, collectively, at its
/// first eligible device collective (dispatch/ipc_setup.hpp); otherwise they use host staging
/// (dispatch/device_collective.hpp). Eligible: the automatic algorithm (or a forced device one,
/// dispatch/ipc_allreduce.hpp), a built-in element type, and a built-in operator or a user operator
/// whose kernel this file compiled (nvcc: `cuda::ipc_user_reduction`); in a .cpp file a user
/// operator stays on staging, whose host schedule runs it, and INFO says so.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/algo/select.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/core/dtype.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/health.hpp"
#include "gsync/core/request.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/ipc_api.hpp"
#include "gsync/cuda/ipc_group.hpp"
#include "gsync/cuda/ipc_schedule.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::detail {

/// A communicator's CUDA IPC state: its group, or why its device collectives use host staging.
struct ipc_state {
  std::unique_ptr<cuda::ipc::group> group;  ///< null: host staging
  std::string refusal;                      ///< why not (for logs)
  /// The ranks span several hosts: `group` holds the ranks of this rank's host (group rank = local
  /// index), and only allreduce uses it, in the hierarchical form (dispatch/ipc_hierarchical.hpp);
  /// the other device collectives keep to host staging.
  bool across_hosts = false;
  std::vector<int> cross;  ///< across hosts: the ranks with this rank's local index, by host
  int host = 0;            ///< across hosts: this rank's host (its index in `cross`)
  cost_model network;      ///< across hosts: the links between hosts (chooses the cross-host schedule)
  /// Every rank of the communicator is in `group`: every device collective may use it.
  bool flat() const noexcept { return group && !across_hosts; }
};

/// The IPC state of `comm`, set up collectively on first use (dispatch/ipc_setup.hpp). Null when
/// set-up could not run (the communicator is broken; the caller's staging path then throws it).
template <class X>
std::shared_ptr<ipc_state> ipc_state_of(communicator<X>& comm);

/// True for element types the IPC kernels know.
template <class T>
concept ipc_element = requires { detail::dtype_map<std::remove_cv_t<T>>::value; };

inline namespace GSYNC_TU_NS {  // depends on what this file can reduce (detail/hd.hpp)

/// True when the IPC kernels can reduce `T` under `Op`: a built-in operator, or a user operator
/// whose kernel this translation unit compiled (cuda/ipc_kernels.cuh under nvcc).
template <class T, class Op>
concept ipc_reducible = ipc_element<T> && (cuda::ipc_op_of<Op>().has_value() || cuda::has_ipc_user_reduction<T, Op>);

/// Whether a device collective with algorithm policy `Algo`, elements `T` and operator `Op` may
/// run over CUDA IPC.
template <class Algo, class T, class Op>
inline constexpr bool ipc_eligible = std::is_same_v<Algo, algo::automatic> && ipc_reducible<T, Op>;

}  // namespace GSYNC_TU_NS

/// The watching job of one IPC operation (see the file comment).
struct ipc_job {
  std::shared_ptr<ipc_state> st;
  cuda::event_handle done = nullptr;
  cuda::ipc::step_range steps;
  const char* kind;
  std::chrono::milliseconds limit;
  cuda::detail::stream_hold hold;  // the user's stream, held until the watch has seen it pass (or released it)

  ipc_job(std::shared_ptr<ipc_state> s, cuda::event_handle e, cuda::ipc::step_range r, const char* k, std::chrono::milliseconds l,
          cuda::detail::stream_hold h)
      : st(std::move(s)), done(e), steps(r), kind(k), limit(l), hold(std::move(h)) {}
  ipc_job(ipc_job&& o) noexcept
      : st(std::move(o.st)), done(std::exchange(o.done, nullptr)), steps(o.steps), kind(o.kind), limit(o.limit), hold(std::move(o.hold)) {}
  ipc_job& operator=(ipc_job&&) = delete;
  ~ipc_job() {
    if (done) st->group->api().destroy_event(done);
  }
  template <class X>
  void operator()(communicator<X>& comm) {
    struct end_hold {
      cuda::detail::stream_hold& h;
      ~end_hold() { h.end(); }
    } guard{hold};
    // The communicator's own failure detection too: its heartbeat finds a stopped or hung local
    // peer within GSYNC_LIVENESS_S (the watchdog alone sees only exits and the op timeout).
    auto next_health = std::chrono::steady_clock::now();
    st->group->watch(done, steps, kind, limit, [&]() -> std::optional<std::pair<errc, std::string>> {
      if (comm.aborted()) return std::pair{errc::aborted, "rank " + std::to_string(comm.rank()) + ": communicator aborted"};
      const auto now = std::chrono::steady_clock::now();
      if (now < next_health) return std::nullopt;
      next_health = now + std::chrono::milliseconds(20);
      health_report h = comm.health();
      if (h.ok()) return std::nullopt;
      return std::pair{h.kind, std::string(kind) + " over CUDA IPC: " + h.message};
    });
  }
  /// The communicator broke (or was aborted) before this job ran: the peers are told, so that
  /// they fail too instead of completing against this rank's unwatched work.
  void skipped() noexcept {
    st->group->report(errc::aborted, std::string(kind) + " over CUDA IPC: " + st->group->who(st->group->rank()) +
                                         ": its communicator failed or was aborted before the operation ran");
    hold.end();
  }
};

/// Queues an IPC operation on `s` (`enqueue(limit)` queues its steps and returns them) and its
/// watching job; returns the job's request (empty when nothing was queued).
template <class X, class F>
request ipc_launch(communicator<X>& comm, std::shared_ptr<ipc_state> st, const char* kind, cuda_stream s, F&& enqueue) {
  if (comm.broken()) comm.engine().throw_broken();
  cuda::ipc::group& g = *st->group;
  if (g.api().capturing(s))
    throw error(errc::invalid_argument, std::string(kind) +
                                            ": the stream is being captured into a CUDA graph; device collectives over CUDA IPC "
                                            "are watched from the host and cannot be captured (run them outside the capture)");
  const std::chrono::milliseconds limit = comm.issue_timeout();
  cuda::detail::stream_hold hold(g.device());  // before the stream waits for anyone
  cuda::ipc::step_range steps;
  try {
    steps = enqueue(limit);
  } catch (const error& e) {
    g.report(e.kind(), std::string(kind) + " over CUDA IPC: " + e.what());  // peers waiting for this rank stop waiting
    throw;
  }
  if (steps.last < steps.first) return {};
  cuda::event_handle done = g.api().create_event();
  try {
    g.api().record(done, s);
  } catch (...) {
    g.api().destroy_event(done);
    throw;
  }
  return comm.issue(kind, ipc_job{std::move(st), done, steps, kind, limit, std::move(hold)});
}

/// The installed IPC kernels (installed when the group formed; a program that uninstalls them
/// later gets errc::cuda here).
inline cuda::ipc_kernels& ipc_kernels_in_use() {
  if (auto* k = cuda::installed_ipc_kernels()) return *k;
  throw error(errc::cuda, "device collective over CUDA IPC: the IPC kernels were uninstalled after the group formed");
}

inline namespace GSYNC_TU_NS {

/// The element pass of a `T` reduction under `op` over CUDA IPC; `b` receives a built-in
/// operator's arguments and, like `op`, must outlive the result.
template <class T, class Op>
  requires ipc_reducible<T, Op>
cuda::ipc_reduction ipc_reduction_of(const Op& op, cuda::ipc_reduction::builtin_args& b) {
  if constexpr (cuda::ipc_op_of<Op>().has_value()) {
    b = {&ipc_kernels_in_use(), dtype_of<T>, *cuda::ipc_op_of<Op>()};
    return cuda::ipc_reduction::builtin(b);
  } else {
    return cuda::ipc_reduction::user<T, Op>(op);
  }
}

/// Why a device collective of `T` under `Op` cannot run over CUDA IPC, for logs; empty when it can.
template <class T, class Op>
std::string ipc_kernel_gap() {
  if constexpr (!ipc_element<T>) return "the CUDA IPC kernels have no element type " + std::string(name(dtype_of<T>));
  else if constexpr (!ipc_reducible<T, Op>)
    return "user operator " + std::string(op_name<Op>()) +
           ": this file was not compiled by nvcc, so no GPU kernel of it exists (call the collective from a .cu file to run it on "
           "the GPU over CUDA IPC)";
  else return {};
}

}  // namespace GSYNC_TU_NS

/// "name(f32, 1024, sum)": a device operation's shape, for logs.
template <class T>
std::string device_shape(const char* kind, std::size_t count, std::string_view op) {
  return std::string(kind) + "(" + std::string(name(dtype_of<T>)) + ", " + std::to_string(count) + (op.empty() ? "" : ", ") +
         std::string(op) + ") on device";
}

/// Logs, at GSYNC_DEBUG=INFO and once per shape, that `shape` runs over CUDA IPC (`how`).
template <class X>
void ipc_log_shape(communicator<X>& comm, std::string shape, const std::string& how) {
  if (!comm.log().enabled(log_level::info) || !comm.first_time(shape)) return;
  comm.log().info(shape + " -> CUDA IPC " + how);
}

}  // namespace gsync::detail
