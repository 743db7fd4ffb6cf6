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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/grad/device_api.hpp"
#include "gsync/cuda/staging.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/device_span.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_synchronizer.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/device_reducers.hpp"
#include "gsync/grad/loss_scaler.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/stats.hpp"
#include "gsync/grad/synchronizer_common.hpp"
#include "gsync/grad/synchronizer_options.hpp"
#include "gsync/grad/wide_accumulation.hpp"

namespace gsync::grad {

/// Gradient synchronizer for device gradients (see the file comment).
/// \tparam X transport of the communicator.
/// \tparam Reducer device bucket reducer (`device_bucket_reducer`, grad/device_reducers.hpp),
/// `device_allreduce_reducer` by default; `device_compressed_reducer<P>` compresses.
template <transport_policy X, class Reducer = device_allreduce_reducer>
  requires device_bucket_reducer<Reducer, X>
class device_synchronizer {
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
      : comm_(comm), opt_(std::move(opt)), api_(cuda::current_runtime_api()), kernels_(cuda::current_grad_kernels()),
        reducer_(std::move(reducer)), compute_(compute), step_start_(clock::now()) {
    if (opt_.accumulation_steps == 0) throw error(errc::invalid_argument, "device_synchronizer: accumulation_steps must be at least 1");
    if (opt_.bucket_bytes == 0 || opt_.first_bucket_bytes == 0)
      throw error(errc::invalid_argument, "device_synchronizer: bucket_bytes and first_bucket_bytes must be at least 1");
    if (opt_.loss_scaling) {
      if (opt_.on_nonfinite != nonfinite_action::report)
        throw error(errc::invalid_argument, "device_synchronizer: loss scaling needs on_nonfinite = nonfinite_action::report");
      scaler_.emplace(*opt_.loss_scaling);
    }
    comm_stream_ = api_.create_stream();
  }
  device_synchronizer(const device_synchronizer&) = delete;
  device_synchronizer& operator=(const device_synchronizer&) = delete;

  /// Waits (bounded) for collectives and passes still in flight, then frees the device memory.
  ~device_synchronizer() {
    drain();
    api_.destroy_stream(comm_stream_);  // first: its queued waits refer to the events
    try {
      device_synchronizing("device_synchronizer teardown", std::chrono::seconds(30), [&] {
        for (auto& b : buckets_) {
          api_.free_device(b.storage);
          api_.free_device(b.wire);
        }
        if (counters_) api_.free_device(counters_);
        if (host_counters_) api_.free_pinned(host_counters_);
        if (norm_) api_.free_device(norm_);
        if (host_norm_) api_.free_pinned(host_norm_);
        if (host_scratch_) api_.free_pinned(host_scratch_);
      });
    } catch (...) {
      // streams of other communicators stayed held: the memory is leaked rather than a device wait risked
    }
    for (cuda::event_handle e : events_) api_.destroy_event(e);
  }

  /// Registers a gradient in device memory (copy mode); returns its index. Forward order, the same
  /// on every rank, before the first build / mark_ready / finish. \tparam T float, bfloat16 or half.
  template <class T>
  std::size_t add(device_span<T> grad, std::string name) {
    static_assert(is_grad_element_v<T>, "device_synchronizer::add: gradients must be float, gsync::bfloat16 or gsync::half");
    check_not_built("add");
    tensors_.push_back({tensor_ref{grad.data(), grad.size(), dtype_of<T>}, std::move(name), false});
    return tensors_.size() - 1;
  }

  /// Registers a gradient of `count` elements living inside its bucket (zero-copy); its memory is
  /// `view<T>(i)` once built. \tparam T float, bfloat16 or half.
  template <class T>
  std::size_t add_view(std::size_t count, std::string name) {
    static_assert(is_grad_element_v<T>, "device_synchronizer::add_view: gradients must be float, gsync::bfloat16 or gsync::half");
    check_not_built("add_view");
    tensors_.push_back({tensor_ref{nullptr, count, dtype_of<T>}, std::move(name), true});
    return tensors_.size() - 1;
  }

