#pragma once
/// \file
/// The bucket reducer seam of the device synchronizer (grad/device_synchronizer.hpp), as
/// grad/bucket_reducer.hpp is the host synchronizer's: what a reducer is handed
/// (`device_bucket_job`), what it must do (`device_bucket_reducer`), the default reducer (one
/// stream-ordered allreduce per bucket) and compression (`device_compressed_reducer<P>`):
/// \code
///   gsync::grad::compress::int8 p;                                      // error feedback on
///   gsync::grad::device_synchronizer sync(comm, opt, gsync::grad::device_compressed_reducer{p}, compute);
/// \endcode
///
/// How a compressed bucket moves (n floats, N ranks, this rank r), all ordered on the
/// synchronizer's communication stream:
///   int8     the GPU encodes the bucket into N records (record j = chunk j, the layout and
///            worker stream of grad/int8_exchange.hpp, with the error-feedback residual kept in
///            device memory); the records (~n bytes, not 4n) are copied to pinned host memory and
///            exchanged there (`int8_records_run`: each chunk to its owner, the owner sums in float32,
///            divides by N, adds its own residual (host memory) and re-quantizes, and sends the
///            record to every rank); the N reduced records are copied back and the GPU decodes them
///            into the bucket. PCIe carries about a quarter of a float32 bucket each way.
///   others   (topk, fp16, bf16, none and user policies) the bucket is copied to pinned host
///            memory, reduced there by the host `compressed_allreduce` with the policy's state in
///            host memory, and copied back: the host path on the same bytes.
/// Either way the result equals the host synchronizer's with `compressed_reducer<P>` bit for bit
/// (the GPU's int8 kernels compute every element with the host encoder's functions). A bucket
/// moves as one staged operation whatever GSYNC_CUDA_STAGING_BYTES says (its state is per
/// bucket): the pinned mirror grows to the largest bucket.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/algo/ring.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/half.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/grad/device_api.hpp"
#include "gsync/cuda/staging.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/dispatch/device_collective.hpp"
#include "gsync/device_span.hpp"
#include "gsync/grad/compressed_allreduce.hpp"
#include "gsync/grad/compression.hpp"
#include "gsync/grad/int8_exchange.hpp"
#include "gsync/grad/wide_accumulation.hpp"

namespace gsync::grad {

/// One device bucket handed to a reducer.
/// \tparam W wire element type (float, gsync::bfloat16 or gsync::half).
template <class W>
struct device_bucket_job {
  std::size_t bucket = 0;        ///< bucket index (plan order; identical on every rank)
  device_span<W> data;           ///< the fused bucket in device memory; reduce it in place over all ranks
  bool average = true;           ///< true: the result is the average over ranks, false: the sum
  cuda_stream stream = nullptr;  ///< queue the work on this stream (the bucket is packed before it)
  /// Where the reducer stores the bytes this rank sends for this bucket (read after the request).
  std::uint64_t* bytes_sent = nullptr;
};

/// A device bucket reducer: `r.start(comm, job)` queues the reduction of `job.data` over all ranks
/// on `job.stream` (every rank calls it for the same buckets in the same order) and returns the
/// request whose end (with any error) the synchronizer waits for; later work on `job.stream` sees
/// the result. It stores the bytes it sends in `*job.bytes_sent` by the time the request ends.
/// \tparam R the reducer type. \tparam X the communicator's transport.
template <class R, class X>
concept device_bucket_reducer = transport_policy<X> && requires(R& r, communicator<X>& c, const device_bucket_job<float>& jf,
                                                                const device_bucket_job<bfloat16>& jb,
                                                                const device_bucket_job<half>& jh) {
  { r.start(c, jf) } -> std::same_as<request>;
  { r.start(c, jb) } -> std::same_as<request>;
  { r.start(c, jh) } -> std::same_as<request>;
};

namespace detail {
/// Queues on `s` the float32-accumulated allreduce (allreduce_wide) of 16-bit device `data`,
/// through host staging; returns its request.
template <class X, class W>
request allreduce_wide_device(communicator<X>& comm, W* data, std::size_t count, bool average, cuda_stream s,
                              std::shared_ptr<wide_scratch> scratch) {
  cuda::detail::staged_plan plan{gsync::detail::staged(data, 1, count, true, false), gsync::detail::staged(data, 1, count, false, true),
                                 true};
  plan.cut(comm.settings().cuda_staging_bytes);
  return gsync::detail::staged_launch(comm, "allreduce", s, plan, [&] {
    return [plan, average, scratch](communicator<X>& c, std::size_t w, std::byte* m, std::byte*) {
      gsync::detail::mirror_ready();  // allreduce_wide reads the mirror itself
      allreduce_wide(c, std::span<W>(gsync::detail::mirror_as<W>(m), plan.in.elems_of(w)), average, *scratch);
    };
  });
}

/// A staged plan that moves `in` (copied in) and `out` (copied out), `bytes` each, as one window.
inline cuda::detail::staged_plan one_window(std::byte* in, std::byte* out, std::size_t bytes, bool alias) {
  cuda::detail::staged_plan plan{gsync::detail::staged(in, 1, bytes, true, false), gsync::detail::staged(out, 1, bytes, false, true), alias};
  plan.in.window_elems = plan.out.window_elems = std::max<std::size_t>(bytes, 1);
  plan.windows = bytes ? 1 : 0;
  return plan;
}
}  // namespace detail

/// The default device reducer: one stream-ordered allreduce (op::avg or op::sum) per bucket;
/// 16-bit buckets summed in float32 across ranks (`allreduce_wide`). Reports the ring's
/// 2 (N-1)/N of the payload as the bytes sent.
struct device_allreduce_reducer {
  /// Queues the allreduce of `job.data`. \tparam X transport. \tparam W wire element type.
  template <transport_policy X, class W>
  request start(communicator<X>& comm, const device_bucket_job<W>& job) {
    *job.bytes_sent = static_cast<std::uint64_t>(algo::ring::allreduce_bytes_sent(world_shape(job.data.size_bytes(), comm.size())) + 0.5);
    if constexpr (std::is_same_v<W, float>) {
      if (job.average) return allreduce_async(comm, job.data, op::avg{}, job.stream);
      return allreduce_async(comm, job.data, op::sum{}, job.stream);
    } else {
      return detail::allreduce_wide_device(comm, job.data.data(), job.data.size(), job.average, job.stream, scratch_);
    }
  }

