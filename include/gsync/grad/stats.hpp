#pragma once
/// \file
/// Per-step statistics of gradient synchronization, and a running summary over many steps.
///
/// Definitions (all per rank):
/// - `bytes_on_wire`: payload bytes this rank sent for the step's collectives (frame headers excluded),
///   as reported by the bucket reducer. The plain allreduce reducer counts them on transports that
///   count (`counting_transport`: TCP with shared memory, in-process), else reports the volume of the
///   algorithm the library picks for that bucket (`allreduce_bytes_sent` in grad/bucket_reducer.hpp); the
///   compression reducers report what their schedules send (checked against a counting transport).
/// - `payload_bytes`: bytes of the buffers handed to the collectives (the fused buckets, in wire type).
/// - `comm_time`: time the progress engine spent running the step's collectives (sum over buckets of
///   finished_at - started_at; they run one after another, so this is the engine's busy time).
/// - `exposed_time`: time the caller spent blocked inside finish() waiting for collectives, i.e. the
///   part of communication that did not overlap with the caller's computation.
/// - `step_time`: from the start of the step (the previous finish() returning, or begin_step()) to the
///   end of this finish().
/// - `comm_ratio()` = exposed_time / step_time: the fraction of the step lost to communication.
/// - `speedup(N)` = N x (1 - comm_ratio()): the speedup of N workers over one that the figures imply
///   under weak scaling (every worker computes per step what one worker alone would, so one worker
///   alone would take the step minus its exposed communication); `speedup(N) / N` is the scaling
///   efficiency. It leaves out what communication costs besides waiting (the engine thread's
///   processor time, memory bandwidth), so a measured speedup can only be lower.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace gsync::grad {

/// Statistics of one step (one finish()).
struct step_stats {
  using duration = std::chrono::duration<double>;  ///< seconds, as double
  bool synced = false;                 ///< false on accumulation steps that did not communicate
  std::size_t buckets = 0;             ///< collectives issued (one per bucket)
  std::uint64_t bytes_on_wire = 0;     ///< bytes sent by this rank (see file comment)
  std::uint64_t payload_bytes = 0;     ///< bytes of the reduced buffers
  duration comm_time{0};               ///< engine busy time for this step's collectives
  duration exposed_time{0};            ///< caller blocked in finish() waiting for them
  duration unpack_time{0};             ///< caller time in finish() unpacking (cast, scale, non-finite scan)
  duration step_time{0};               ///< whole step
  /// exposed_time / step_time (0 when step_time is 0).
  double comm_ratio() const noexcept { return step_time.count() > 0 ? exposed_time.count() / step_time.count() : 0.0; }
  /// 1 - exposed_time / comm_time: the share of communication hidden behind computation (0 when none ran).
  double overlap() const noexcept {
    return comm_time.count() > 0 ? 1.0 - std::min(1.0, exposed_time.count() / comm_time.count()) : 0.0;
  }
};

/// Totals over many steps.
class running_stats {
 public:
  /// Adds one step.
  void add(const step_stats& s) noexcept {
    ++steps_;
    if (s.synced) ++synced_;
    bytes_ += s.bytes_on_wire;
    payload_ += s.payload_bytes;
    comm_ += s.comm_time;
    exposed_ += s.exposed_time;
    step_ += s.step_time;
  }
  std::uint64_t steps() const noexcept { return steps_; }                  ///< steps added
  std::uint64_t synced_steps() const noexcept { return synced_; }          ///< steps that communicated
  std::uint64_t bytes_on_wire() const noexcept { return bytes_; }          ///< total bytes sent
  std::uint64_t payload_bytes() const noexcept { return payload_; }        ///< total bytes reduced
  step_stats::duration comm_time() const noexcept { return comm_; }        ///< total engine busy time
  step_stats::duration exposed_time() const noexcept { return exposed_; }  ///< total exposed time
  step_stats::duration step_time() const noexcept { return step_; }        ///< total step time
  /// Total exposed time / total step time.
  double comm_ratio() const noexcept { return step_.count() > 0 ? exposed_.count() / step_.count() : 0.0; }
  /// The speedup of `workers` workers over one under weak scaling: workers x (1 - comm_ratio())
  /// (see the file comment); 0 before any step.
  double speedup(int workers) const noexcept { return steps_ > 0 ? workers * (1.0 - comm_ratio()) : 0.0; }
  /// Share of the communication engine time hidden behind computation: 1 - exposed / comm (0 when none ran).
  double overlap() const noexcept { return comm_.count() > 0 ? 1.0 - std::min(1.0, exposed_.count() / comm_.count()) : 0.0; }
  /// Mean step time in milliseconds.
  double mean_step_ms() const noexcept { return steps_ > 0 ? 1e3 * step_.count() / static_cast<double>(steps_) : 0.0; }

 private:
  std::uint64_t steps_ = 0, synced_ = 0, bytes_ = 0, payload_ = 0;
  step_stats::duration comm_{0}, exposed_{0}, step_{0};
};

}  // namespace gsync::grad
