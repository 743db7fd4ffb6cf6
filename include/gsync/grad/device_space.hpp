#pragma once
/// \file
/// `grad::detail::device_space<Reducer>`: the bucket space (grad/bucket_space.hpp) of the device
/// synchronizer (grad/device_synchronizer.hpp). Buckets are device memory; packing, the fused
/// unpack and the norm are `cuda::grad_kernels` passes on the compute stream; a bucket is reduced
/// on the space's communication stream by a device bucket reducer (grad/device_reducers.hpp), after
/// an event says the compute stream packed it. Allocations and frees synchronise the device, so
/// they run only while gsync holds no stream there (cuda/stream_holds.hpp).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/staging.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/device_span.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_space.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/device_api.hpp"
#include "gsync/grad/device_reducers.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/synchronizer_common.hpp"

namespace gsync::grad::detail {

/// Device buckets reduced by `Reducer` (a `device_bucket_reducer`) on a stream of the space's own.
/// \tparam Reducer the reducer.
template <class Reducer>
class device_space {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr synchronizer_style style{"device_synchronizer", false, false};  ///< names and messages

  /// A space on the installed CUDA runtime and gradient kernels (errc::cuda without them) whose
  /// buckets `reducer` reduces, packed by work on `compute`. Makes no stream until open().
  device_space(Reducer reducer, cuda_stream compute)
      : api_(cuda::current_runtime_api()), kernels_(cuda::current_grad_kernels()), reducer_(std::move(reducer)), compute_(compute) {}
  device_space(const device_space&) = delete;
  device_space& operator=(const device_space&) = delete;

  /// Frees the device memory (after the engine's drain), unless a stream of another communicator
  /// stays held for 30 s: then it is leaked rather than a device wait risked.
  ~device_space() {
    if (!opened_) return;  // the synchronizer was never made: nothing to free
    api_.destroy_stream(comm_stream_);  // first: its queued waits refer to the events
    try {
      device_synchronizing("device_synchronizer teardown", std::chrono::seconds(30), [&] {
        for (std::byte* p : owned_) api_.free_device(p);
        if (counters_) api_.free_device(counters_);
        if (host_counters_) api_.free_pinned(host_counters_);
        if (norm_) api_.free_device(norm_);
        if (host_norm_) api_.free_pinned(host_norm_);
        if (host_scratch_) api_.free_pinned(host_scratch_);
      });
    } catch (...) {
    }
    for (cuda::event_handle e : events_) api_.destroy_event(e);
  }

  /// Creates the communication stream on the current device (once the settings are checked).
  void open() {
    comm_stream_ = api_.create_stream();
    opened_ = true;
  }
  cuda_stream compute_stream() const noexcept { return compute_; }     ///< backward's stream
  cuda_stream comm_stream() const noexcept { return comm_stream_; }    ///< the buckets' stream

  /// Runs `place` and makes the per-bucket events, the non-finite counters, the norm slots and
  /// the pinned read-back buffers, while gsync holds no stream on the device (waiting at most `timeout`).
  void allocate(std::chrono::milliseconds timeout, std::size_t tensors, std::size_t buckets, gsync::detail::function_ref<void()> place) {
    device_synchronizing("device_synchronizer::build", timeout, [&] {
      place();
      for (std::size_t b = 0; b < buckets; ++b) ready_.push_back(event());
      const std::size_t slots = std::max<std::size_t>(1, tensors);
      counters_ = static_cast<unsigned long long*>(api_.alloc_device(slots * 8));
      host_counters_ = static_cast<unsigned long long*>(api_.alloc_pinned(slots * 8));
      norm_ = static_cast<double*>(api_.alloc_device(slots * cuda::sum_squares_slots * 8));
      host_norm_ = static_cast<double*>(api_.alloc_pinned(slots * 8));
      host_scratch_ = static_cast<std::byte*>(api_.alloc_pinned(scratch_bytes));
    });
    comm_done_ = event();
    compute_done_ = event();
  }
  /// Device bucket memory, the first `bytes` zeroed on the compute stream.
  std::byte* zeroed(std::size_t bytes) {
    std::byte* p = buffer(bytes);
    api_.zero_async(p, bytes, compute_);
    return p;
  }
  /// Device bucket memory.
  std::byte* buffer(std::size_t bytes) {
    return owned_.emplace_back(static_cast<std::byte*>(api_.alloc_device(std::max<std::size_t>(1, bytes))));
  }

