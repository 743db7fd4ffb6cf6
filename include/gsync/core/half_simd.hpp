#pragma once
/// \file
/// Hardware conversions between float and IEEE binary16 (`gsync::half`) for bulk loops: x86's F16C
/// instructions (VCVTPH2PS, and VCVTPS2PH with rounding mode 0, round to nearest even), chosen at
/// run time, so that a binary built for any x86-64 uses them where the CPU has them (every x86
/// CPU since 2012) and the portable conversion of core/half.hpp elsewhere.
///
/// The results are bit-identical to core/half.hpp's conversions for every input: checked for all
/// 2^32 float bit patterns and all 65536 half ones (tests/test_half.cpp repeats the check on a
/// sample at every run): the same rounding, gradual underflow, overflow to Inf, and quiet NaNs
/// keeping their top payload bits. So a rank with F16C and one without combine to the same bits.
/// The F16C code lives in functions compiled for that instruction set alone (`target`
/// attributes); nothing else of the user's binary needs -mf16c. GSYNC_NO_F16C=1 turns it off
/// (for comparisons).
///
/// Used by the reduction loops on half elements (core/reduce.hpp) and by the casts of the gradient
/// layer's fp16 wire (grad/).
///
/// bfloat16 has no such instructions on most x86 CPUs, but its conversions are a few integer
/// operations (core/half.hpp) that AVX2 runs 8 at a time: `floats_to_bfloat16s` and
/// `bfloat16s_to_floats` run an AVX2 copy of the portable loop where the CPU has AVX2
/// (core/cpu_features.hpp; same bits, GSYNC_NO_AVX2=1 turns it off).

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "gsync/core/cpu_features.hpp"
#include "gsync/core/half.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define GSYNC_HAVE_F16C_PATH 1
#else
#define GSYNC_HAVE_F16C_PATH 0
#endif

