#pragma once
/// \file
/// Blockwise int8 quantization of float32 data, with nearest or stochastic rounding, and the
/// counter-based random numbers that stochastic rounding draws.
///
/// A block of n float values x is sent as one float32 scale and n int8 values:
///   amax  = max |x_i|,  scale = amax / 127,  q_i = round(x_i * 127 / amax) in [-127, 127],
///   D(q)_i = q_i * scale.
/// `round` is either to nearest (ties to even) or stochastic: q_i = floor(v_i + u_i) with u_i
/// uniform in [0, 1), so that E[q_i] = v_i (unbiased; see `quantize_block`).
///
/// Special blocks (decided once per block, never per element):
///   * a block holding a NaN or an Inf gets scale = NaN and all q_i = 0, so every dequantized
///     value of the block is NaN: a non-finite gradient is never silently turned into a number,
///     and a NaN detector downstream sees it. A residual (error feedback) of such a block is
///     reset to zero instead of becoming NaN forever;
///   * a block with amax < 2^-100 (zero, or far below any useful gradient) gets scale = 0 and
///     all q_i = 0 (so 127/amax never overflows to Inf); with error feedback the residual keeps
///     the values.
///
/// Every loop is a plain loop over contiguous floats without per-element branches (the max is
/// taken on the integer bit patterns of |x|, which order like the values and also reveal
/// non-finite values; rounding uses a magic-number add or an exact integer floor), so it
/// vectorizes; each loop also has an AVX2 copy chosen at run time (core/cpu_features.hpp), which
/// gives the same bits. The results are bitwise reproducible on every rank of one build. Compile
/// without -ffast-math (the nearest-rounding trick `(v + 1.5*2^23) - 1.5*2^23` must not be
/// reassociated).
///
/// Random numbers: `counter_rng` is splitmix64 (a 64-bit add-xorshift-multiply mix) applied to
/// key + counter; the key mixes a user seed, the rank, the step and a stage number, and the
/// counter is the element index, so a draw depends only on (seed, rank, step, stage, index) and
/// never on threads, call order or chunking.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "gsync/core/cpu_features.hpp"
#include "gsync/core/exact_fp.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::grad {

/// How a scaled value is rounded to an integer level.
enum class rounding {
  nearest,     ///< to nearest, ties to even: deterministic, error <= scale/2
  stochastic,  ///< floor(v + u), u uniform in [0, 1): unbiased, error < scale
};

/// The splitmix64 mixing function: a bijection of 64-bit words whose outputs for consecutive
/// inputs pass standard statistical tests.
[[nodiscard]] GSYNC_HD constexpr std::uint64_t splitmix64(std::uint64_t z) noexcept {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Counter-based random stream: `bits(i)` is a pure function of (key, i).
struct counter_rng {
  std::uint64_t key = 0;  ///< identifies the stream

  /// The stream of one (seed, rank, step, stage): stage numbers the quantizations within one
  /// step (0 = a rank's own contribution, 1 = the owner's re-quantization of a reduced chunk).
  [[nodiscard]] GSYNC_HD static constexpr counter_rng make(std::uint64_t seed, int rank, std::uint64_t step, unsigned stage) noexcept {
    std::uint64_t k = splitmix64(seed);
    k = splitmix64(k ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)));
    k = splitmix64(k ^ step);
    k = splitmix64(k ^ stage);
    return counter_rng{k};
  }
  /// 64 random bits for counter `i`.
  [[nodiscard]] GSYNC_HD constexpr std::uint64_t bits(std::uint64_t i) const noexcept {
    return splitmix64(key + i * 0xD1B54A32D192ED03ull);
  }
  /// A uniform float in [0, 1) with 24 random bits, for counter `i`.
  [[nodiscard]] GSYNC_HD constexpr float uniform(std::uint64_t i) const noexcept {
    return gsync::detail::rn_mul(static_cast<float>(static_cast<std::uint32_t>(bits(i) >> 40)), 0x1p-24f);
  }
};

/// Scale and reciprocal of one block (see the file comment for the special cases).
struct block_scale {
  float scale = 0;    ///< amax / 127 (0 for a negligible block, NaN for a non-finite one)
  float inverse = 0;  ///< 127 / amax (0 for a negligible or non-finite block)
  bool finite = true; ///< false when the block holds a NaN or an Inf
};

/// Blocks whose max |x| is below this are sent as zeros (2^-100).
inline constexpr float negligible_amax = 0x1p-100f;

