#pragma once
/// \file
/// The element passes of the gradient synchronizer: the wire cast on the way out (`cast_into`), and the
/// fused unpack on the way back (`unpack_scan`: cast back to the gradient type, multiply by a factor
/// such as 1/loss_scale or 1/accumulation_steps, and count non-finite values, all in one pass over the
/// data). Plus the report of where non-finite values were found.
///
/// Why checking the synchronized result is enough for every rank to agree, with no extra round trip:
/// for sum and avg, a NaN contributed by any rank makes the reduced element NaN (NaN + x = NaN), and an
/// Inf makes it Inf or NaN (Inf + finite = Inf, Inf + -Inf = NaN; avg's final division keeps it
/// non-finite). Finite contributions whose sum overflows the accumulation or wire type also end as Inf.
/// The same holds with a bfloat16 or float16 wire: the cast keeps Inf and NaN (and turns values beyond
/// the type's range into Inf), and the library accumulates those types in float within each step, where
/// the same rules apply. gsync's allreduce gives bitwise identical results on every rank, so the fused
/// check in the unpack pass sees the same non-finite elements, in the same tensors, on every rank: the
/// verdict (skip the step, back off the loss scale, or throw) is collective by construction. The only
/// thing it cannot tell is *which* rank contributed the bad value.
///
/// The loops are plain counted loops over contiguous arrays with no data-dependent branches, so the
/// compiler vectorizes them (the 16-bit conversions are branch-free integer code, see core/half.hpp);
/// float <-> half conversions use the CPU's F16C instructions where it has them
/// (core/half_simd.hpp, bit-identical).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "gsync/core/dtype.hpp"
#include "gsync/core/exact_fp.hpp"
#include "gsync/core/half.hpp"
#include "gsync/core/half_simd.hpp"

namespace gsync::grad {

/// True for the gradient element types the synchronizer handles: float, gsync::bfloat16, gsync::half.
/// \tparam T candidate type.
template <class T>
inline constexpr bool is_grad_element_v =
    std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

namespace detail {
/// Converts a gradient element to float (exact for all three types).
template <class T>
GSYNC_HD inline float to_f(T v) noexcept {
  return static_cast<float>(v);
}
/// Converts a float to a gradient element (rounding to nearest even for the 16-bit types).
template <class T>
GSYNC_HD inline T from_f(float v) noexcept {
  if constexpr (std::is_same_v<T, float>) return v; else return T(v);
}
/// 1 when `v` is Inf or NaN (all exponent bits set), else 0; branch-free.
GSYNC_HD inline std::uint32_t nonfinite_bit(float v) noexcept {
  return (gsync::detail::bit_cast<std::uint32_t>(v) & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
}
/// One element of the fused unpack: To(float(v) * factor) (the device kernels use it too).
template <class From, class To>
GSYNC_HD inline To unpack_one(From v, float factor) noexcept {
  return from_f<To>(gsync::detail::rn_mul(to_f(v), factor));
}
}  // namespace detail

/// Wire cast: dst[i] = To(src[i]) for i < n (round to nearest even when narrowing; Inf and NaN kept,
/// finite values beyond To's range become Inf).
/// \tparam From source gradient element type. \tparam To destination (wire) element type.
template <class From, class To>
void cast_into(const From* src, To* dst, std::size_t n) noexcept {
  static_assert(is_grad_element_v<From> && is_grad_element_v<To>, "cast_into: float, bfloat16 or half only");
  if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>) return gsync::detail::floats_to_halves(src, dst, n);
  else if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) return gsync::detail::halves_to_floats(src, dst, n);
  else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>) return gsync::detail::floats_to_bfloat16s(src, dst, n);
  else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) return gsync::detail::bfloat16s_to_floats(src, dst, n);
  else for (std::size_t i = 0; i < n; ++i) dst[i] = detail::from_f<To>(detail::to_f(src[i]));
}