 private:
  std::shared_ptr<wide_scratch> scratch_ = std::make_shared<wide_scratch>();  // used by one job at a time
};

/// A device reducer running compression policy `P` on every bucket (see the file comment). Each
/// bucket keeps its policy state (residuals on the device for int8, in host memory otherwise)
/// from step to step; a bucket whose size changes starts from a fresh state. Buckets must be
/// float32 (synchronizer wire type f32): 16-bit buckets are refused with errc::invalid_argument.
/// Not copyable (it owns device memory); movable before use.
/// \tparam P a `compression_policy`.
template <compression_policy P>
class device_compressed_reducer {
 public:
  /// A reducer with the policy's default parameters.
  device_compressed_reducer() = default;
  /// A reducer with the policy's parameters `policy`.
  explicit device_compressed_reducer(P policy) : policy_(std::move(policy)) {}
  device_compressed_reducer(device_compressed_reducer&&) noexcept = default;  ///< moves the states
  device_compressed_reducer& operator=(device_compressed_reducer&&) noexcept = default;  ///< moves the states

  /// Queues the compressed allreduce of `job.data` on `job.stream` (float32 buckets only).
  /// \tparam X transport. \tparam W the bucket's element type.
  template <transport_policy X, class W>
  request start(communicator<X>& comm, const device_bucket_job<W>& job) {
    if constexpr (!std::is_same_v<W, float>) {
      throw error(errc::invalid_argument, "device_compressed_reducer<" + std::string(P::name) +
                                              ">: buckets must be float32 (synchronizer wire type f32); the policy chooses the wire encoding");
    } else {
      if (states_.size() <= job.bucket) states_.resize(job.bucket + 1);
      auto& st = states_[job.bucket];
      // The synchronizer waits for every bucket of a step before the next starts: no queued job
      // still uses a state replaced here.
      if (!st || st->host.count() != job.data.size()) st = std::make_unique<bucket_state>(policy_.make_state(job.data.size()));
      *job.bytes_sent = 0;
      if (job.data.empty()) return {};
      if constexpr (std::is_same_v<P, compress::int8>) return start_int8(comm, job, *st);
      else return start_staged(comm, job, *st);
    }
  }

  /// The policy's parameters.
  const P& policy() const noexcept { return policy_; }

 private:
  // Device memory of one bucket (int8 only): residual, this rank's records, the reduced records.
  struct device_buffers {
    cuda::runtime_api* api = nullptr;
    float* residual = nullptr;
    std::byte* sent = nullptr;
    std::byte* reduced = nullptr;
    device_buffers() = default;
    device_buffers(const device_buffers&) = delete;
    device_buffers& operator=(const device_buffers&) = delete;
    ~device_buffers() {
      if (!api) return;
      try {
        cuda::detail::stream_holds::instance().exclusive(api->current_device(), std::chrono::steady_clock::now() + std::chrono::seconds(30),
                                                         "device_compressed_reducer<int8> teardown", [&] {
                                                           api->free_device(residual);
                                                           api->free_device(sent);
                                                           api->free_device(reduced);
                                                         });
      } catch (...) {
        // leaked rather than a device wait risked
      }
    }
  };
  struct bucket_state {
    explicit bucket_state(typename P::state s) : host(std::move(s)) {}
    typename P::state host;  // the policy's state (for int8: the owner's residual and scratch)
    device_buffers dev;
    std::uint64_t step = 0;
  };

