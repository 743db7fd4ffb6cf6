#pragma once
/// \file
/// The bucket reducer seam of the gradient synchronizer (grad/synchronizer.hpp): what a reducer is
/// handed (`bucket_job`), what it must do (`bucket_reducer`), and the default reducer, one allreduce
/// per bucket (`allreduce_reducer`, with `allreduce_bytes_sent` for the bytes it reports). Compression
/// plugs in here.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>

#include "gsync/algo/ring.hpp"
#include "gsync/algo/select.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/async.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/half.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/grad/wide_accumulation.hpp"

namespace gsync::grad {

/// One bucket handed to a reducer.
/// \tparam W wire element type (float, gsync::bfloat16 or gsync::half).
template <class W>
struct bucket_job {
  std::size_t bucket = 0;             ///< bucket index (plan order; identical on every rank)
  std::span<W> data;                  ///< the fused bucket; reduce it in place over all ranks
  bool average = true;                ///< true: the result is the average over ranks, false: the sum
  /// Where the reducer stores the bytes this rank sends for this bucket. It may be written by the
  /// progress engine; the synchronizer reads it only after the request finished.
  std::uint64_t* bytes_sent = nullptr;
};

/// A bucket reducer: `r.start(comm, job)` issues the reduction of `job.data` over all ranks of `comm`
/// (every rank calls it for the same buckets in the same order) and returns the request that finishes
/// when `job.data` holds the result on this rank; it stores the bytes it sends in `*job.bytes_sent`
/// (at the latest when the request finishes). A compression policy plugs in here:
/// `grad::compressed_reducer<P>` (grad/compressed_reducer.hpp) reduces every bucket with policy P.
/// \tparam R the reducer type. \tparam X the communicator's transport.
template <class R, class X>
concept bucket_reducer = transport_policy<X> && requires(R& r, communicator<X>& c, const bucket_job<float>& jf,
                                                         const bucket_job<bfloat16>& jb, const bucket_job<half>& jh) {
  { r.start(c, jf) } -> std::same_as<request>;
  { r.start(c, jb) } -> std::same_as<request>;
  { r.start(c, jh) } -> std::same_as<request>;
};

/// Bytes one rank sends, averaged over the ranks, when allreduce algorithm `id` reduces `bytes`
/// over `world` ranks: the algorithm's own formula (`allreduce_bytes_sent` in its file,
/// algo/select.hpp `bytes_sent`).
inline double allreduce_bytes_sent(algo::allreduce_id id, std::size_t bytes, int world) noexcept {
  return algo::bytes_sent(id, bytes, world);
}

/// The default reducer: one allreduce (op::avg or op::sum) per bucket on the communicator's progress
/// engine, algorithm chosen by the library; 16-bit buckets with float32 accumulation across ranks
/// (`allreduce_wide`, grad/wide_accumulation.hpp: one rounding per element, not one per hop).
/// Reports the payload bytes this rank sent, counted by the transport where it counts
/// (`counting_transport`: TCP/shared memory and in-process do), else the bytes the chosen
/// algorithm sends per rank (`allreduce_bytes_sent`; 2 (N-1)/N of the bucket for 16-bit ones).
struct allreduce_reducer {
  /// Issues the allreduce of `job.data`. \tparam X transport. \tparam W wire element type.
  template <transport_policy X, class W>
  request start(communicator<X>& comm, const bucket_job<W>& job) {
    constexpr bool wide = !std::is_same_v<W, float>;
    auto reduce = [data = job.data, average = job.average, scratch = scratch_](communicator<X>& c) {
      if constexpr (wide) allreduce_wide(c, data, average, *scratch);
      else if (average) allreduce(c, data, op::avg{});
      else allreduce(c, data, op::sum{});
    };
    if constexpr (counting_transport<X>) {
      return submit(comm, [reduce, out = job.bytes_sent](communicator<X>& c) mutable {
        const std::uint64_t before = c.transport().payload_bytes_posted();
        reduce(c);
        *out = c.transport().payload_bytes_posted() - before;
      });
    }
    const std::size_t bytes = job.data.size_bytes();
    if constexpr (wide) {
      *job.bytes_sent = static_cast<std::uint64_t>(algo::ring::allreduce_bytes_sent(world_shape(bytes, comm.size())) + 0.5);
    } else {
      const auto ch = algo::choose_allreduce(bytes, comm.size(), local_costs_of(comm.transport()), comm.settings().algo,
                                             &comm.placement(), nullptr, comm.segment_bytes());
      *job.bytes_sent = static_cast<std::uint64_t>(allreduce_bytes_sent(ch.id, bytes, comm.size()) + 0.5);
    }
    return submit(comm, reduce);
  }

 private:
  // 16-bit buckets' scratch: used by one job at a time (the engine runs them in order)
  std::shared_ptr<wide_scratch> scratch_ = std::make_shared<wide_scratch>();
};

}  // namespace gsync::grad