  /// Queues on the compute stream the cast of `t` into the wire buffer, or its copy into the bucket.
  void pack(const registered_tensor& t, const tensor_place& pl, bucket_state& bs) {
    if (bs.wire_type != bs.grad_type)
      kernels_.cast(t.ref.data, bs.grad_type, bs.wire + pl.offset * size_of(bs.wire_type), bs.wire_type, pl.count, compute_);
    else if (!t.is_view && pl.count)
      api_.copy_async(bs.storage + pl.offset * size_of(bs.grad_type), t.ref.data, pl.count * size_of(bs.grad_type),
                      cuda::copy_kind::device_to_device, compute_);
  }

  /// Makes the communication stream wait for the packing of bucket `b`, then queues its reduction
  /// there. \tparam X transport. \tparam W wire element.
  template <class X, class W>
  request launch(communicator<X>& comm, std::size_t b, W* data, std::size_t count, bool average, std::uint64_t* bytes_sent) {
    api_.record(ready_[b], compute_);
    api_.stream_wait_event(comm_stream_, ready_[b]);  // the bucket is packed
    const device_bucket_job<W> job{b, device_span<W>{data, count}, average, comm_stream_, bytes_sent};
    return reducer_.start(comm, job);
  }

  /// Makes the compute stream wait for the communication stream, queues the fused unpack of every
  /// tensor there, and waits for the non-finite counters; reports in registration order.
  void unpack(const bucket_plan& plan, const std::vector<bucket_state>& buckets, const std::vector<registered_tensor>& tensors,
              float factor, std::vector<nonfinite_report>& reports, std::chrono::milliseconds timeout) {
    api_.record(comm_done_, comm_stream_);
    api_.stream_wait_event(compute_, comm_done_);
    api_.zero_async(counters_, tensors.size() * 8, compute_);
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const bucket_state& bs = buckets[b];
      for (std::size_t i : plan.bucket(b).tensors) {
        const tensor_place& pl = plan.place(i);
        if (pl.count == 0) continue;
        kernels_.unpack_scan(bs.comm_buffer() + pl.offset * size_of(bs.wire_type), bs.wire_type, tensors[i].ref.data, bs.grad_type,
                             pl.count, factor, counters_ + i, compute_);
      }
    }
    if (!tensors.empty()) api_.copy_async(host_counters_, counters_, tensors.size() * 8, cuda::copy_kind::device_to_host, compute_);
    api_.record(compute_done_, compute_);
    cuda::detail::wait_event(api_, compute_done_, clock::now() + timeout, "the gradient unpack");
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (host_counters_[i]) reports.push_back(report(plan, tensors[i], i, host_counters_[i], timeout));
  }

  /// Waits for the communication stream (its last passes use the reducer's memory), then the compute stream.
  void drain(bool built, std::chrono::milliseconds timeout) noexcept {
    try {
      if (built) {
        api_.record(comm_done_, comm_stream_);
        cuda::detail::wait_event(api_, comm_done_, clock::now() + timeout, "the gradient collectives");
        api_.record(compute_done_, compute_);
        cuda::detail::wait_event(api_, compute_done_, clock::now() + timeout, "the gradient passes");
      }
    } catch (...) {
    }
  }

