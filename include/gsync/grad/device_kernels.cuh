#pragma once
/// \file
/// The real `cuda::grad_kernels` (grad/device_api.hpp): the gradient layer's passes on the device,
/// installed when this header is included (in one `.cu` file of the program; needs nvcc). Casts
/// and the fused unpack are grad/cast.cuh's kernels; the sum of squares runs in a fixed grid (256
/// blocks of 256 threads, each a fixed grid-stride share, a shared-memory tree, then one block
/// summing the 256 partials in order), so its bits depend on the values and n only.

#if !defined(__CUDACC__)
#error "gsync/grad/device_kernels.cuh holds CUDA kernels: compile this file with nvcc (or clang in CUDA mode)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gsync/core/exact_fp.hpp"
#include "gsync/grad/cast.cuh"
#include "gsync/grad/device_api.hpp"
#include "gsync/grad/quantize.cuh"
#include "gsync/cuda/launch.cuh"
#include "gsync/cuda/runtime.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/nonfinite.hpp"

namespace gsync::cuda {

namespace detail {

inline constexpr unsigned squares_blocks = 256, squares_threads = 256;
static_assert(sum_squares_slots == squares_blocks + 1);

template <class T>
__global__ __launch_bounds__(squares_threads) __attribute__((visibility("hidden"))) void squares_partial(const T* x, std::size_t n, double* partial) {
  __shared__ double acc[squares_threads];
  double s = 0;
  for (std::size_t i = blockIdx.x * std::size_t{squares_threads} + threadIdx.x; i < n; i += std::size_t{squares_blocks} * squares_threads) {
    const double v = gsync::detail::widen(grad::detail::to_f(x[i]));
    s = gsync::detail::rn_add(s, gsync::detail::rn_mul(v, v));  // never fused: the same bits under any --fmad
  }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = squares_threads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) acc[threadIdx.x] = gsync::detail::rn_add(acc[threadIdx.x], acc[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}

template <int = 0>  // a template, so that every file including this header may define it
__global__ __launch_bounds__(squares_blocks) __attribute__((visibility("hidden"))) void squares_final(const double* partial, double* out) {
  __shared__ double acc[squares_blocks];
  acc[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (unsigned w = squares_blocks / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) acc[threadIdx.x] = gsync::detail::rn_add(acc[threadIdx.x], acc[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = acc[0];
}

template <class T>
__global__ __launch_bounds__(block_threads) __attribute__((visibility("hidden"))) void scale_kernel(T* x, std::size_t n, float factor) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride)
    x[i] = grad::detail::from_f<T>(gsync::detail::rn_mul(grad::detail::to_f(x[i]), factor));
}

}  // namespace detail

/// The gradient passes as CUDA kernels.
class cuda_grad_kernels final : public grad_kernels {
 public:
  /// The process's instance.
  static cuda_grad_kernels& instance() noexcept {
    static cuda_grad_kernels k;
    return k;
  }
  void cast(const void* src, dtype from, void* dst, dtype to, std::size_t n, cuda_stream s) override {
    both(from, to, [&](auto f, auto t) {
      using F = decltype(f);
      using T = decltype(t);
      cuda::cast_into(static_cast<const F*>(src), static_cast<T*>(dst), n, s);
    });
  }
  void unpack_scan(const void* src, dtype from, void* dst, dtype to, std::size_t n, float factor, unsigned long long* counter,
                   cuda_stream s) override {
    both(from, to, [&](auto f, auto t) {
      using F = decltype(f);
      using T = decltype(t);
      cuda::unpack_scan(static_cast<const F*>(src), static_cast<T*>(dst), n, factor, counter, s);
    });
  }
  void sum_squares(const void* x, dtype t, std::size_t n, double* out, cuda_stream s) override {
    grad::detail::visit_grad_type(t, [&](auto v) {
      using T = decltype(v);
      launch("sum of squares kernel launch", detail::squares_partial<T>, detail::squares_blocks, detail::squares_threads, s,
             static_cast<const T*>(x), n, out + 1);
    });
    launch("sum of squares kernel launch", detail::squares_final<>, 1, detail::squares_blocks, s, out + 1, out);
  }
  void scale(void* x, dtype t, std::size_t n, float factor, cuda_stream s) override {
    if (n == 0) return;
    grad::detail::visit_grad_type(t, [&](auto v) {
      using T = decltype(v);
      launch("scale kernel launch", detail::scale_kernel<T>, detail::grid_for(n), detail::block_threads, s, static_cast<T*>(x), n, factor);
    });
  }
  void int8_encode(const float* g, float* residual, std::size_t count, std::size_t block, bool stochastic, grad::counter_rng rng,
                   std::uint64_t first, float* scales, std::int8_t* q, cuda_stream s) override {
    cuda::int8_encode(g, residual, count, block, stochastic ? grad::rounding::stochastic : grad::rounding::nearest, rng, first,
                      scales, q, s);
  }
  void int8_decode(const float* scales, const std::int8_t* q, std::size_t count, std::size_t block, float* out,
                   cuda_stream s) override {
    cuda::int8_decode(scales, q, count, block, out, false, s);
  }

 private:
  template <class F>
  static void both(dtype a, dtype b, F&& f) {
    grad::detail::visit_grad_type(a, [&](auto x) { grad::detail::visit_grad_type(b, [&](auto y) { f(x, y); }); });
  }
};

namespace detail {
/// Installs the CUDA gradient kernels once per program, unless some are installed already.
inline const bool cuda_grad_kernels_installed = [] {
  grad_kernels* none = nullptr;
  grad_kernels_slot().compare_exchange_strong(none, &cuda_grad_kernels::instance());
  return true;
}();
}  // namespace detail

}  // namespace gsync::cuda
