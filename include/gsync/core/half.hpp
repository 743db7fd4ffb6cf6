// gsync/core/half.hpp - 16-bit host element types: gsync::half (IEEE 754 binary16) and
// gsync::bfloat16 (the top 16 bits of an IEEE 754 binary32).
//
// Rounding rule: float -> half and float -> bfloat16 round to nearest, ties to even, exactly as
// an IEEE conversion in the default rounding mode would:
//   * a value exactly half-way between two representable neighbours goes to the one whose last
//     significand bit is 0;
//   * finite values whose rounded magnitude exceeds the largest finite value become +-Inf (for
//     half: |x| >= 65520, the midpoint between 65504 and 2^16, becomes Inf; 65519.99 -> 65504);
//   * values below the normal range of half round into half subnormals (gradual underflow, step
//     2^-24); 2^-25 is a tie and goes to zero, anything above it to 2^-24; a rounded subnormal
//     that carries into 2^-14 becomes the smallest normal;
//   * signed zero keeps its sign, Inf stays Inf, NaN stays NaN: it is made quiet and keeps its
//     sign and the top bits of its payload.
// half -> float and bfloat16 -> float are exact (NaNs come back quiet with their payload).
//
// The conversions are plain integer arithmetic (std::uint32_t / std::uint16_t) with selects instead
// of branches and no library calls, so they do not depend on the floating-point environment
// (rounding mode, FTZ/DAZ), give bit-identical results everywhere (no _Float16 / F16C even where
// available), and let the compiler auto-vectorize element-wise loops such as
//   for (i...) out[i] = gsync::half(float(a[i]) + float(b[i]));
#pragma once

#include <cstdint>
#include <type_traits>

#include "gsync/detail/hd.hpp"

// Forces inlining of the conversions: they are meant to be expanded inside element-wise loops,
// and clang's inliner otherwise keeps float_to_half_bits out of line, which stops the loop from
// being vectorized. Undefined again at the end of this header.
#if defined(__GNUC__) || defined(__clang__)
#define GSYNC_HALF_FORCE_INLINE [[gnu::always_inline]] GSYNC_HD
#else
#define GSYNC_HALF_FORCE_INLINE GSYNC_HD
#endif

namespace gsync {

namespace detail {

/// Converts a float to IEEE binary16 bits, rounding to nearest, ties to even (see file comment).
[[nodiscard]] GSYNC_HALF_FORCE_INLINE constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = detail::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::int32_t a = static_cast<std::int32_t>(x & 0x7fffffffu);  // |f|; int: cheap compares
  const std::int32_t e = a >> 23;                                     // biased float exponent

  // One formula covers the normal and the subnormal half range (|f| < 2^16). With m the 24-bit
  // significand (implicit bit included), |f| = m * 2^(e - 150) and the half bits are
  //   (max(e - 113, 0) << 10) + RNE(m >> s),   s = 13 + clamp(113 - e, 0, 12):
  // for normal halves (e >= 113) s = 13 and the implicit bit of RNE(m >> 13) (bit 10) lifts the
  // exponent field to e - 112; a rounding carry out of the mantissa bumps the exponent, up to
  // 0x7c00 (Inf) from 65520 on. Below 2^-14 the shift grows by one per binade (gradual
  // underflow; a carry out of the largest subnormal gives the smallest normal), and from
  // s = 25 on the result is 0, which also covers float zeros and float subnormals.
  const std::uint32_t m = (static_cast<std::uint32_t>(a) & 0x7fffffu) | 0x800000u;
  // Bits 0..11 of m always lie below the guard bit (bit s - 1 >= 12): fold them into bit 0 as a
  // sticky bit. ((m & 0x7ff) + 0x7ff) >> 11 is 1 exactly when any of bits 0..10 is set.
  const std::uint32_t mm = (m >> 11) | (((m & 0x7ffu) + 0x7ffu) >> 11);  // < 2^13
  // x86 has no per-lane variable shift before AVX2, so rather than shifting right by s, shift left
  // by j = 12 - clamp(113 - e, 0, 12), with a branch-free barrel shifter; afterwards the rounding
  // point is fixed: RNE(m >> s) = RNE(w >> 14) with w = mm << j < 2^25.
  std::int32_t j = e - 101;
  j = j < 0 ? 0 : j;
  j = j > 12 ? 12 : j;
  std::uint32_t w = mm;
  w = (j & 1) != 0 ? w << 1 : w;
  w = (j & 2) != 0 ? w << 2 : w;
  w = (j & 4) != 0 ? w << 4 : w;
  w = (j & 8) != 0 ? w << 8 : w;
  // Round to nearest even on the 14 dropped bits: add 0x1fff plus the lowest kept bit, truncate.
  const std::uint32_t rounded = (w + 0x1fffu + ((w >> 14) & 1u)) >> 14;
  std::int32_t exp_field = e - 113;
  exp_field = exp_field < 0 ? 0 : exp_field;
  const std::uint32_t finite = rounded + (static_cast<std::uint32_t>(exp_field) << 10);

