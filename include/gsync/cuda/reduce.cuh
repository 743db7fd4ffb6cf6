#pragma once
/// \file
/// Elementwise reduction on the device, stream-ordered: dst = a (op) b over n elements (dst may be
/// a or b), the step every reducing schedule takes on device buffers.
///
/// How the elements move: each thread takes 16-byte packs (cuda/packs.hpp) in a grid-stride loop,
/// one 128-bit load per input and one store per pack, and combines the pack's elements with the
/// host path's own `detail::combine` (accumulating 16-bit types in float, one rounding per
/// element), so a device result is bitwise the host result. Pointers that are 16-byte aligned
/// alike start with a scalar head up to the boundary; pointers aligned differently go scalar
/// throughout (correct, slower). The grid is sized to fill every multiprocessor once (512
/// threads a block, up to 4 blocks per multiprocessor), so large ranges keep about 64 KiB of
/// loads in flight per multiprocessor.
///
/// Kernels have hidden visibility (two shared libraries that both instantiate one never share a
/// host stub, CCCL's rule); every CUDA call is checked (cuda/runtime.hpp).

#if !defined(__CUDACC__)
#error "gsync/cuda/reduce.cuh holds CUDA kernels: compile this file with nvcc (or clang in CUDA mode)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "gsync/core/reduce.hpp"
#include "gsync/cuda/packs.hpp"
#include "gsync/cuda/launch.cuh"
#include "gsync/cuda/runtime.hpp"

namespace gsync::cuda {

namespace detail {

/// Threads per block of the elementwise kernels.
inline constexpr int block_threads = 512;

/// dst = a (op) b, one worker of `reduce_share` (cuda/packs.hpp) per thread.
template <bool Final, class T, class Op>
__global__ __launch_bounds__(block_threads) __attribute__((visibility("hidden"))) void reduce_kernel(T* dst, const T* a, const T* b, std::size_t n,
                                                                    split_plan s, Op op, int world) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  reduce_share<Final>(dst, a, b, n, s, op, world, tid, stride);
}

/// Blocks for `work` units of one thread each: enough to cover them, at most 4 per multiprocessor.
inline unsigned grid_for(std::size_t work) {
  const std::size_t want = (work + block_threads - 1) / block_threads;
  const std::size_t cap = static_cast<std::size_t>(std::max(1, multiprocessors())) * 4;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(want, cap)));
}

}  // namespace detail

/// Enqueues dst[i] = a[i] (op) b[i] for i < n on `stream` (then `op.finalize(., world)` when
/// `Final`); dst may equal a or b. Device pointers of the current device. Throws `errc::cuda`
/// when the launch fails.
/// \tparam Final apply the operator's finalize (the last reduction step). \tparam T element type.
/// \tparam Op reduction operator, callable on the device (GSYNC_HD).
template <bool Final, class T, class Op>
void reduce(T* dst, const T* a, const T* b, std::size_t n, const Op& op, int world, cudaStream_t stream) {
  if (n == 0) return;
  const void* ptrs[3] = {dst, a, b};
  const split_plan s = split(ptrs, 3, n, sizeof(T));
  const std::size_t work = std::max<std::size_t>(s.packs, n - s.packs * pack_elems<T>);
  launch("reduce kernel launch", detail::reduce_kernel<Final, T, Op>, detail::grid_for(work), detail::block_threads, stream, dst, a, b, n, s, op,
         world);
}

}  // namespace gsync::cuda
