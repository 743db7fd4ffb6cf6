#pragma once
/// \file
/// Blockwise int8 quantization on the device, with error feedback: the kernels of the int8
/// compressor (grad/quantize.hpp says the format), each element computed by the host pass's own
/// functions (`quantize_nearest_one`, `residual_one`, ...), so the scales, levels and residuals
/// are the host's bit for bit.
///
/// How the elements move: one thread block per quantization block (grid-stride over blocks).
/// `encode` reads the block once to form e = r + g (stored back into the residual) and its largest
/// |e| (a warp max, then one shared-memory atomic per warp), derives the scale, then reads e again
/// (from L1/L2: a block is a few KiB) to write the levels and the new residual e - D(q).
/// `decode` is elementwise, grid-stride.

#if !defined(__CUDACC__)
#error "gsync/grad/quantize.cuh holds CUDA kernels: compile this file with nvcc (or clang in CUDA mode)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gsync/cuda/reduce.cuh"
#include "gsync/cuda/launch.cuh"
#include "gsync/cuda/runtime.hpp"
#include "gsync/grad/quantize.hpp"

namespace gsync::cuda {

namespace detail {

/// Threads per block of the encode kernel.
inline constexpr int encode_threads = 256;
static_assert(encode_threads % 32 == 0, "the encoder's max runs over whole 32-thread warps (__shfl_xor_sync with a full mask)");

template <bool Residual>
__global__ __launch_bounds__(encode_threads) __attribute__((visibility("hidden"))) void int8_encode_kernel(const float* g, float* r, std::size_t count,
                                                                         std::size_t block, bool stochastic,
                                                                         grad::counter_rng rng, std::uint64_t first,
                                                                         float* scales, std::int8_t* q) {
  __shared__ unsigned int block_max;
  for (std::size_t blk = blockIdx.x; blk * block < count; blk += gridDim.x) {
    const std::size_t off = blk * block, len = count - off < block ? count - off : block;
    if (threadIdx.x == 0) block_max = 0;
    __syncthreads();
    unsigned int m = 0;
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      float e = g[off + i];
      if constexpr (Residual) {
        e = grad::detail::add_rn(r[off + i], e);  // e = r + g, as the host's e[i] += g[i]
        r[off + i] = e;
      }
      const unsigned int a = grad::detail::abs_bits(e);
      m = a > m ? a : m;
    }
    for (int d = 16; d > 0; d >>= 1) {
      const unsigned int o = __shfl_xor_sync(0xffffffffu, m, d);
      m = o > m ? o : m;
    }
    if ((threadIdx.x & 31) == 0) atomicMax(&block_max, m);
    __syncthreads();
    const grad::block_scale s = grad::detail::scale_from_bits(block_max);
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float x = Residual ? r[off + i] : g[off + i];
      std::int8_t k = 0;
      if (s.finite)
        k = stochastic ? grad::detail::quantize_stochastic_one(x, s.inverse, rng.uniform(first + off + i))
                       : grad::detail::quantize_nearest_one(x, s.inverse);
      q[off + i] = k;
      if constexpr (Residual) r[off + i] = s.finite ? grad::detail::residual_one(x, k, s.scale) : 0.0f;
    }
    if (threadIdx.x == 0) scales[blk] = s.scale;
    __syncthreads();  // every thread has read block_max before it is reset
  }
}

template <bool Add>
__global__ __launch_bounds__(block_threads) __attribute__((visibility("hidden"))) void int8_decode_kernel(const float* scales, const std::int8_t* q,
                                                                         std::size_t count, std::size_t block, float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float scale = scales[i / block];
    if constexpr (Add) out[i] = grad::detail::dequantize_add_one(out[i], q[i], scale);
    else out[i] = grad::detail::dequantize_one(q[i], scale);
  }
}

}  // namespace detail

/// Enqueues the int8 encoding of `count` floats `g` on `stream`, in blocks of `block` values:
/// `scales[b]` (ceil(count / block) floats) and `q[i]` (count levels), rounding `mode`, with
/// counter `first + i` for value i's random draw. With `residual` (error feedback, count floats,
/// device memory), the values encoded are e = residual + g and `residual` receives e - D(q)
/// (zero for a non-finite block). The host's `int8_encode` gives the same bits.
inline void int8_encode(const float* g, float* residual, std::size_t count, std::size_t block, grad::rounding mode,
                        grad::counter_rng rng, std::uint64_t first, float* scales, std::int8_t* q, cudaStream_t stream) {
  if (count == 0) return;
  if (block == 0) throw error(errc::invalid_argument, "cuda::int8_encode: block size 0");
  const std::size_t blocks = (count + block - 1) / block;
  const unsigned grid = static_cast<unsigned>(std::min<std::size_t>(blocks, static_cast<std::size_t>(std::max(1, multiprocessors())) * 16));
  const bool stochastic = mode == grad::rounding::stochastic;
  if (residual)
    launch("int8 encode kernel launch", detail::int8_encode_kernel<true>, grid, detail::encode_threads, stream, g, residual, count, block,
           stochastic, rng, first, scales, q);
  else
    launch("int8 encode kernel launch", detail::int8_encode_kernel<false>, grid, detail::encode_threads, stream, g, static_cast<float*>(nullptr),
           count, block, stochastic, rng, first, scales, q);
}

/// Enqueues out[i] = q[i] * scales[i / block] (or out[i] += that, with `add`) for i < count.
inline void int8_decode(const float* scales, const std::int8_t* q, std::size_t count, std::size_t block, float* out, bool add,
                        cudaStream_t stream) {
  if (count == 0) return;
  if (block == 0) throw error(errc::invalid_argument, "cuda::int8_decode: block size 0");
  const unsigned grid = detail::grid_for(count);
  if (add) launch("int8 decode kernel launch", detail::int8_decode_kernel<true>, grid, detail::block_threads, stream, scales, q, count, block, out);
  else launch("int8 decode kernel launch", detail::int8_decode_kernel<false>, grid, detail::block_threads, stream, scales, q, count, block, out);
}

}  // namespace gsync::cuda