  /// Clips `tensors` by their global L2 norm on the compute stream (see
  /// device_synchronizer::clip_grad_norm); waits once for the sums of squares.
  double clip_grad_norm(const std::vector<registered_tensor>& tensors, double max_norm, std::chrono::milliseconds timeout) {
    std::size_t k = 0;  // one sum per non-empty tensor, each in its own slots, read back together
    for (const auto& t : tensors) {
      if (t.ref.count == 0) continue;
      double* out = norm_ + k * cuda::sum_squares_slots;
      kernels_.sum_squares(t.ref.data, t.ref.type, t.ref.count, out, compute_);
      api_.copy_async(host_norm_ + k, out, 8, cuda::copy_kind::device_to_host, compute_);
      ++k;
    }
    api_.record(compute_done_, compute_);
    cuda::detail::wait_event(api_, compute_done_, clock::now() + timeout, "the gradient norm");
    double total = 0;
    for (std::size_t j = 0; j < k; ++j) total += host_norm_[j];  // tensor by tensor, in registration order, as the host
    const double norm = std::sqrt(total);
    if (std::isfinite(norm) && norm > max_norm) {
      const float f = static_cast<float>(max_norm / (norm + 1e-6));
      for (const auto& t : tensors)
        if (t.ref.count) kernels_.scale(t.ref.data, t.ref.type, t.ref.count, f, compute_);
    }
    return norm;
  }

 private:
  // Runs `fn` (calls that synchronise the device: allocations, frees) while gsync holds no stream
  // on the device (cuda/stream_holds.hpp), waiting at most `limit` for that.
  template <class F>
  void device_synchronizing(const char* what, std::chrono::milliseconds limit, F&& fn) {
    cuda::detail::stream_holds::instance().exclusive(api_.current_device(), clock::now() + limit, what, fn);
  }
  cuda::event_handle event() { return events_.emplace_back(api_.create_event()); }

  // The report of tensor i (`t`) with `bad` non-finite values: its first one, read back from the
  // device through the pinned scratch made at build (piece by piece: no allocation here, which
  // would synchronise the device while other ranks' streams may wait for this one).
  nonfinite_report report(const bucket_plan& plan, const registered_tensor& t, std::size_t i, unsigned long long bad,
                          std::chrono::milliseconds timeout) {
    nonfinite_report r{plan.place(i).bucket, i, t.name, static_cast<std::size_t>(bad), 0, 0.0f};
    const std::size_t esize = size_of(t.ref.type);
    const std::size_t per = scratch_bytes / esize;
    const auto* src = static_cast<const std::byte*>(t.ref.data);
    r.first_index = t.ref.count;
    for (std::size_t first = 0; first < t.ref.count; first += per) {
      const std::size_t n = std::min(per, t.ref.count - first);
      api_.copy_async(host_scratch_, src + first * esize, n * esize, cuda::copy_kind::device_to_host, compute_);
      api_.record(compute_done_, compute_);
      cuda::detail::wait_event(api_, compute_done_, clock::now() + timeout, "reading a non-finite gradient");
      bool found = false;
      visit_grad_type(t.ref.type, [&](auto v) {
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

  cuda::runtime_api& api_;
  cuda::grad_kernels& kernels_;
  Reducer reducer_;
  cuda_stream compute_ = nullptr;
  cuda_stream comm_stream_ = nullptr;
  bool opened_ = false;
  std::vector<std::byte*> owned_;                    // device: every bucket's memory
  std::vector<cuda::event_handle> events_;           // every event made (destroyed last)
  std::vector<cuda::event_handle> ready_;            // per bucket: its packing is queued
  cuda::event_handle comm_done_ = nullptr, compute_done_ = nullptr;
  unsigned long long* counters_ = nullptr;       // device: non-finite count per tensor
  unsigned long long* host_counters_ = nullptr;  // pinned
  double* norm_ = nullptr;                       // device: sum_squares_slots
  double* host_norm_ = nullptr;                  // pinned
  static constexpr std::size_t scratch_bytes = 64 << 10;
  std::byte* host_scratch_ = nullptr;            // pinned: reading non-finite gradients back (report)
};

}  // namespace gsync::grad::detail