namespace gsync::detail {

/// True when this CPU converts halves in hardware (F16C and AVX) and GSYNC_NO_F16C is not set.
/// Evaluated once per process.
inline bool f16c_available() noexcept {
#if GSYNC_HAVE_F16C_PATH
  // F16C is CPUID leaf 1 ECX bit 29, on top of usable AVX state (core/cpu_features.hpp).
  static const bool ok = [] {
    unsigned ecx = 0;
    return !env_no_f16c() && avx_state_usable(&ecx) && (ecx & (1u << 29)) != 0;
  }();
  return ok;
#else
  return false;
#endif
}

#if GSYNC_HAVE_F16C_PATH
#define GSYNC_F16C_TARGET [[gnu::target("avx,f16c")]]

// The compiler's own vector types and F16C builtins (what <immintrin.h> wraps), so that every
// translation unit that reduces does not parse the 60,000 lines of the intrinsics headers.
typedef short f16c_v8hi __attribute__((vector_size(16), aligned(1)));
typedef float f16c_v8sf __attribute__((vector_size(32), aligned(1)));
/// Eight halves at `p` widened to floats at `out` (unaligned). F16C must be available.
GSYNC_F16C_TARGET inline void f16c_widen8(const half* p, float* out) noexcept {
  *reinterpret_cast<f16c_v8sf*>(out) = __builtin_ia32_vcvtph2ps256(*reinterpret_cast<const f16c_v8hi*>(p));
}
/// Eight floats at `p` narrowed to halves at `out` (unaligned), rounding to nearest even.
GSYNC_F16C_TARGET inline void f16c_narrow8(const float* p, half* out) noexcept {
  *reinterpret_cast<f16c_v8hi*>(out) = __builtin_ia32_vcvtps2ph256(*reinterpret_cast<const f16c_v8sf*>(p), 0);
}

/// dst[i] = float(src[i]), 8 at a time. F16C must be available.
GSYNC_F16C_TARGET inline void halves_to_floats_f16c(const half* src, float* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    f16c_widen8(src + i, dst + i);
  for (; i < n; ++i) dst[i] = half_bits_to_float(src[i].bits());
}

/// dst[i] = half(src[i]), 8 at a time, rounding to nearest even. F16C must be available.
GSYNC_F16C_TARGET inline void floats_to_halves_f16c(const float* src, half* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    f16c_narrow8(src + i, dst + i);
  for (; i < n; ++i) dst[i] = half(src[i]);
}

/// dst[i] = half(f(float(a[i]), float(b[i]))) in blocks of 64 elements: the halves are widened in
/// hardware, `f` runs on floats (vectorized with AVX here), the results are narrowed in hardware.
/// dst may equal a or b (each block is read whole before it is written).
template <class F>
GSYNC_F16C_TARGET inline void combine_halves_f16c(half* dst, const half* a, const half* b, std::size_t n, F f) noexcept {
  constexpr std::size_t B = 64;
  alignas(32) float fa[B], fb[B];
  std::size_t i = 0;
  // Whole blocks: a constant trip count, which GCC vectorizes even at -O2.
  for (; i + B <= n; i += B) {
    for (std::size_t k = 0; k < B; k += 8) {
      f16c_widen8(a + i + k, fa + k);
      f16c_widen8(b + i + k, fb + k);
    }
    for (std::size_t k = 0; k < B; ++k) fa[k] = f(fa[k], fb[k]);
    for (std::size_t k = 0; k < B; k += 8)
      f16c_narrow8(fa + k, dst + i + k);
  }
  // The tail (< 64 elements) with the portable conversions, which give the same bits.
  for (; i < n; ++i) dst[i] = half(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}
#undef GSYNC_F16C_TARGET
#endif

/// dst[i] = float(src[i]) for n elements (hardware conversion where available).
inline void halves_to_floats(const half* src, float* dst, std::size_t n) noexcept {
#if GSYNC_HAVE_F16C_PATH
  if (f16c_available()) return halves_to_floats_f16c(src, dst, n);
#endif
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

/// dst[i] = half(src[i]) for n elements, rounding to nearest even (hardware where available).
inline void floats_to_halves(const float* src, half* dst, std::size_t n) noexcept {
#if GSYNC_HAVE_F16C_PATH
  if (f16c_available()) return floats_to_halves_f16c(src, dst, n);
#endif
  for (std::size_t i = 0; i < n; ++i) dst[i] = half(src[i]);
}

/// The bfloat16 bulk conversions' loops, compiled into both entry points below.
GSYNC_ALWAYS_INLINE void floats_to_bfloat16s_body(const float* src, bfloat16* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bfloat16(src[i]);
}
GSYNC_ALWAYS_INLINE void bfloat16s_to_floats_body(const bfloat16* src, float* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
#if GSYNC_HAVE_AVX2_PATH
GSYNC_AVX2_TARGET inline void floats_to_bfloat16s_avx2(const float* src, bfloat16* dst, std::size_t n) noexcept {
  floats_to_bfloat16s_body(src, dst, n);
}
GSYNC_AVX2_TARGET inline void bfloat16s_to_floats_avx2(const bfloat16* src, float* dst, std::size_t n) noexcept {
  bfloat16s_to_floats_body(src, dst, n);
}
#endif

/// dst[i] = bfloat16(src[i]) for n elements, rounding to nearest even (AVX2 where available).
inline void floats_to_bfloat16s(const float* src, bfloat16* dst, std::size_t n) noexcept {
#if GSYNC_HAVE_AVX2_PATH
  if (avx2_available()) return floats_to_bfloat16s_avx2(src, dst, n);
#endif
  floats_to_bfloat16s_body(src, dst, n);
}

/// dst[i] = float(src[i]) for n elements (exact; AVX2 where available).
inline void bfloat16s_to_floats(const bfloat16* src, float* dst, std::size_t n) noexcept {
#if GSYNC_HAVE_AVX2_PATH
  if (avx2_available()) return bfloat16s_to_floats_avx2(src, dst, n);
#endif
  bfloat16s_to_floats_body(src, dst, n);
}

}  // namespace gsync::detail