  // The host compressed_allreduce on a pinned copy of the bucket.
  template <class X>
  request start_staged(communicator<X>& comm, const device_bucket_job<float>& job, bucket_state& st) {
    const std::size_t n = job.data.size();
    auto* d = reinterpret_cast<std::byte*>(job.data.data());
    const cuda::detail::staged_plan plan = detail::one_window(d, d, n * sizeof(float), true);
    return gsync::detail::staged_launch(comm, "compressed_allreduce", job.stream, plan, [&] {
      return [n, p = &policy_, s = &st.host, average = job.average, out = job.bytes_sent](communicator<X>& c, std::size_t, std::byte* m,
                                                                                          std::byte*) {
        gsync::detail::mirror_ready();
        *out = compressed_allreduce(c, std::span<float>(gsync::detail::mirror_as<float>(m), n), *p, *s, average);
      };
    });
  }

  // Encoding and decoding on the GPU, the exchange of the records on the host.
  template <class X>
  request start_int8(communicator<X>& comm, const device_bucket_job<float>& job, bucket_state& st) {
    policy_.validate();
    const std::size_t n = job.data.size();
    const int N = comm.size();
    if (st.host.world == 0) st.host.world = N;
    if (st.host.world != N)
      throw error(errc::invalid_argument, "device_compressed_reducer<int8>: the state was first used with " + std::to_string(st.host.world) +
                                              " ranks, now with " + std::to_string(N) + " (use one reducer per communicator)");
    const int8_wire_layout L(n, N, policy_.block);
    const std::size_t all = L.record * L.world;
    cuda::runtime_api& api = cuda::current_runtime_api();
    cuda::grad_kernels& k = cuda::current_grad_kernels();
    const bool ef = policy_.error_feedback;
    if (!st.dev.api) {  // zeroed once: padding and unused scales are never written afterwards
      // cudaMalloc synchronises the device: only while gsync holds no stream there (waits for the
      // buckets in flight)
      cuda::detail::stream_holds::instance().exclusive(api.current_device(), std::chrono::steady_clock::now() + comm.issue_timeout(),
                                                       "device_compressed_reducer<int8>", [&] {
                                                         if (ef) st.dev.residual = static_cast<float*>(api.alloc_device(n * sizeof(float)));
                                                         st.dev.sent = static_cast<std::byte*>(api.alloc_device(all));
                                                         st.dev.reduced = static_cast<std::byte*>(api.alloc_device(all));
                                                       });
      st.dev.api = &api;
      gsync::detail::device_barrier(comm);  // every rank allocated before any stream waits on this bucket
      if (ef) api.zero_async(st.dev.residual, n * sizeof(float), job.stream);
      api.zero_async(st.dev.sent, all, job.stream);
      api.zero_async(st.dev.reduced, all, job.stream);
    }
    const std::uint64_t step = st.step++;
    const counter_rng worker = counter_rng::make(policy_.seed, comm.rank(), step, 0);
    const bool stochastic = policy_.round == rounding::stochastic;
    auto scales = [&](std::byte* base, std::size_t j) { return reinterpret_cast<float*>(base + j * L.record); };
    auto levels = [&](std::byte* base, std::size_t j) { return reinterpret_cast<std::int8_t*>(base + j * L.record + 4 * L.blocks); };
    float* g = job.data.data();
    for (std::size_t j = 0; j < L.world; ++j) {
      const range ch = L.chunk(j);
      k.int8_encode(g + ch.offset, ef ? st.dev.residual + ch.offset : nullptr, ch.count, L.block, stochastic, worker, ch.offset,
                    scales(st.dev.sent, j), levels(st.dev.sent, j), job.stream);
    }
    cuda::detail::staged_plan plan = detail::one_window(st.dev.sent, st.dev.reduced, all, false);
    request req = gsync::detail::staged_launch(comm, "compressed_allreduce", job.stream, plan, [&] {
      return [n, p = &policy_, s = &st.host, step, average = job.average](communicator<X>& c, std::size_t, std::byte* in, std::byte* out) {
        gsync::detail::mirror_ready();
        gsync::detail::launch(c, "compressed_allreduce", [=](communicator<X>& c2, op_ticket tk) {
          grad::detail::int8_records_run(c2, tk, reinterpret_cast<const std::uint8_t*>(in), reinterpret_cast<std::uint8_t*>(out), n, *p,
                                         *s, step, average);
        });
      };
    });
    for (std::size_t j = 0; j < L.world; ++j) {
      const range ch = L.chunk(j);
      k.int8_decode(scales(st.dev.reduced, j), levels(st.dev.reduced, j), ch.count, L.block, g + ch.offset, job.stream);
    }
    *job.bytes_sent = L.bytes_per_rank();
    return req;
  }

  P policy_{};
  std::vector<std::unique_ptr<bucket_state>> states_;  // one per bucket, in place as the vector grows
};

}  // namespace gsync::grad
