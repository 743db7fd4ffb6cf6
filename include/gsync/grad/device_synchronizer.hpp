#pragma once
/// \file
/// `gsync::grad::device_synchronizer`: the gradient synchronizer of grad/synchronizer.hpp for
/// gradients in GPU memory, ordered on CUDA streams.
///
/// \code
///   gsync::grad::device_synchronizer sync(comm, {.wire = gsync::grad::wire_dtype::bfloat16}, compute);
///   for (auto& p : params) sync.add(gsync::device_span<float>{p.grad, p.n}, p.name);   // forward order
///   for (step...) {
///     forward<<<..., compute>>>();
///     for (layer from last to first) { backward<<<..., compute>>>(layer); sync.mark_ready(layer.grad); }
///     auto r = sync.finish();     // gradients averaged; later work on `compute` sees them
///     if (r.apply) sgd<<<..., compute>>>();
///   }
/// \endcode
///
/// How data moves in one step:
/// 1. Registration and the bucket plan are the host synchronizer's (bucket_plan.hpp; the plan is
///    checked across ranks once). Buckets are device memory.
/// 2. `mark_ready(i)` queues, on the compute stream, the copy (or cast to the wire type) of gradient
///    i into its bucket. When a bucket is complete (buckets complete in plan order), an event on the
///    compute stream makes the communication stream wait for it, and the bucket's allreduce is
///    queued on the communication stream (staged through host memory, cuda/staging.hpp): it runs
///    while the compute stream goes on with backward (through the bucket reducer, Reducer). 16-bit buckets are summed in float32 by each
///    block's owner and rounded once (grad/wide_accumulation.hpp), as on the host.
/// 3. `finish()` marks what is not marked, waits for every bucket (errors are thrown here), makes
///    the compute stream wait for the communication stream, and queues per tensor the fused unpack
///    (cast back, 1/accumulation and 1/loss-scale factors, count of non-finite values into a device
///    counter). It then waits for the counters (one small copy to the host) to give the verdict the
///    loss scaler needs, the same on every rank. Later work on the compute stream sees the results.
///
/// Results equal the host synchronizer's for the same gradients and settings, bit for bit: the
/// same buckets, the same collectives on the same bytes, each element cast and unpacked by the
/// host passes' own functions.
///
/// Compression plugs in as the bucket reducer (grad/device_reducers.hpp): int8 is encoded and
/// decoded on the GPU, other policies run the host schedule on a pinned copy. The element passes
/// come from `cuda::grad_kernels` (grad/device_api.hpp): include <gsync/grad/device_kernels.cuh> in one
/// `.cu` file of the program.

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/device_span.hpp"
#include "gsync/grad/bucket_engine.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_synchronizer.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/device_api.hpp"
#include "gsync/grad/device_reducers.hpp"
#include "gsync/grad/device_space.hpp"
#include "gsync/grad/loss_scaler.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/stats.hpp"
#include "gsync/grad/synchronizer_common.hpp"
#include "gsync/grad/synchronizer_options.hpp"
#include "gsync/grad/wide_accumulation.hpp"

namespace gsync::grad {

/// Gradient synchronizer for device gradients (see the file comment): the bucket engine
/// (grad/bucket_engine.hpp) over device buckets (grad/device_space.hpp).
/// \tparam X transport of the communicator.
/// \tparam Reducer device bucket reducer (`device_bucket_reducer`, grad/device_reducers.hpp),
/// `device_allreduce_reducer` by default; `device_compressed_reducer<P>` compresses.
template <transport_policy X, class Reducer = device_allreduce_reducer>
  requires device_bucket_reducer<Reducer, X>
class device_synchronizer : public detail::bucket_engine<X, detail::device_space<Reducer>> {
  using engine = detail::bucket_engine<X, detail::device_space<Reducer>>;

 public:
  using clock = std::chrono::steady_clock;  ///< clock of all timings

