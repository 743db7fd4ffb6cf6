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
// The conversions are plain integer arithmetic on std::uint32_t with selects instead of branches
// and no library calls, so they do not depend on the floating-point environment (rounding mode,
// FTZ/DAZ), give bit-identical results everywhere (no _Float16 / F16C even where available), and
// let the compiler auto-vectorize element-wise loops such as
//   for (i...) out[i] = gsync::half(float(a[i]) + float(b[i]));
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace gsync {

namespace detail {

/// Converts a float to IEEE binary16 bits, rounding to nearest, ties to even (see file comment).
[[nodiscard]] constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;  // |f|

  // Normal half range, 2^-14 <= |f| < 2^16: rebias the exponent (127 -> 15, i.e. subtract
  // 112 << 23, written as an unsigned wrap-around add), add 0xfff plus the lowest kept bit and
  // truncate: that is round-to-nearest-even on the 13 dropped bits. A carry out of the mantissa
  // bumps the exponent, and past 65504 reaches 0x7c00 (Inf), which is the correct result.
  const std::uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;

  // Subnormal half range, |f| < 2^-14: result = RNE(m * 2^(e-150) / 2^-24) = RNE(m >> s) with
  // m the 24-bit significand, e the biased float exponent and s = 126 - e >= 14. s is clamped to
  // 25 (any larger shift gives 0 as well; it also covers float zero and float subnormals). The
  // variable shift is done as a fixed shift plus a barrel shifter over k = s - 14 in [0, 11]
  // built from masks, keeping one guard bit and collecting the other dropped bits in `sticky`.
  const std::uint32_t e = a >> 23;
  const std::uint32_t k0 = 112u - e;  // wraps to a huge value when e > 112 (result unused then)
  const std::uint32_t k = k0 > 11u ? 11u : k0;
  // Shift by s - 1 = 13 + k in total so that the guard bit (the first dropped one) ends at bit 0.
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  std::uint32_t sticky = m & 0x1fffu;
  std::uint32_t t = m >> 13;
  {
    std::uint32_t c = 0u - (k & 1u);
    sticky |= t & (0x1u & c);
    t = ((t >> 1) & c) | (t & ~c);
    c = 0u - ((k >> 1) & 1u);
    sticky |= t & (0x3u & c);
    t = ((t >> 2) & c) | (t & ~c);
    c = 0u - ((k >> 2) & 1u);
    sticky |= t & (0xfu & c);
    t = ((t >> 4) & c) | (t & ~c);
    c = 0u - ((k >> 3) & 1u);
    sticky |= t & (0xffu & c);
    t = ((t >> 8) & c) | (t & ~c);
  }
  const std::uint32_t guard = t & 1u;
  const std::uint32_t q = t >> 1;
  const std::uint32_t subnormal = q + (guard & (q | (sticky != 0u ? 1u : 0u)));

  // Inf stays Inf; NaN becomes quiet (0x200) and keeps the top 10 payload bits.
  const std::uint32_t inf_nan = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u;

  const std::uint32_t mag = a < 0x38800000u ? subnormal : (a < 0x47800000u ? normal : inf_nan);
  return static_cast<std::uint16_t>(mag | sign);
}

/// Converts IEEE binary16 bits to the float with the same value (exact; NaN -> quiet NaN).
[[nodiscard]] constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t u = h;
  const std::uint32_t sign = (u & 0x8000u) << 16;
  const std::uint32_t a = u & 0x7fffu;

  // Normal: rebias the exponent (15 -> 127) and widen the mantissa.
  const std::uint32_t normal = (a << 13) + 0x38000000u;
  // Inf / NaN: exponent all ones; NaNs get the quiet bit and keep their payload.
  const std::uint32_t inf_nan = (a << 13) | 0x7f800000u | (a > 0x7c00u ? 0x400000u : 0u);
  // Subnormal (a < 0x400): value m * 2^-24. Normalize m so that its leading one sits at bit 10
  // with a branch-free barrel shifter (shift total n in [1, 10]), then the float exponent is
  // 113 - n (biased) and the leading one becomes the implicit bit: (112 - n) << 23 + (t << 13).
  std::uint32_t t = a;
  std::uint32_t n = 0u;
  {
    std::uint32_t c = t < 0x8u ? ~0u : 0u;
    t = ((t << 8) & c) | (t & ~c);
    n += 8u & c;
    c = t < 0x80u ? ~0u : 0u;
    t = ((t << 4) & c) | (t & ~c);
    n += 4u & c;
    c = t < 0x200u ? ~0u : 0u;
    t = ((t << 2) & c) | (t & ~c);
    n += 2u & c;
    c = t < 0x400u ? ~0u : 0u;
    t = ((t << 1) & c) | (t & ~c);
    n += 1u & c;
  }
  const std::uint32_t subnormal = a != 0u ? ((112u - n) << 23) + (t << 13) : 0u;

  const std::uint32_t exp = a >> 10;
  const std::uint32_t mag = exp == 0u ? subnormal : (exp == 0x1fu ? inf_nan : normal);
  return std::bit_cast<float>(mag | sign);
}

