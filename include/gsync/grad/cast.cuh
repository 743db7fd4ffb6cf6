#pragma once
/// \file
/// The gradient layer's element passes on the device, stream-ordered, each element computed by
/// the host pass's own function (grad/nonfinite.hpp), so both give the same bits:
/// - `cast_into`: the wire cast, dst[i] = To(src[i]) between float, bfloat16 and half (one
///   round-to-nearest-even when narrowing; Inf and NaN kept, overflow to Inf);
/// - `unpack_scan`: the fused unpack, dst[i] = To(float(src[i]) * factor), counting the stored
///   values that are non-finite into a device counter (added to, so several calls can share it).
///
/// How the elements move: each thread takes steps of 16 bytes of the narrower type (for float to
/// bfloat16, 8 elements: two 128-bit loads, one 128-bit store; cuda/packs.hpp), grid-stride, when
/// both pointers are 16-byte aligned; otherwise element by element. Non-finite values are rare:
/// a thread that saw some adds its count with one atomic, the others add nothing.

#if !defined(__CUDACC__)
#error "gsync/grad/cast.cuh holds CUDA kernels: compile this file with nvcc (or clang in CUDA mode)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "gsync/cuda/packs.hpp"
#include "gsync/cuda/reduce.cuh"
#include "gsync/cuda/launch.cuh"
#include "gsync/cuda/runtime.hpp"
#include "gsync/grad/nonfinite.hpp"

namespace gsync::cuda {

namespace detail {

template <class From, class To>
__global__ __launch_bounds__(block_threads) __attribute__((visibility("hidden"))) void cast_kernel(const From* src, To* dst, std::size_t n, std::size_t steps) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  map_share(dst, src, n, steps, [](From v) { return grad::detail::from_f<To>(grad::detail::to_f(v)); }, tid, stride);
}

template <class From, class To>
__global__ __launch_bounds__(block_threads) __attribute__((visibility("hidden"))) void unpack_kernel(const From* src, To* dst, std::size_t n, std::size_t steps,
                                                                    float factor, unsigned long long* nonfinite) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned bad = 0;
  map_share(dst, src, n, steps,
            [&](From v) {
              const To r = grad::detail::unpack_one<From, To>(v, factor);
              bad += grad::detail::nonfinite_bit(grad::detail::to_f(r));
              return r;
            },
            tid, stride);
  if (bad) atomicAdd(nonfinite, static_cast<unsigned long long>(bad));
}

}  // namespace detail

/// Enqueues dst[i] = To(src[i]) for i < n on `stream` (the host `grad::cast_into`'s bits).
/// \tparam From, To float, bfloat16 or half.
template <class From, class To>
void cast_into(const From* src, To* dst, std::size_t n, cudaStream_t stream) {
  static_assert(grad::is_grad_element_v<From> && grad::is_grad_element_v<To>, "cast_into: float, bfloat16 or half only");
  if (n == 0) return;
  constexpr std::size_t G = step_elems<From, To>;
  const std::size_t steps = map_steps(dst, src, n, G);
  launch("cast kernel launch", detail::cast_kernel<From, To>, detail::grid_for(std::max(steps, n - steps * G)), detail::block_threads, stream,
         src, dst, n, steps);
}

/// Enqueues dst[i] = To(float(src[i]) * factor) for i < n on `stream`, adding the number of
/// non-finite stored values to `*nonfinite` (device memory; the host `grad::unpack_scan`'s bits
/// and count). `src` and `dst` may be the same array when From and To are the same type.
template <class From, class To>
void unpack_scan(const From* src, To* dst, std::size_t n, float factor, unsigned long long* nonfinite, cudaStream_t stream) {
  static_assert(grad::is_grad_element_v<From> && grad::is_grad_element_v<To>, "unpack_scan: float, bfloat16 or half only");
  if (n == 0) return;
  constexpr std::size_t G = step_elems<From, To>;
  const std::size_t steps = map_steps(dst, src, n, G);
  launch("unpack kernel launch", detail::unpack_kernel<From, To>, detail::grid_for(std::max(steps, n - steps * G)), detail::block_threads,
         stream, src, dst, n, steps, factor, nonfinite);
}

}  // namespace gsync::cuda
