#pragma once
/// \file
/// `grad::compressed_reducer<P>`: the synchronizer's compression seam filled in. A bucket reducer
/// (`bucket_reducer`, grad/bucket_reducer.hpp) that reduces every fused bucket with compression
/// policy P (grad/compression.hpp: `compress::int8`, `topk`, `fp16`, `bf16`, or a user policy)
/// through `compressed_allreduce`, queued on the communicator's progress engine so that it overlaps
/// the backward pass like the plain reducer:
/// \code
///   grad::compress::int8 p;                                     // error feedback on by default
///   grad::synchronizer<tcp_communicator::transport_type, grad::compressed_reducer<grad::compress::int8>>
///       sync(comm, opt, grad::compressed_reducer<grad::compress::int8>{p});
/// \endcode
/// Each bucket keeps its policy state (error-feedback residuals, scratch) from step to step; a
/// bucket whose size changes (a new plan) starts from a fresh state. The buckets must be float32
/// (the synchronizer's wire type f32): the policy chooses its own wire encoding, and a 16-bit
/// bucket is refused with `errc::invalid_argument` rather than widened behind the user's back.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/async.hpp"
#include "gsync/grad/bucket_reducer.hpp"
#include "gsync/grad/compressed_allreduce.hpp"
#include "gsync/grad/compression.hpp"

namespace gsync::grad {

/// A bucket reducer running compression policy `P` on every bucket (see the file comment).
/// \tparam P a `compression_policy`.
template <compression_policy P>
class compressed_reducer {
 public:
  /// A reducer with the policy's default parameters.
  compressed_reducer() = default;
  /// A reducer with the policy's parameters `policy`.
  explicit compressed_reducer(P policy) : policy_(std::move(policy)) {}

  /// Queues the compressed allreduce of `job.data` (float32 buckets only).
  /// \tparam X transport. \tparam W the bucket's element type.
  template <transport_policy X, class W>
  request start(communicator<X>& comm, const bucket_job<W>& job) {
    if constexpr (!std::is_same_v<W, float>) {
      throw error(errc::invalid_argument, "compressed_reducer<" + std::string(P::name) +
                                              ">: buckets must be float32 (synchronizer wire type f32); the policy chooses the wire encoding");
    } else {
      if (states_.size() <= job.bucket) states_.resize(job.bucket + 1);
      auto& st = states_[job.bucket];
      // The synchronizer waits for every bucket of a step before the next starts: no queued job
      // still uses a state replaced here. unique_ptr keeps each state in place as the vector grows.
      if (!st || st->count() != job.data.size()) st = std::make_unique<typename P::state>(policy_.make_state(job.data.size()));
      return submit(comm, [this, job, s = st.get()](auto& c) {
        *job.bytes_sent = compressed_allreduce(c, job.data, policy_, *s, job.average);
      });
    }
  }

  /// The policy's parameters.
  const P& policy() const noexcept { return policy_; }

 private:
  P policy_{};
  std::vector<std::unique_ptr<typename P::state>> states_;  // one per bucket
};

}  // namespace gsync::grad
