#pragma once
/// \file
/// The element loops: the only code that combines values. Everything above works on ranges,
/// everything below on bytes. The loops are plain indexed loops over `__restrict` pointers with the
/// operator inlined, which GCC and Clang vectorize at -O2/-O3 (gsync-reduce-kernels,
/// benchmarks/reduce_kernels.cpp, measures them; tests check a user functor through a constexpr
/// evaluation, which proves the call is static). Half elements go through the CPU's F16C
/// conversions where it has them (core/half_simd.hpp: bit-identical results): the portable
/// conversion runs many times slower (benchmarks/results/from_code_comments.md).
/// bfloat16 loops run in an AVX2 copy where the CPU has AVX2 (core/cpu_features.hpp, same bits).

#include <cstddef>
#include <cstring>

#include "gsync/core/concepts.hpp"
#include "gsync/core/half_simd.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::detail {

/// Converts an accumulator back to the element type (one rounding for half/bfloat16).
template <class T, class A>
GSYNC_HD constexpr T from_accum(A a) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) return T(static_cast<float>(a));
  else return static_cast<T>(a);
}

/// Elements per block of the reduction loops: 64 bytes, one cache line.
/// The three loops below are written out on purpose: folding them into one helper taking a lambda
/// stops GCC 12 from vectorizing the half loop at -O2 (measured with -fopt-info-vec).
template <class T>
inline constexpr std::size_t block_elems = 64 / sizeof(T);

/// One combined element: `op(a, b)`, then `op.finalize(., world)` when `Final`. The device
/// kernels (cuda/reduce.cuh) call this same function, so both paths give the same bits.
template <bool Final, class T, class Op>
GSYNC_HD constexpr T combine(T a, T b, const Op& op, int world) noexcept(nothrow_op<Op, T>) {
  using A = accum_t<T>;
  A v = static_cast<A>(op(static_cast<A>(a), static_cast<A>(b)));
  if constexpr (Final && finalizing_op<Op, T>) v = static_cast<A>(op.finalize(v, world));
  return from_accum<T>(v);
}

#if GSYNC_HAVE_AVX2_PATH
/// dst[i] = combine(a[i], b[i]) compiled for AVX2 (core/cpu_features.hpp): bfloat16's conversions
/// are integer code that runs 8 wide there. dst may equal a or b (each block is read whole first).
template <bool Final, class T, class Op>
GSYNC_AVX2_TARGET void combine_avx2(T* dst, const T* a, const T* b, std::size_t n, const Op& op, int world) noexcept(nothrow_op<Op, T>) {
  constexpr std::size_t B = block_elems<T>;
  std::size_t i = 0;
  for (; i + B <= n; i += B) {
    T t[B];
    for (std::size_t j = 0; j < B; ++j) t[j] = combine<Final>(a[i + j], b[i + j], op, world);
    std::memcpy(dst + i, t, sizeof t);
  }
  for (; i < n; ++i) dst[i] = combine<Final>(a[i], b[i], op, world);
}
#endif

/// The 16-bit loops in hardware when the CPU can: half through F16C (core/half_simd.hpp), bfloat16
/// in an AVX2 copy: dst[i] = combine(a[i], b[i]), dst may equal a or b. Returns false (nothing
/// done) where it cannot, or during constant evaluation.
template <bool Final, class T, class Op>
constexpr bool reduce_half_hw([[maybe_unused]] T* dst, [[maybe_unused]] const T* a, [[maybe_unused]] const T* b,
                              [[maybe_unused]] std::size_t n, [[maybe_unused]] const Op& op,
                              [[maybe_unused]] int world) noexcept {
  if constexpr (!nothrow_op<Op, T>) return false;  // the hardware loops are noexcept: the portable ones pass exceptions on
#if GSYNC_HAVE_F16C_PATH
  if constexpr (std::is_same_v<T, half>) {
    if (std::is_constant_evaluated() || !f16c_available()) return false;
    combine_halves_f16c(dst, a, b, n, [&op, world](float x, float y) {
      (void)world;  // used only when Final
      float v = static_cast<float>(op(x, y));
      if constexpr (Final && finalizing_op<Op, T>) v = static_cast<float>(op.finalize(v, world));
      return v;
    });
    return true;
  }
#endif
#if GSYNC_HAVE_AVX2_PATH
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (std::is_constant_evaluated() || !avx2_available()) return false;
    combine_avx2<Final>(dst, a, b, n, op, world);
    return true;
  }
