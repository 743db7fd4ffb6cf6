#pragma once
// gsync as a torch.distributed process group (torch 1.x's c10d::ProcessGroup): every operation
// becomes one gsync submit() job on the group's communicator, issued under a lock so that calls
// from the Python thread and from autograd's (DDP's bucket hooks) keep one order; its Work wraps
// the job's request, and its future completes with the output tensors when the job has ended.
// Torch 2.x's c10d::Backend has the same operations: the class below is what a Backend subclass
// would hold.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <gsync/communicator.hpp>

#include "step_meter.hpp"
#include "work.hpp"

namespace gsync_torch {

/// Counters of the group's traffic and its efficiency figures (gsync_torch.stats).
struct group_stats {
  std::uint64_t ops = 0;            ///< operations issued
  double busy_seconds = 0;          ///< sum of the operations' run times (engine thread)
  gsync::grad::running_stats steps;  ///< the steps marked since the last reset (step_meter.hpp)
};

class process_group final : public c10d::ProcessGroup {
 public:
  /// Joins rank `rank` of `size` through `store` (c10d's), with `timeout` for every operation.
  process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~process_group() override;

  const std::string getBackendName() const override { return "gsync"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  /// The group's counters so far.
  group_stats stats() const;
  /// Ends a training step now (gsync_torch.step()).
  void step() { meter_->step(); }
  /// The figures count from now.
  void reset_stats() { meter_->reset(); }
  /// Logs the figures at GSYNC_DEBUG=INFO (as the group goes).
  void report() const noexcept;
  /// The communicator (for tests and the statistics).
  gsync::tcp_communicator& communicator() { return *comm_; }

 private:
  /// Issues `job(comm)` as one submit() job (with `timeout` when set) and returns its Work, whose
  /// result and future value are `outputs`.
  /// `source`: where a receive writes its sender's rank (Work.source_rank()), else null.
  template <class Job>
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout, Job job,
                                         std::shared_ptr<int> source = nullptr);

  std::optional<gsync::tcp_communicator> comm_;  // reset first in the destructor, without the GIL
  std::mutex issue_;
  std::shared_ptr<completer> completer_;
  std::shared_ptr<step_meter> meter_;  // operations, run times, steps
};

/// The creator torch.distributed calls for every group of backend "gsync".
c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              const std::chrono::duration<float>& timeout);

}  // namespace gsync_torch
