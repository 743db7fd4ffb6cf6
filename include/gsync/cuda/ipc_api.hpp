#pragma once
/// \file
/// `cuda::ipc_kernels`: the one element pass of the CUDA IPC collectives (cuda/ipc_schedule.hpp):
/// reduce the same range of up to `max_ipc_ranks` device buffers (the ranks' arenas, some mapped
/// from other processes) into one, in rank order, with the element type and the operator named at
/// run time, so that the schedule is plain C++ tested on machines without a GPU.
///
/// The real implementation is `cuda/ipc_kernels.cuh`, installed by every `.cu` file that includes
/// gsync's collectives (detail/device_collective.hpp includes it under nvcc); tests install a host
/// stand-in (tests/support/fake_cuda.hpp). Without one installed, device collectives keep to host
/// staging and say so at GSYNC_DEBUG=INFO. This header includes no CUDA header.

#include <atomic>
#include <cstddef>
#include <optional>
#include <type_traits>

#include "gsync/core/dtype.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/device_span.hpp"

namespace gsync::cuda {

/// The most ranks one CUDA IPC group holds (sources of one reduction kernel). A host with more
/// ranks keeps its device collectives on host staging.
inline constexpr int max_ipc_ranks = 32;

/// The reduction operators the IPC kernels implement (gsync's built-in ones).
enum class ipc_op : std::uint8_t { sum, prod, min, max, avg };

/// The IPC operator of `Op`, or none (a user functor: such device collectives stay on host staging).
/// \tparam Op reduction operator.
template <class Op>
constexpr std::optional<ipc_op> ipc_op_of() noexcept {
  if constexpr (std::is_same_v<Op, op::sum>) return ipc_op::sum;
  else if constexpr (std::is_same_v<Op, op::prod>) return ipc_op::prod;
  else if constexpr (std::is_same_v<Op, op::min>) return ipc_op::min;
  else if constexpr (std::is_same_v<Op, op::max>) return ipc_op::max;
  else if constexpr (std::is_same_v<Op, op::avg>) return ipc_op::avg;
  else return std::nullopt;
}

/// Device pointers to the sources of one reduction, in rank order.
struct ipc_sources {
  const void* p[max_ipc_ranks] = {};  ///< first element of each source
  int n = 0;                          ///< number of sources (1..max_ipc_ranks)
};

/// The IPC collectives' element pass.
class ipc_kernels {
 public:
  virtual ~ipc_kernels() = default;
  /// Queues on `s`: dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i] for i < count, combined
  /// in that order (so every rank computing it gets the same bits); 16-bit floats are combined in
  /// float32 and rounded once. `avg` divides the sum by `src.n` as `op::avg::finalize` does. `dst`
  /// may equal one of the sources. Reads nothing, and writes nothing, when `*cancel` (a word of
  /// mapped host memory, read through `runtime_api::device_view`) is not 0 as the kernel starts:
  /// after a failure, a stream let go past its waits must not touch a dead peer's memory.
  virtual void reduce(const ipc_sources& src, void* dst, std::size_t count, dtype t, ipc_op op, cuda_stream s,
                      const std::uint64_t* cancel) = 0;
  /// Queues on `s` a copy of `bytes` bytes from `src` (a peer's arena) to `dst`, skipped, as
  /// `reduce`, when `*cancel` is not 0 as it starts.
  virtual void copy(void* dst, const void* src, std::size_t bytes, cuda_stream s, const std::uint64_t* cancel) = 0;
};

namespace detail {
inline std::atomic<ipc_kernels*>& ipc_kernels_slot() noexcept {
  static std::atomic<ipc_kernels*> slot{nullptr};
  return slot;
}
}  // namespace detail

/// Installs `k` as the IPC kernels of later device collectives; returns the previous ones.
inline ipc_kernels* set_ipc_kernels(ipc_kernels* k) noexcept { return detail::ipc_kernels_slot().exchange(k); }

/// The installed IPC kernels, or null (device collectives then use host staging).
inline ipc_kernels* installed_ipc_kernels() noexcept { return detail::ipc_kernels_slot().load(std::memory_order_acquire); }

}  // namespace gsync::cuda
