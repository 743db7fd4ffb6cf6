#pragma once
/// \file
/// The CUDA implementation of `cuda::ipc_kernels` (cuda/ipc_api.hpp), installed when this header
/// is included (dispatch/device_collective.hpp includes it under nvcc, so every `.cu` file that
/// includes gsync's collectives brings it). One kernel per element type; the operator is a
/// kernel argument (one branch per launch, taken alike by every thread). Each thread runs the
/// element engine of cuda/ipc_reduce.hpp over 16-byte packs in a grid-stride loop, reading the
/// peers' arenas through their mapped pointers; the grid fills every multiprocessor once.

#if !defined(__CUDACC__)
#error "gsync/cuda/ipc_kernels.cuh holds CUDA kernels: compile this file with nvcc (or clang in CUDA mode)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gsync/cuda/ipc_api.hpp"
#include "gsync/cuda/ipc_reduce.hpp"
#include "gsync/cuda/launch.cuh"
#include "gsync/cuda/runtime.hpp"

namespace gsync::cuda {

namespace detail {

/// dst = reduction of the sources, one worker of `ipc_reduce_share` per thread.
/// True in every thread of the block when the group was cancelled (one read of host memory per block).
__device__ inline bool ipc_cancelled(const std::uint64_t* cancel) {
  __shared__ int stop;
  if (threadIdx.x == 0) stop = cancel && *static_cast<const volatile std::uint64_t*>(cancel) != 0;
  __syncthreads();
  return stop != 0;
}

template <class T>
__global__ __launch_bounds__(512) __attribute__((visibility("hidden"))) void ipc_reduce_kernel(ipc_sources src, T* dst, std::size_t n, split_plan s,
                                                                        ipc_op op, const std::uint64_t* cancel) {
  if (ipc_cancelled(cancel)) return;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  ipc_reduce_any<T>(src, dst, n, s, op, tid, stride);
}

/// dst = reduction of the sources under the user's operator, finalized when `Finalize`: the
/// kernel of `ipc_user_reduction` (below), instantiated in the .cu file that calls the collective.
template <class T, class Op, bool Finalize>
__global__ __launch_bounds__(512) __attribute__((visibility("hidden"))) void ipc_user_reduce_kernel(ipc_sources src, T* dst, std::size_t n,
                                                                                                 split_plan s, Op op,
                                                                                                 const std::uint64_t* cancel) {
  if (ipc_cancelled(cancel)) return;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  if constexpr (Finalize) ipc_reduce_share<T>(src, dst, n, s, op, tid, stride);
  else ipc_reduce_share<T>(src, dst, n, s, combine_only<Op>{op}, tid, stride);
}

/// dst = src, 16 bytes per thread and step where both are 16-byte aligned, else byte by byte.
__global__ __launch_bounds__(512) __attribute__((visibility("hidden"))) void ipc_copy_kernel(unsigned char* dst, const unsigned char* src, std::size_t n,
                                                                      const std::uint64_t* cancel) {
  if (ipc_cancelled(cancel)) return;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const bool packs = ((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) & 15) == 0;
  const std::size_t n16 = packs ? n / 16 : 0;
  for (std::size_t i = tid; i < n16; i += stride) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (std::size_t i = n16 * 16 + tid; i < n; i += stride) dst[i] = src[i];
}

/// Blocks for `work` units: enough to cover them, at most 4 per multiprocessor of 512 threads.
inline unsigned ipc_grid_for(std::size_t work) {
  const std::size_t want = (work + 511) / 512;
  const std::size_t cap = static_cast<std::size_t>(std::max(1, multiprocessors())) * 4;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(want, cap)));
}

}  // namespace detail

/// The IPC reduction kernels.
class cuda_ipc_kernels final : public ipc_kernels {
 public:
  /// The process's instance.
  static cuda_ipc_kernels& instance() noexcept {
    static cuda_ipc_kernels k;
    return k;
  }
  void reduce(const ipc_sources& src, void* dst, std::size_t count, dtype t, ipc_op op, cuda_stream s,
              const std::uint64_t* cancel) override {
    if (count == 0) return;
    visit_dtype(t, [&](auto v) {
      using T = decltype(v);
      T* d = static_cast<T*>(dst);
      const split_plan sp = ipc_split(src, d, count);
      const std::size_t work = std::max<std::size_t>(sp.packs, count - sp.packs * pack_elems<T>);
      launch("IPC reduce kernel launch", detail::ipc_reduce_kernel<T>, detail::ipc_grid_for(work), 512, s, src, d, count, sp, op, cancel);
    });
  }
  void copy(void* dst, const void* src, std::size_t bytes, cuda_stream s, const std::uint64_t* cancel) override {
    if (bytes == 0) return;
    launch("IPC copy kernel launch", detail::ipc_copy_kernel, detail::ipc_grid_for((bytes + 15) / 16), 512, s, static_cast<unsigned char*>(dst),
           static_cast<const unsigned char*>(src), bytes, cancel);
  }
};

inline namespace GSYNC_TU_NS {

/// The IPC reduction of a user operator (cuda/ipc_api.hpp): its kernel, with the operator inlined,
/// is compiled in the .cu file that includes this header, so the operator runs on the GPU.
/// Only for trivially copyable operators (a kernel takes the operator by value); others stay on
/// host staging.
template <class T, class Op>
  requires(!ipc_op_of<Op>().has_value() && std::is_trivially_copyable_v<Op>)
struct ipc_user_reduction<T, Op> {
  /// Queues the reduction (see `ipc_user_reduction` in cuda/ipc_api.hpp).
  static void queue(const void* op, const ipc_sources& src, void* dst, std::size_t count, bool finalize, cuda_stream s,
                    const std::uint64_t* cancel) {
    if (count == 0) return;
    T* d = static_cast<T*>(dst);
    const split_plan sp = ipc_split(src, d, count);
    const unsigned grid = detail::ipc_grid_for(std::max<std::size_t>(sp.packs, count - sp.packs * pack_elems<T>));
    const Op& o = *static_cast<const Op*>(op);
    if (finalize) launch("IPC reduce kernel launch (user operator)", detail::ipc_user_reduce_kernel<T, Op, true>, grid, 512, s, src, d, count, sp, o, cancel);
    else launch("IPC reduce kernel launch (user operator)", detail::ipc_user_reduce_kernel<T, Op, false>, grid, 512, s, src, d, count, sp, o, cancel);
  }
};

}  // namespace GSYNC_TU_NS

namespace detail {
/// Installs the CUDA IPC kernels once per program, unless some are installed already.
inline const bool cuda_ipc_kernels_installed = [] {
  ipc_kernels* none = nullptr;
  ipc_kernels_slot().compare_exchange_strong(none, &cuda_ipc_kernels::instance());
  return true;
}();
}  // namespace detail

}  // namespace gsync::cuda