  // |f| >= 2^16: Inf stays Inf (so does overflow); NaN becomes quiet (0x200) and keeps the top
  // 10 payload bits.
  const std::uint32_t inf_nan =
      a > 0x7f800000 ? (0x7e00u | ((static_cast<std::uint32_t>(a) >> 13) & 0x3ffu)) : 0x7c00u;

  const std::uint32_t mag = a < 0x47800000 ? finite : inf_nan;
  return static_cast<std::uint16_t>(mag | sign);
}

/// Converts IEEE binary16 bits to the float with the same value (exact; NaN -> quiet NaN).
[[nodiscard]] GSYNC_HALF_FORCE_INLINE constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  // Computed on 16-bit values only: the float's upper half (sign, 8 exponent bits, top 7
  // mantissa bits) and its lower half (the last 3 mantissa bits), so that a vectorized loop
  // works on 16-bit lanes, twice as many elements per instruction as with 32-bit lanes.
  using u16 = std::uint16_t;
  const u16 a = static_cast<u16>(h & 0x7fffu);

  // Subnormal halves (a < 0x400) have the value a * 2^-24: normalize a so that its leading one
  // sits at bit 10 (shift n in [1, 10], a branch-free binary search with masks). For all other
  // inputs no stage fires: t = a, n = 0.
  u16 t = a;
  u16 n = 0;
  u16 c = static_cast<u16>(0u - (t < 0x8u ? 1u : 0u));
  t = static_cast<u16>(((t << 8) & c) | (t & ~c));
  n = static_cast<u16>(n + (c & 8u));
  c = static_cast<u16>(0u - (t < 0x80u ? 1u : 0u));
  t = static_cast<u16>(((t << 4) & c) | (t & ~c));
  n = static_cast<u16>(n + (c & 4u));
  c = static_cast<u16>(0u - (t < 0x200u ? 1u : 0u));
  t = static_cast<u16>(((t << 2) & c) | (t & ~c));
  n = static_cast<u16>(n + (c & 2u));
  c = static_cast<u16>(0u - (t < 0x400u ? 1u : 0u));
  t = static_cast<u16>(((t << 1) & c) | (t & ~c));
  n = static_cast<u16>(n + (c & 1u));

  // Normal and subnormal: float bits = ((112 - n) << 23) + (t << 13), i.e. the exponent is
  // rebiased from 15 to 127 (plus 1 for a subnormal's leading one at bit 10, which lands on the
  // exponent's lowest bit). Zero stays zero. Inf / NaN: exponent 31 -> 255, NaNs get the quiet
  // bit and keep their payload.
  const u16 hi_finite = static_cast<u16>(((112u - n) << 7) + (t >> 3));
  const u16 hi_inf_nan = static_cast<u16>((hi_finite + 0x3800u) | (a > 0x7c00u ? 0x40u : 0u));
  const u16 hi_mag = a >= 0x7c00u ? hi_inf_nan : (a != 0u ? hi_finite : u16{0});
  const u16 hi = static_cast<u16>(hi_mag | (h & 0x8000u));
  const u16 lo = static_cast<u16>((t & 7u) << 13);
  return detail::bit_cast<float>((static_cast<std::uint32_t>(hi) << 16) | lo);
}

/// Converts a float to bfloat16 bits, rounding to nearest, ties to even; NaN -> quiet NaN.
[[nodiscard]] GSYNC_HALF_FORCE_INLINE constexpr std::uint16_t float_to_bfloat16_bits(
    float f) noexcept {
  const std::uint32_t x = detail::bit_cast<std::uint32_t>(f);
  // Round-to-nearest-even on the 16 dropped bits; a carry ripples into the exponent, and past
  // the largest finite value it yields exactly Inf. Subnormals need no special case: bfloat16
  // has the float exponent range. Cannot wrap: the largest non-NaN input is 0xff800000.
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (x >> 16) | 0x40u;  // quiet, keeps sign and top payload bits
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(is_nan ? nan : rounded);
}

