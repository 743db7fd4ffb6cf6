#pragma once
/// \file
/// `cuda::grad_kernels`: the element passes the gradient layer runs on device memory (wire casts,
/// the fused unpack with its non-finite count, sums of squares, scaling, int8 encoding and
/// decoding), as one interface over
/// element types named at run time, so that the device synchronizer (grad/device_synchronizer.hpp)
/// is plain C++ and tested on machines without a GPU.
///
/// The real implementation is `grad/device_kernels.cuh` (kernels: include it in one `.cu` file of the
/// program, which installs it); the tests install a host stand-in (tests/support/fake_cuda.hpp)
/// that runs the host passes of grad/nonfinite.hpp on its fake streams. Every pass is queued on a
/// stream and computes each element with the host pass's own function, so the bits are the host's.
/// This header includes no CUDA header.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "gsync/core/dtype.hpp"
#include "gsync/core/error.hpp"
#include "gsync/device_span.hpp"
#include "gsync/grad/quantize.hpp"

namespace gsync::cuda {

/// Doubles of device memory `grad_kernels::sum_squares` writes: the result and one partial sum per
/// block of its fixed grid.
inline constexpr std::size_t sum_squares_slots = 257;

/// The gradient layer's device passes. Types are float32, bfloat16 or float16; pointers are device
/// memory; every call queues work on `s` and returns.
class grad_kernels {
 public:
  virtual ~grad_kernels() = default;
  /// dst[i] = to(src[i]) (one round-to-nearest-even when narrowing).
  virtual void cast(const void* src, dtype from, void* dst, dtype to, std::size_t n, cuda_stream s) = 0;
  /// dst[i] = to(float(src[i]) * factor), adding the number of non-finite stored values to
  /// `*counter` (device memory). `src` may equal `dst` when the types are equal.
  virtual void unpack_scan(const void* src, dtype from, void* dst, dtype to, std::size_t n, float factor,
                           unsigned long long* counter, cuda_stream s) = 0;
  /// out[0] = the sum over i < n of float(x[i])^2, in double, in an order fixed by n alone (the
  /// same bits on every rank for the same values). `out` is device memory of `sum_squares_slots`
  /// doubles (the rest is scratch).
  virtual void sum_squares(const void* x, dtype t, std::size_t n, double* out, cuda_stream s) = 0;
  /// x[i] = t(float(x[i]) * factor).
  virtual void scale(void* x, dtype t, std::size_t n, float factor, cuda_stream s) = 0;
  /// The int8 encoding of `count` floats `g` in blocks of `block` (grad/quantize.hpp's format):
  /// `scales[b]` per block, `q[i]` per value, value i drawing counter `first + i` of `rng` when
  /// `stochastic`. With `residual` (count floats) the values encoded are e = residual + g and
  /// `residual` receives e - D(q) (error feedback). The host encoder's bits.
  virtual void int8_encode(const float* g, float* residual, std::size_t count, std::size_t block, bool stochastic,
                           grad::counter_rng rng, std::uint64_t first, float* scales, std::int8_t* q, cuda_stream s) = 0;
  /// out[i] = q[i] * scales[i / block] for i < count (the host decoder's bits).
  virtual void int8_decode(const float* scales, const std::int8_t* q, std::size_t count, std::size_t block, float* out,
                           cuda_stream s) = 0;
};

namespace detail {
/// The process's gradient kernels: set by grad/device_kernels.cuh, or by a test.
inline std::atomic<grad_kernels*>& grad_kernels_slot() noexcept {
  static std::atomic<grad_kernels*> slot{nullptr};
  return slot;
}
}  // namespace detail

/// Installs `k` as the gradient kernels of later device operations; returns the previous ones.
inline grad_kernels* set_grad_kernels(grad_kernels* k) noexcept { return detail::grad_kernels_slot().exchange(k); }

/// The installed gradient kernels; throws `errc::cuda` when no file of the program included
/// gsync/grad/device_kernels.cuh (which needs nvcc).
inline grad_kernels& current_grad_kernels() {
  if (grad_kernels* k = detail::grad_kernels_slot().load(std::memory_order_acquire)) return *k;
  throw error(errc::cuda,
              "device gradients: no gradient kernels in this program: include <gsync/grad/device_kernels.cuh> in one .cu file "
              "compiled by nvcc");
}

}  // namespace gsync::cuda
