#pragma once
/// \file
/// `gsync::grad::synchronizer`, the class: the bucket engine (grad/bucket_engine.hpp: registration,
/// bucket build and plan check, marks, buckets issued in plan order through the reducer, finish())
/// over host buckets (grad/host_space.hpp), with the host's public names; and `step_result`, what
/// finish() returns. How one step moves data, the modes and the threading rules: the file comment
/// of grad/synchronizer.hpp.

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/grad/bucket_engine.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_reducer.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/host_space.hpp"
#include "gsync/grad/loss_scaler.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/stats.hpp"
#include "gsync/grad/synchronizer_common.hpp"
#include "gsync/grad/synchronizer_options.hpp"

namespace gsync::grad {

/// Gradient synchronizer (see the file comment of grad/synchronizer.hpp).
/// \tparam X transport of the communicator.
/// \tparam Reducer bucket reducer (`bucket_reducer`), `allreduce_reducer` by default; the compression seam.
template <transport_policy X, class Reducer = allreduce_reducer>
  requires bucket_reducer<Reducer, X>
class synchronizer : public detail::bucket_engine<X, detail::host_space<Reducer>> {
  using engine = detail::bucket_engine<X, detail::host_space<Reducer>>;

 public:
  using clock = std::chrono::steady_clock;  ///< clock of all timings

  /// A synchronizer over `comm` (which must outlive it and stay in place) with settings `opt`.
  /// Throws errc::invalid_argument for unusable settings. On destruction it waits (bounded by the
  /// communicator's timeout) for collectives still in flight; their errors are finish()'s to report.
  explicit synchronizer(communicator<X>& comm, synchronizer_options opt = {}, Reducer reducer = {})
      : engine(comm, std::move(opt), std::move(reducer)) {}

  synchronizer(const synchronizer&) = delete;
  synchronizer& operator=(const synchronizer&) = delete;

  /// Registers a gradient living in the caller's memory (copy mode); returns its registration index.
  /// Call in forward (parameter) order, identically on every rank, before the first mark_ready/build.
  /// The memory must stay valid while the synchronizer may use it (until the last finish()).
  /// \tparam T float, gsync::bfloat16 or gsync::half.
  template <class T>
  std::size_t add(std::span<T> grad, std::string name) {
    static_assert(is_grad_element_v<T>, "synchronizer::add: gradients must be float, gsync::bfloat16 or gsync::half");
    return this->add_tensor(make_ref(grad), std::move(name), false, "add");
  }

  /// Registers a gradient of `count` elements living inside its bucket (zero-copy mode); returns its
  /// registration index. Its memory is available through `view<T>(index)` after `build()`.
  /// \tparam T float, gsync::bfloat16 or gsync::half.
  template <class T>
  std::size_t add_view(std::size_t count, std::string name) {
    static_assert(is_grad_element_v<T>, "synchronizer::add_view: gradients must be float, gsync::bfloat16 or gsync::half");
    return this->add_tensor(tensor_ref{nullptr, count, dtype_of<T>}, std::move(name), true, "add_view");
  }

  /// The bucket memory of view gradient `i` (registered with `add_view<T>`). Builds if needed
  /// (collective). \tparam T the element type it was registered with.
  template <class T>
  std::span<T> view(std::size_t i) {
    const tensor_ref r = this->view_ref(i, dtype_of<T>);
    return {static_cast<T*>(r.data), r.count};
  }

  // The engine's members, documented in grad/bucket_engine.hpp:
  using engine::build;            ///< plans, allocates and checks the buckets (collective)
  using engine::tensors;          ///< where every gradient lives now: hand to `clip_grad_norm`
  using engine::tensor_name;      ///< name of tensor `i`
  using engine::tensor_count;     ///< number of registered tensors
  using engine::plan;             ///< the bucket plan (after build())
  using engine::will_sync;        ///< true when this step communicates
  using engine::loss_scale;       ///< multiply the loss by this before backward
  using engine::scaler;           ///< the loss scaler, or null
  using engine::totals;           ///< totals over finished steps
  using engine::options;          ///< the settings
  using engine::bucket_launched;  ///< bucket `b` issued in this step
  using engine::bucket_finished;  ///< bucket `b` issued and finished (non-blocking)
  using engine::begin_step;       ///< marks the start of a step for the step-time statistic
  using engine::mark_ready;       ///< gradient `i` is final for this step: pack, maybe issue buckets
  using engine::finish;           ///< ends the step: wait, unpack, verdict and statistics
};

}  // namespace gsync::grad