  /// Plans and allocates the buckets and checks that every rank registered the same tensors
  /// (collective; the first mark_ready / finish / view does it otherwise). Buckets start at zero.
  void build() {
    if (built_) return;
    plan_ = detail::plan_for(tensors_, opt_);
    detail::check_same_registration(comm_, tensors_, opt_, "device_synchronizer");
    buckets_.resize(plan_.bucket_count());
    device_synchronizing("device_synchronizer::build", comm_.timeout(), [&] { allocate(); });
    comm_done_ = api_.create_event();
    compute_done_ = api_.create_event();
    events_.push_back(comm_done_);
    events_.push_back(compute_done_);
    built_ = true;
    begin_marks();
  }

 private:
  // Runs `fn` (calls that synchronise the device: allocations, frees) while gsync holds no stream
  // on the device (cuda/stream_holds.hpp), waiting at most `limit` for that.
  template <class F>
  void device_synchronizing(const char* what, std::chrono::milliseconds limit, F&& fn) {
    cuda::detail::stream_holds::instance().exclusive(api_.current_device(), clock::now() + limit, what, fn);
  }
  void allocate() {
    for (std::size_t b = 0; b < plan_.bucket_count(); ++b) {
      const bucket_layout& bl = plan_.bucket(b);
      bucket_state& bs = buckets_[b];
      bs.grad_type = bl.type;
      bs.wire_type = detail::wire_type_for(opt_.wire, bl.type);
      bool has_view = false;
      for (std::size_t i : bl.tensors) has_view = has_view || tensors_[i].is_view;
      if (bs.wire_type == bs.grad_type || has_view) {
        bs.storage = static_cast<std::byte*>(api_.alloc_device(std::max<std::size_t>(1, bl.bytes())));
        api_.zero_async(bs.storage, bl.bytes(), compute_);
      }
      if (bs.wire_type != bs.grad_type) bs.wire = static_cast<std::byte*>(api_.alloc_device(std::max<std::size_t>(1, bl.count * size_of(bs.wire_type))));
      for (std::size_t i : bl.tensors)
        if (tensors_[i].is_view) tensors_[i].ref.data = bs.storage + plan_.place(i).offset * size_of(bl.type);
      bs.ready = api_.create_event();
      events_.push_back(bs.ready);
    }
    counters_ = static_cast<unsigned long long*>(api_.alloc_device(std::max<std::size_t>(1, tensors_.size()) * 8));
    host_counters_ = static_cast<unsigned long long*>(api_.alloc_pinned(std::max<std::size_t>(1, tensors_.size()) * 8));
    const std::size_t slots = std::max<std::size_t>(1, tensors_.size());
    norm_ = static_cast<double*>(api_.alloc_device(slots * cuda::sum_squares_slots * 8));
    host_norm_ = static_cast<double*>(api_.alloc_pinned(slots * 8));
    host_scratch_ = static_cast<std::byte*>(api_.alloc_pinned(scratch_bytes));
  }

 public:

  /// The bucket memory of view gradient `i` (registered with add_view<T>). Builds if needed.
  /// \tparam T its element type.
  template <class T>
  device_span<T> view(std::size_t i) {
    build();
    const tensor_entry& t = entry(i, "view");
    if (!t.is_view) throw error(errc::invalid_argument, "device_synchronizer::view: tensor '" + t.name + "' was registered with add()");
    if (t.ref.type != dtype_of<T>) throw error(errc::invalid_argument, "device_synchronizer::view: tensor '" + t.name + "' holds " +
                                                                            std::string(name(t.ref.type)));
    return {static_cast<T*>(t.ref.data), t.ref.count};
  }