#endif
  return false;
}

/// dst[i] = op(a[i], b[i]) (then finalize when `Final`); dst must not overlap a or b.
template <bool Final, class T, class Op>
constexpr void reduce_to(T* __restrict dst, const T* __restrict a, const T* __restrict b, std::size_t n,
                         const Op& op, int world) noexcept(nothrow_op<Op, T>) {
  if (reduce_half_hw<Final>(dst, a, b, n, op, world)) return;
  // Blocks of a fixed element count: the inner loop has a constant trip count, which GCC
  // vectorizes even under -O2's very-cheap cost model; the tail runs scalar.
  constexpr std::size_t B = block_elems<T>;
  std::size_t i = 0;
  for (; i + B <= n; i += B)
    for (std::size_t j = 0; j < B; ++j) dst[i + j] = combine<Final>(a[i + j], b[i + j], op, world);
  for (; i < n; ++i) dst[i] = combine<Final>(a[i], b[i], op, world);
}

/// dst[i] = op(dst[i], b[i]) (then finalize when `Final`); b must not overlap dst.
template <bool Final, class T, class Op>
constexpr void reduce_inplace(T* __restrict dst, const T* __restrict b, std::size_t n, const Op& op,
                              int world) noexcept(nothrow_op<Op, T>) {
  if (reduce_half_hw<Final>(dst, dst, b, n, op, world)) return;
  constexpr std::size_t B = block_elems<T>;
  std::size_t i = 0;
  for (; i + B <= n; i += B)
    for (std::size_t j = 0; j < B; ++j) dst[i + j] = combine<Final>(dst[i + j], b[i + j], op, world);
  for (; i < n; ++i) dst[i] = combine<Final>(dst[i], b[i], op, world);
}

/// dst[i] = op(a[i], dst[i]) (then finalize when `Final`): the in-place form with the local value
/// on the right, so that every rank can combine "lower ranks first" whatever buffer holds what.
template <bool Final, class T, class Op>
constexpr void reduce_inplace_rhs(T* __restrict dst, const T* __restrict a, std::size_t n, const Op& op,
                                  int world) noexcept(nothrow_op<Op, T>) {
  if (reduce_half_hw<Final>(dst, a, dst, n, op, world)) return;
  constexpr std::size_t B = block_elems<T>;
  std::size_t i = 0;
  for (; i + B <= n; i += B)
    for (std::size_t j = 0; j < B; ++j) dst[i + j] = combine<Final>(a[i + j], dst[i + j], op, world);
  for (; i < n; ++i) dst[i] = combine<Final>(a[i], dst[i], op, world);
}

/// dst[i] = finalize(src[i]) for a one-rank world (or a plain copy when the op has no finalize).
/// dst may equal src.
template <class T, class Op>
constexpr void finalize_copy(T* dst, const T* src, std::size_t n, const Op& op, int world) noexcept(nothrow_op<Op, T>) {
  if constexpr (finalizing_op<Op, T>) {
    using A = accum_t<T>;
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = from_accum<T>(static_cast<A>(op.finalize(static_cast<A>(src[i]), world)));
  } else if (dst != src && n != 0) {
    if (std::is_constant_evaluated()) {
      for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
    } else {
      std::memcpy(dst, src, n * sizeof(T));
    }
  }
}

}  // namespace gsync::detail