/// Converts a float to bfloat16 bits, rounding to nearest, ties to even; NaN -> quiet NaN.
[[nodiscard]] constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  // Round-to-nearest-even on the 16 dropped bits; a carry ripples into the exponent, and past
  // the largest finite value it yields exactly Inf. Subnormals need no special case: bfloat16
  // has the float exponent range. Cannot wrap: the largest non-NaN input is 0xff800000.
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (x >> 16) | 0x40u;  // quiet, keeps sign and top payload bits
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(is_nan ? nan : rounded);
}

/// Converts bfloat16 bits to the float with the same value (exact; NaN -> quiet NaN).
[[nodiscard]] constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept {
  const std::uint32_t u = b;
  const std::uint32_t quiet = (u & 0x7fffu) > 0x7f80u ? 0x400000u : 0u;
  return std::bit_cast<float>((u << 16) | quiet);
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
  constexpr explicit half(float f) noexcept : bits_(detail::float_to_half_bits(f)) {}

  /// Converts to float; exact for every half value.
  constexpr operator float() const noexcept { return detail::half_bits_to_float(bits_); }

  /// Makes a half from its raw IEEE binary16 bit pattern.
  [[nodiscard]] static constexpr half from_bits(std::uint16_t bits) noexcept {
    return half(raw_tag{}, bits);
  }

  /// Returns the raw IEEE binary16 bit pattern.
  [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }

 private:
  struct raw_tag {};
  constexpr half(raw_tag, std::uint16_t bits) noexcept : bits_(bits) {}

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
  constexpr explicit bfloat16(float f) noexcept : bits_(detail::float_to_bfloat16_bits(f)) {}

  /// Converts to float; exact for every bfloat16 value.
  constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(bits_); }

  /// Makes a bfloat16 from its raw bit pattern (the top 16 bits of a binary32).
  [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
    return bfloat16(raw_tag{}, bits);
  }

  /// Returns the raw bit pattern (the top 16 bits of a binary32).
  [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }

 private:
  struct raw_tag {};
  constexpr bfloat16(raw_tag, std::uint16_t bits) noexcept : bits_(bits) {}

  std::uint16_t bits_;
};

/// Converts a half to float (exact).
[[nodiscard]] inline constexpr float to_float(half h) noexcept { return static_cast<float>(h); }

/// Converts a bfloat16 to float (exact).
[[nodiscard]] inline constexpr float to_float(bfloat16 b) noexcept {
  return static_cast<float>(b);
}

static_assert(sizeof(half) == 2 && alignof(half) == 2);
static_assert(std::is_trivially_copyable_v<half> && std::is_standard_layout_v<half>);
static_assert(std::is_trivially_default_constructible_v<half>);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<bfloat16> && std::is_standard_layout_v<bfloat16>);
static_assert(std::is_trivially_default_constructible_v<bfloat16>);

}  // namespace gsync