  std::size_t tensor_count() const noexcept { return tensors_.size(); }          ///< registered tensors
  const bucket_plan& plan() const noexcept { return plan_; }                      ///< the plan (after build)
  bool will_sync() const noexcept { return (micro_ + 1) % opt_.accumulation_steps == 0; }  ///< this step communicates
  float loss_scale() const noexcept { return scaler_ ? scaler_->scale() : 1.0f; } ///< multiply the loss by this
  const loss_scaler* scaler() const noexcept { return scaler_ ? &*scaler_ : nullptr; }  ///< or null
  const running_stats& totals() const noexcept { return totals_; }                ///< over finished steps
  cuda_stream compute_stream() const noexcept { return compute_; }                ///< backward's stream
  cuda_stream comm_stream() const noexcept { return comm_stream_; }               ///< the buckets' stream
  /// Marks the start of a step for the step-time statistic.
  void begin_step() { step_start_ = clock::now(); }

  /// Declares gradient `i` final for this step, as its producer's work is queued on the compute
  /// stream: queues its packing and, when it completes a bucket, the bucket's allreduce.
  void mark_ready(std::size_t i) {
    build();
    tensor_entry& t = entry(i, "mark_ready");
    if (ready_[i]) throw error(errc::invalid_argument, "device_synchronizer::mark_ready: tensor '" + t.name + "' was already marked");
    ready_[i] = true;
    if (!will_sync()) return;
    const tensor_place& pl = plan_.place(i);
    if (pl.bucket == no_bucket) return;
    bucket_state& bs = buckets_[pl.bucket];
    pack(t, pl, bs);
    if (--bs.pending == 0) launch_ready();
  }

  /// Ends the step (see the file comment): returns the verdict, the same on every rank; throws the
  /// collectives' errors, and errc::non_finite when on_nonfinite is throw_error.
  step_result finish() {
    build();
    step_result res;
    res.synced = will_sync();
    if (res.synced) {
      for (std::size_t i = tensors_.size(); i-- > 0;)
        if (!ready_[i]) mark_ready(i);
      launch_ready();
      wait_all(res.stats);
      const auto t0 = clock::now();
      const float factor = (opt_.average_accumulation ? 1.0f / static_cast<float>(opt_.accumulation_steps) : 1.0f) *
                           (scaler_ ? scaler_->inv_scale() : 1.0f);
      api_.record(comm_done_, comm_stream_);
      api_.stream_wait_event(compute_, comm_done_);
      api_.zero_async(counters_, tensors_.size() * 8, compute_);
      for (std::size_t b = 0; b < buckets_.size(); ++b) unpack_bucket(b, factor);
      if (!tensors_.empty()) api_.copy_async(host_counters_, counters_, tensors_.size() * 8, cuda::copy_kind::device_to_host, compute_);
      api_.record(compute_done_, compute_);
      cuda::detail::wait_event(api_, compute_done_, clock::now() + comm_.timeout(), "the gradient unpack");
      for (std::size_t i = 0; i < tensors_.size(); ++i)
        if (host_counters_[i]) res.nonfinite.push_back(report(i, host_counters_[i]));
      res.stats.unpack_time = clock::now() - t0;
      res.stats.synced = true;
      res.stats.buckets = buckets_.size();
      const bool bad = !res.nonfinite.empty();
      res.apply = scaler_ ? scaler_->update(bad) : !bad;
    }
    ++micro_;
    const auto now = clock::now();
    res.stats.step_time = now - step_start_;
    step_start_ = now;
    totals_.add(res.stats);
    begin_marks();
    if (!res.nonfinite.empty() && opt_.on_nonfinite == nonfinite_action::throw_error)
      throw error(errc::non_finite, "device_synchronizer::finish: " + describe(res.nonfinite));
    return res;
  }