  /// A synchronizer over `comm` (which must outlive it and stay in place) with settings `opt`;
  /// backward runs on `compute` (the stream whose later work sees the synchronized gradients).
  /// Creates its communication stream on the current device. Throws errc::invalid_argument for
  /// unusable settings, errc::cuda without a CUDA runtime or gradient kernels.
  explicit device_synchronizer(communicator<X>& comm, synchronizer_options opt = {}, cuda_stream compute = nullptr)
      : device_synchronizer(comm, std::move(opt), Reducer{}, compute) {}
  /// As above, with the bucket reducer `reducer` (e.g. `device_compressed_reducer{compress::int8{}}`).
  device_synchronizer(communicator<X>& comm, synchronizer_options opt, Reducer reducer, cuda_stream compute)
      : engine(comm, std::move(opt), std::move(reducer), compute) {
    this->space().open();
  }
  device_synchronizer(const device_synchronizer&) = delete;
  device_synchronizer& operator=(const device_synchronizer&) = delete;
  // Destruction waits (bounded) for collectives and passes still in flight, then frees the device memory.

  /// Registers a gradient in device memory (copy mode); returns its index. Forward order, the same
  /// on every rank, before the first build / mark_ready / finish. \tparam T float, bfloat16 or half.
  template <class T>
  std::size_t add(device_span<T> grad, std::string name) {
    static_assert(is_grad_element_v<T>, "device_synchronizer::add: gradients must be float, gsync::bfloat16 or gsync::half");
    return this->add_tensor(tensor_ref{grad.data(), grad.size(), dtype_of<T>}, std::move(name), false, "add");
  }

  /// Registers a gradient of `count` elements living inside its bucket (zero-copy); its memory is
  /// `view<T>(i)` once built. \tparam T float, bfloat16 or half.
  template <class T>
  std::size_t add_view(std::size_t count, std::string name) {
    static_assert(is_grad_element_v<T>, "device_synchronizer::add_view: gradients must be float, gsync::bfloat16 or gsync::half");
    return this->add_tensor(tensor_ref{nullptr, count, dtype_of<T>}, std::move(name), true, "add_view");
  }

  /// The bucket memory of view gradient `i` (registered with add_view<T>). Builds if needed.
  /// \tparam T its element type.
  template <class T>
  device_span<T> view(std::size_t i) {
    const tensor_ref r = this->view_ref(i, dtype_of<T>);
    return {static_cast<T*>(r.data), r.count};
  }

  // The engine's members, documented in grad/bucket_engine.hpp:
  using engine::build;         ///< plans, allocates and checks the buckets (collective); buckets start at zero
  using engine::tensor_count;  ///< registered tensors
  using engine::plan;          ///< the plan (after build)
  using engine::will_sync;     ///< this step communicates
  using engine::loss_scale;    ///< multiply the loss by this
  using engine::scaler;        ///< or null
  using engine::totals;        ///< over finished steps
  using engine::begin_step;    ///< marks the start of a step for the step-time statistic
  /// Declares gradient `i` final for this step, as its producer's work is queued on the compute
  /// stream: queues its packing and, when it completes a bucket, the bucket's allreduce.
  using engine::mark_ready;
  /// Ends the step (see the file comment): returns the verdict, the same on every rank; throws the
  /// collectives' errors, and errc::non_finite when on_nonfinite is throw_error.
  using engine::finish;

  cuda_stream compute_stream() const noexcept { return this->space().compute_stream(); }  ///< backward's stream
  cuda_stream comm_stream() const noexcept { return this->space().comm_stream(); }        ///< the buckets' stream

  /// Clips the synchronized gradients by their global L2 norm (replicated: no communication; the
  /// same on every rank): when norm > max_norm, multiplies every gradient by max_norm / (norm +
  /// 1e-6) on the compute stream. Returns the norm before clipping; a non-finite norm leaves the
  /// gradients untouched (as grad::clip_grad_norm). Waits once for the tensors' sums of squares.
  double clip_grad_norm(double max_norm) {
    this->build();
    return this->space().clip_grad_norm(this->registered_tensors(), max_norm, this->comm().timeout());
  }
};

}  // namespace gsync::grad