/// Fused unpack: dst[i] = To(float(src[i]) * factor) for i < n; returns how many stored values are
/// non-finite (checked on the value as stored in `dst`, so a narrowing overflow counts too).
/// `src` and `dst` may be the same array (in place; then From == To).
/// \tparam From source (wire or bucket) element type. \tparam To destination gradient element type.
template <class From, class To>
std::size_t unpack_scan(const From* src, To* dst, std::size_t n, float factor) noexcept {
  static_assert(is_grad_element_v<From> && is_grad_element_v<To>, "unpack_scan: float, bfloat16 or half only");
  if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) {
    // Widen in bulk (hardware where available) straight into dst, then scale and count there.
    gsync::detail::halves_to_floats(src, dst, n);
    return unpack_scan(dst, dst, n, factor);
  } else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) {
    gsync::detail::bfloat16s_to_floats(src, dst, n);
    return unpack_scan(dst, dst, n, factor);
  }
  std::uint32_t bad = 0;  // per-call count; a 32-bit counter vectorizes better than size_t
  std::size_t total = 0;
  constexpr std::size_t block = std::size_t{1} << 30;  // keeps the 32-bit counter from wrapping
  for (std::size_t b = 0; b < n; b += block) {
    const std::size_t e = n - b < block ? n : b + block;
    bad = 0;
    for (std::size_t i = b; i < e; ++i) {
      const To v = detail::unpack_one<From, To>(src[i], factor);
      dst[i] = v;
      bad += detail::nonfinite_bit(detail::to_f(v));
    }
    total += bad;
  }
  return total;
}

/// Counts the non-finite values of `data[0..n)` without changing them.
/// \tparam T gradient element type.
template <class T>
std::size_t count_nonfinite(const T* data, std::size_t n) noexcept {
  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) c += detail::nonfinite_bit(detail::to_f(data[i]));
  return c;
}

/// Index of the first non-finite value of `data[0..n)`, or n when there is none.
/// \tparam T gradient element type.
template <class T>
std::size_t first_nonfinite(const T* data, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (detail::nonfinite_bit(detail::to_f(data[i])) != 0) return i;
  return n;
}

/// What to do when the synchronized gradients contain Inf or NaN.
enum class nonfinite_action {
  throw_error,  ///< finish() throws gsync::error(errc::non_finite) naming the tensors, on every rank
  report,       ///< finish() returns the reports and says the step must be skipped (a loss scaler backs off)
};

/// One tensor in which the synchronized gradients hold non-finite values (identical on every rank).
struct nonfinite_report {
  std::size_t bucket = 0;        ///< bucket the tensor was reduced in
  std::size_t tensor = 0;        ///< registration index of the tensor
  std::string name;              ///< the name given at registration
  std::size_t count = 0;         ///< number of non-finite elements in the tensor
  std::size_t first_index = 0;   ///< element index of the first one
  float first_value = 0.0f;      ///< its value (Inf, -Inf or NaN) after the unpack
};

/// A one-line description of `reports` for logs and error messages, e.g.
/// "non-finite gradients after synchronization (contributed by at least one rank) in 1 tensor:
/// 'fc2.weight' (tensor 3, bucket 0): 2 elements, first at [17] = nan".
inline std::string describe(const std::vector<nonfinite_report>& reports) {
  std::string s = "non-finite gradients after synchronization (contributed by at least one rank) in " +
                  std::to_string(reports.size()) + (reports.size() == 1 ? " tensor: " : " tensors: ");
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (i > 0) s += "; ";
    s += "'" + r.name + "' (tensor " + std::to_string(r.tensor) + ", bucket " + std::to_string(r.bucket) + "): " +
         std::to_string(r.count) + (r.count == 1 ? " element" : " elements") + ", first at [" +
         std::to_string(r.first_index) + "] = " + std::to_string(r.first_value);
  }
  return s;
}

}  // namespace gsync::grad