  /// Clips the synchronized gradients by their global L2 norm (replicated: no communication; the
  /// same on every rank): when norm > max_norm, multiplies every gradient by max_norm / (norm +
  /// 1e-6) on the compute stream. Returns the norm before clipping; a non-finite norm leaves the
  /// gradients untouched (as grad::clip_grad_norm). Waits once for the tensors' sums of squares.
  double clip_grad_norm(double max_norm) {
    build();
    std::size_t k = 0;  // one sum per non-empty tensor, each in its own slots, read back together
    for (const auto& t : tensors_) {
      if (t.ref.count == 0) continue;
      double* out = norm_ + k * cuda::sum_squares_slots;
      kernels_.sum_squares(t.ref.data, t.ref.type, t.ref.count, out, compute_);
      api_.copy_async(host_norm_ + k, out, 8, cuda::copy_kind::device_to_host, compute_);
      ++k;
    }
    api_.record(compute_done_, compute_);
    cuda::detail::wait_event(api_, compute_done_, clock::now() + comm_.timeout(), "the gradient norm");
    double total = 0;
    for (std::size_t j = 0; j < k; ++j) total += host_norm_[j];  // tensor by tensor, in registration order, as the host
    const double norm = std::sqrt(total);
    if (std::isfinite(norm) && norm > max_norm) {
      const float f = static_cast<float>(max_norm / (norm + 1e-6));
      for (const auto& t : tensors_)
        if (t.ref.count) kernels_.scale(t.ref.data, t.ref.type, t.ref.count, f, compute_);
    }
    return norm;
  }

 private:
  using tensor_entry = detail::registered_tensor;  // device memory: the caller's, or a view inside the bucket
  struct bucket_state {
    dtype grad_type = dtype::float32;
    dtype wire_type = dtype::float32;
    std::byte* storage = nullptr;  // gradient-typed bucket (views, or the communicated buffer when no cast)
    std::byte* wire = nullptr;     // wire-typed bucket when the wire type differs
    cuda::event_handle ready = nullptr;
    std::size_t pending = 0;
    bool launched = false;
    request req;
    std::uint64_t bytes_sent = 0;  // reported by the reducer
    std::byte* comm_buffer() const noexcept { return wire ? wire : storage; }
  };