/// Converts bfloat16 bits to the float with the same value (exact; NaN -> quiet NaN).
[[nodiscard]] GSYNC_HALF_FORCE_INLINE constexpr float bfloat16_bits_to_float(
    std::uint16_t b) noexcept {
  const std::uint32_t u = b;
  const std::uint32_t quiet = (u & 0x7fffu) > 0x7f80u ? 0x400000u : 0u;
  return detail::bit_cast<float>((u << 16) | quiet);
}

}  // namespace detail

/// IEEE 754 binary16 ("half precision") host element type: 1 sign bit, 5 exponent bits, 10
/// mantissa bits, stored as its raw bits. Trivially copyable, standard layout, 2 bytes, and
/// trivially default constructible (a default-constructed half is uninitialized, like float).
/// Arithmetic and comparisons go through the implicit conversion to float.
class half {
 public:
  /// Trivial default constructor: leaves the bits uninitialized.
  half() = default;

  /// Converts from float, rounding to nearest, ties to even (overflow -> Inf, NaN -> quiet NaN).
  GSYNC_HALF_FORCE_INLINE constexpr explicit half(float f) noexcept
      : bits_(detail::float_to_half_bits(f)) {}

  /// Converts to float; exact for every half value.
  GSYNC_HALF_FORCE_INLINE constexpr operator float() const noexcept {
    return detail::half_bits_to_float(bits_);
  }

  /// Makes a half from its raw IEEE binary16 bit pattern.
  [[nodiscard]] GSYNC_HD static constexpr half from_bits(std::uint16_t bits) noexcept {
    return half(raw_tag{}, bits);
  }

  /// Returns the raw IEEE binary16 bit pattern.
  [[nodiscard]] GSYNC_HD constexpr std::uint16_t bits() const noexcept { return bits_; }

 private:
  struct raw_tag {};
  GSYNC_HD constexpr half(raw_tag, std::uint16_t bits) noexcept : bits_(bits) {}

  std::uint16_t bits_;
};

/// bfloat16 host element type: the top 16 bits of an IEEE 754 binary32 (1 sign bit, 8 exponent
/// bits, 7 mantissa bits), stored as its raw bits. Trivially copyable, standard layout, 2 bytes,
/// and trivially default constructible (a default-constructed bfloat16 is uninitialized).
/// Arithmetic and comparisons go through the implicit conversion to float.
class bfloat16 {
 public:
  /// Trivial default constructor: leaves the bits uninitialized.
  bfloat16() = default;

  /// Converts from float, rounding to nearest, ties to even (overflow -> Inf, NaN -> quiet NaN).
  GSYNC_HALF_FORCE_INLINE constexpr explicit bfloat16(float f) noexcept
      : bits_(detail::float_to_bfloat16_bits(f)) {}

  /// Converts to float; exact for every bfloat16 value.
  GSYNC_HALF_FORCE_INLINE constexpr operator float() const noexcept {
    return detail::bfloat16_bits_to_float(bits_);
  }

  /// Makes a bfloat16 from its raw bit pattern (the top 16 bits of a binary32).
  [[nodiscard]] GSYNC_HD static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
    return bfloat16(raw_tag{}, bits);
  }

  /// Returns the raw bit pattern (the top 16 bits of a binary32).
  [[nodiscard]] GSYNC_HD constexpr std::uint16_t bits() const noexcept { return bits_; }

 private:
  struct raw_tag {};
  GSYNC_HD constexpr bfloat16(raw_tag, std::uint16_t bits) noexcept : bits_(bits) {}

  std::uint16_t bits_;
};

/// Converts a half to float (exact).
[[nodiscard]] GSYNC_HALF_FORCE_INLINE inline constexpr float to_float(half h) noexcept {
  return static_cast<float>(h);
}

/// Converts a bfloat16 to float (exact).
[[nodiscard]] GSYNC_HALF_FORCE_INLINE inline constexpr float to_float(bfloat16 b) noexcept {
  return static_cast<float>(b);
}

static_assert(sizeof(half) == 2 && alignof(half) == 2);
static_assert(std::is_trivially_copyable_v<half> && std::is_standard_layout_v<half>);
static_assert(std::is_trivially_default_constructible_v<half>);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<bfloat16> && std::is_standard_layout_v<bfloat16>);
static_assert(std::is_trivially_default_constructible_v<bfloat16>);

}  // namespace gsync

#undef GSYNC_HALF_FORCE_INLINE