namespace detail {
// One element of each pass, shared by the host loops below and the device kernels
// (grad/quantize.cuh), so both give the same bits. On the device each product and sum is rounded
// on its own, whatever nvcc's flags (core/exact_fp.hpp: nvcc would otherwise fuse them into one
// FMA, which rounds once, or flush subnormals under -ftz=true); a host build must not contract
// them either (no -ffp-contract=fast with an FMA target).

GSYNC_HD inline float mul_rn(float a, float b) noexcept { return gsync::detail::rn_mul(a, b); }
GSYNC_HD inline float add_rn(float a, float b) noexcept { return gsync::detail::rn_add(a, b); }
GSYNC_HD inline float sub_rn(float a, float b) noexcept { return gsync::detail::rn_sub(a, b); }

/// The bit pattern of |x| (for non-negative floats the patterns order like the values, and
/// every pattern >= Inf's is Inf or NaN).
GSYNC_HD inline std::uint32_t abs_bits(float x) noexcept { return gsync::detail::bit_cast<std::uint32_t>(x) & 0x7fffffffu; }

/// clamp(round_nearest_even(x * inv), -127, 127).
GSYNC_HD inline std::int8_t quantize_nearest_one(float x, float inv) noexcept {
  constexpr float magic = 0x1.8p23f;  // adding it rounds |v| < 2^22 to an integer (ties to even)
  const float v = sub_rn(add_rn(mul_rn(x, inv), magic), magic);  // |x * inv| <= 127 up to rounding
  std::int32_t k = gsync::detail::trunc_to_int(v);
  k = k < -127 ? -127 : k;  // clamping the integers (not the floats) keeps the loops branch-free
  k = k > 127 ? 127 : k;
  return static_cast<std::int8_t>(k);
}

/// clamp(floor(x * inv + u), -127, 127).
GSYNC_HD inline std::int8_t quantize_stochastic_one(float x, float inv, float u) noexcept {
  const float t = add_rn(mul_rn(x, inv), u);      // in [-127, 128) up to rounding
  std::int32_t k = gsync::detail::trunc_to_int(t);                   // truncation toward zero ...
  k -= gsync::detail::ordered_less(t, static_cast<float>(k)) ? 1 : 0;  // ... corrected to floor for negatives
  k = k < -127 ? -127 : k;
  k = k > 127 ? 127 : k;  // t may round up to 128.0f
  return static_cast<std::int8_t>(k);
}

/// q * scale.
GSYNC_HD inline float dequantize_one(std::int8_t q, float scale) noexcept { return mul_rn(static_cast<float>(q), scale); }
/// acc + q * scale.
GSYNC_HD inline float dequantize_add_one(float acc, std::int8_t q, float scale) noexcept {
  return add_rn(acc, mul_rn(static_cast<float>(q), scale));
}
/// e - q * scale (the error-feedback residual).
GSYNC_HD inline float residual_one(float e, std::int8_t q, float scale) noexcept {
  return sub_rn(e, mul_rn(static_cast<float>(q), scale));
}

// The loop bodies, each compiled twice: into the baseline entry points below and into their AVX2
// copies (GSYNC_AVX2_TARGET), which the public functions choose at run time.

/// max over i of abs_bits(x[i]).
GSYNC_ALWAYS_INLINE std::uint32_t max_abs_bits_body(const float* x, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = abs_bits(x[i]);
    m = a > m ? a : m;
  }
  return m;
}
/// q = quantize_nearest_one(x, inv) per value.
GSYNC_ALWAYS_INLINE void quantize_nearest_body(const float* x, std::size_t n, float inv, std::int8_t* q) noexcept {
  for (std::size_t i = 0; i < n; ++i) q[i] = quantize_nearest_one(x[i], inv);
}
/// q = quantize_stochastic_one(x, inv, u_i) with u_i = rng.uniform(first + i).
template <class Rng>
GSYNC_ALWAYS_INLINE void quantize_stochastic_body(const float* x, std::size_t n, float inv, std::int8_t* q, Rng rng,
                                                  std::uint64_t first) noexcept {
  for (std::size_t i = 0; i < n; ++i) q[i] = quantize_stochastic_one(x[i], inv, rng.uniform(first + i));
}
/// out = q * scale (add false) or out += q * scale (add true).
template <bool add>
GSYNC_ALWAYS_INLINE void dequantize_body(const std::int8_t* q, std::size_t n, float scale, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (add) out[i] = dequantize_add_one(out[i], q[i], scale);
    else out[i] = dequantize_one(q[i], scale);
  }
}
/// e = e - q * scale.
GSYNC_ALWAYS_INLINE void residual_body(float* e, const std::int8_t* q, std::size_t n, float scale) noexcept {
  for (std::size_t i = 0; i < n; ++i) e[i] = residual_one(e[i], q[i], scale);
}
#if GSYNC_HAVE_AVX2_PATH
GSYNC_AVX2_TARGET inline std::uint32_t max_abs_bits_avx2(const float* x, std::size_t n) noexcept { return max_abs_bits_body(x, n); }
GSYNC_AVX2_TARGET inline void quantize_nearest_avx2(const float* x, std::size_t n, float inv, std::int8_t* q) noexcept {
  quantize_nearest_body(x, n, inv, q);
}
template <class Rng>
GSYNC_AVX2_TARGET inline void quantize_stochastic_avx2(const float* x, std::size_t n, float inv, std::int8_t* q, Rng rng,
                                                       std::uint64_t first) noexcept {
  quantize_stochastic_body(x, n, inv, q, rng, first);
}
template <bool add>
GSYNC_AVX2_TARGET inline void dequantize_avx2(const std::int8_t* q, std::size_t n, float scale, float* out) noexcept {
  dequantize_body<add>(q, n, scale, out);
}
GSYNC_AVX2_TARGET inline void residual_avx2(float* e, const std::int8_t* q, std::size_t n, float scale) noexcept {
  residual_body(e, q, n, scale);
}
#endif