  const tensor_entry& entry(std::size_t i, const char* what) const { return detail::registered(tensors_, i, "device_synchronizer", what); }
  tensor_entry& entry(std::size_t i, const char* what) { return detail::registered(tensors_, i, "device_synchronizer", what); }
  void check_not_built(const char* what) const {
    if (built_) throw error(errc::invalid_argument, std::string("device_synchronizer::") + what + ": register tensors before the buckets are built");
  }
  void begin_marks() {
    detail::reset_marks(ready_, tensors_.size(), buckets_, plan_);
    next_launch_ = 0;
  }
  void pack(const tensor_entry& t, const tensor_place& pl, bucket_state& bs) {
    if (bs.wire_type != bs.grad_type)
      kernels_.cast(t.ref.data, bs.grad_type, bs.wire + pl.offset * size_of(bs.wire_type), bs.wire_type, pl.count, compute_);
    else if (!t.is_view && pl.count)
      api_.copy_async(bs.storage + pl.offset * size_of(bs.grad_type), t.ref.data, pl.count * size_of(bs.grad_type),
                      cuda::copy_kind::device_to_device, compute_);
  }
  void launch_ready() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      const std::size_t b = next_launch_++;
      bucket_state& bs = buckets_[b];
      api_.record(bs.ready, compute_);
      api_.stream_wait_event(comm_stream_, bs.ready);  // the bucket is packed
      const std::size_t count = plan_.bucket(b).count;
      bs.bytes_sent = 0;
      gsync::grad::detail::visit_grad_type(bs.wire_type, [&](auto w) {
        using W = decltype(w);
        const device_bucket_job<W> job{b, device_span<W>{reinterpret_cast<W*>(bs.comm_buffer()), count}, opt_.average, comm_stream_,
                                       &bs.bytes_sent};
        bs.req = reducer_.start(comm_, job);
      });
      bs.launched = true;
    }
  }
  // Waits for every launched bucket, counting the bytes its reducer reports.
  void wait_all(step_stats& st) {
    try {
      detail::wait_buckets(buckets_, plan_, st, [&](std::size_t b) { return buckets_[b].bytes_sent; });
    } catch (...) {
      begin_marks();
      throw;
    }
  }
  void drain() noexcept {
    for (auto& bs : buckets_)
      if (bs.launched && bs.req.valid()) try {
          bs.req.wait();
        } catch (...) {
        }
    try {
      if (built_) {  // the communication stream first: its last passes use the reducer's memory
        api_.record(comm_done_, comm_stream_);
        cuda::detail::wait_event(api_, comm_done_, clock::now() + comm_.timeout(), "the gradient collectives");
        api_.record(compute_done_, compute_);
        cuda::detail::wait_event(api_, compute_done_, clock::now() + comm_.timeout(), "the gradient passes");
      }
    } catch (...) {
    }
  }
  void unpack_bucket(std::size_t b, float factor) {
    const bucket_state& bs = buckets_[b];
    for (std::size_t i : plan_.bucket(b).tensors) {
      const tensor_place& pl = plan_.place(i);
      if (pl.count == 0) continue;
      kernels_.unpack_scan(bs.comm_buffer() + pl.offset * size_of(bs.wire_type), bs.wire_type, tensors_[i].ref.data, bs.grad_type,
                           pl.count, factor, counters_ + i, compute_);
    }
  }
  // The report of tensor i with `bad` non-finite values: its first one, read back from the device
  // through the pinned scratch made at build (piece by piece: no allocation here, which would
  // synchronise the device while other ranks' streams may wait for this one).
  nonfinite_report report(std::size_t i, unsigned long long bad) {
    const tensor_entry& t = tensors_[i];
    nonfinite_report r{plan_.place(i).bucket, i, t.name, static_cast<std::size_t>(bad), 0, 0.0f};
    const std::size_t esize = size_of(t.ref.type);
    const std::size_t per = scratch_bytes / esize;
    const auto* src = static_cast<const std::byte*>(t.ref.data);
    r.first_index = t.ref.count;
    for (std::size_t first = 0; first < t.ref.count; first += per) {
      const std::size_t n = std::min(per, t.ref.count - first);
      api_.copy_async(host_scratch_, src + first * esize, n * esize, cuda::copy_kind::device_to_host, compute_);
      api_.record(compute_done_, compute_);
      cuda::detail::wait_event(api_, compute_done_, clock::now() + comm_.timeout(), "reading a non-finite gradient");
      bool found = false;
      gsync::grad::detail::visit_grad_type(t.ref.type, [&](auto v) {
        using T = decltype(v);
        const T* p = reinterpret_cast<const T*>(host_scratch_);
        const std::size_t k = first_nonfinite(p, n);
        if (k < n) {
          r.first_index = first + k;
          r.first_value = static_cast<float>(p[k]);
          found = true;
        }
      });
      if (found) break;
    }
    return r;
  }

  communicator<X>& comm_;
  synchronizer_options opt_;
  cuda::runtime_api& api_;
  cuda::grad_kernels& kernels_;
  Reducer reducer_;
  cuda_stream compute_ = nullptr;
  cuda_stream comm_stream_ = nullptr;
  std::optional<loss_scaler> scaler_;
  std::vector<tensor_entry> tensors_;
  bucket_plan plan_;
  std::vector<bucket_state> buckets_;
  std::vector<bool> ready_;
  std::vector<cuda::event_handle> events_;
  cuda::event_handle comm_done_ = nullptr, compute_done_ = nullptr;
  unsigned long long* counters_ = nullptr;       // device: non-finite count per tensor
  unsigned long long* host_counters_ = nullptr;  // pinned
  double* norm_ = nullptr;                       // device: sum_squares_slots
  double* host_norm_ = nullptr;                  // pinned
  static constexpr std::size_t scratch_bytes = 64 << 10;
  std::byte* host_scratch_ = nullptr;            // pinned: reading non-finite gradients back (report)
  std::size_t next_launch_ = 0;
  std::uint64_t micro_ = 0;
  bool built_ = false;
  clock::time_point step_start_;
  running_stats totals_;
};

}  // namespace gsync::grad