/// The int8 loops run in AVX2 copies (see core/cpu_features.hpp).
inline bool int8_wide() noexcept {
#if GSYNC_HAVE_AVX2_PATH
  return gsync::detail::avx2_available();
#else
  return false;
#endif
}

}  // namespace detail

namespace detail {
/// The scale of a block whose largest abs_bits is `m` (see the file comment's special cases).
GSYNC_HD inline block_scale scale_from_bits(std::uint32_t m) noexcept {
  if (m >= 0x7f800000u) return {gsync::detail::bit_cast<float>(0x7fc00000u), 0.0f, false};  // a quiet NaN
  const float amax = gsync::detail::bit_cast<float>(m);
  if (gsync::detail::ordered_less(amax, negligible_amax)) return {0.0f, 0.0f, true};
  return {gsync::detail::rn_div(amax, 127.0f), gsync::detail::rn_div(127.0f, amax), true};
}
}  // namespace detail

/// Computes the scale of the `n` values at `x`.
[[nodiscard]] inline block_scale scale_of(const float* x, std::size_t n) noexcept {
  // One integer max finds both amax and non-finite values (patterns >= Inf's).
  std::uint32_t m;
#if GSYNC_HAVE_AVX2_PATH
  if (detail::int8_wide()) m = detail::max_abs_bits_avx2(x, n);
  else
#endif
    m = detail::max_abs_bits_body(x, n);
  return detail::scale_from_bits(m);
}

/// Quantizes `n` values at `x` with scale `s` into `q`. `rng` and `first` (the counter of x[0])
/// are used only for stochastic rounding. A non-finite block gets all zeros.
///
/// Nearest: v = clamp(x * inverse, -127, 127), q = v rounded to nearest even (|x - q*scale| <=
/// scale/2 up to float rounding of the scale, a few 1e-5 relative). Stochastic: q = floor(v + u)
/// with u = uniform(first + i); E[q] = v up to the 2^-24 granularity of u and the rounding of
/// v + u (below 2^-17 absolute), and |x - q*scale| < scale.
inline void quantize_block(const float* x, std::size_t n, const block_scale& s, std::int8_t* q, rounding mode,
                           counter_rng rng, std::uint64_t first) noexcept {
  const float inv = s.inverse;
  if (!s.finite) {
    for (std::size_t i = 0; i < n; ++i) q[i] = 0;
    return;
  }
#if GSYNC_HAVE_AVX2_PATH
  if (detail::int8_wide()) {
    if (mode == rounding::nearest) detail::quantize_nearest_avx2(x, n, inv, q);
    else detail::quantize_stochastic_avx2(x, n, inv, q, rng, first);
    return;
  }
#endif
  if (mode == rounding::nearest) detail::quantize_nearest_body(x, n, inv, q);
  else detail::quantize_stochastic_body(x, n, inv, q, rng, first);
}

/// out[i] = q[i] * scale for `n` values (NaN everywhere for a non-finite block's NaN scale).
inline void dequantize_block(const std::int8_t* q, std::size_t n, float scale, float* out) noexcept {
#if GSYNC_HAVE_AVX2_PATH
  if (detail::int8_wide()) return detail::dequantize_avx2<false>(q, n, scale, out);
#endif
  detail::dequantize_body<false>(q, n, scale, out);
}

/// acc[i] += q[i] * scale for `n` values.
inline void dequantize_add_block(const std::int8_t* q, std::size_t n, float scale, float* acc) noexcept {
#if GSYNC_HAVE_AVX2_PATH
  if (detail::int8_wide()) return detail::dequantize_avx2<true>(q, n, scale, acc);
#endif
  detail::dequantize_body<true>(q, n, scale, acc);
}

/// Error feedback after quantizing: `e` holds e = g + r on entry (the value that was quantized)
/// and the new residual r = e - D(q) on return; zero for a non-finite block.
inline void update_residual(float* e, const std::int8_t* q, std::size_t n, const block_scale& s) noexcept {
  if (!s.finite) {
    for (std::size_t i = 0; i < n; ++i) e[i] = 0.0f;
    return;
  }
#if GSYNC_HAVE_AVX2_PATH
  if (detail::int8_wide()) return detail::residual_avx2(e, q, n, s.scale);
#endif
  detail::residual_body(e, q, n, s.scale);
}

}  // namespace gsync::grad
