#pragma once
// Deterministic inputs for every (dtype, op, rank, index) and a double-precision reference with a
// tolerance per dtype. Inputs are chosen so integer results never overflow and floating results
// stay well conditioned, so any wrong element is a bug, not rounding.

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <gsync/gsync.hpp>

namespace gsync_test {

inline std::uint32_t mix(std::uint64_t i, int r, std::uint32_t salt) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u + static_cast<std::uint32_t>(r) * 40503u + salt;
  h ^= h >> 15;
  h *= 2246822519u;
  return h ^ (h >> 13);
}

template <class T> inline constexpr bool is_float_v = std::is_floating_point_v<T> || std::is_same_v<T, gsync::half> || std::is_same_v<T, gsync::bfloat16>;

/// Input element of rank r at index i for operator Op.
template <class T, class Op>
T input(int r, std::uint64_t i) {
  const std::uint32_t h = mix(i, r, 12345);
  if constexpr (std::is_same_v<Op, gsync::op::prod>) {
    // Products over up to 8 ranks stay tiny: at most two factors of 2 per element, signs random.
    const bool two = (i + static_cast<std::uint64_t>(r)) % 7 == 0;
    if constexpr (is_float_v<T>) return T(static_cast<float>(0.75 + (h % 64) / 128.0));  // [0.75, 1.25)
    else if constexpr (std::is_signed_v<T>) return static_cast<T>((two ? 2 : 1) * (h % 3 == 0 ? -1 : 1));
    else return static_cast<T>(two ? 2 : 1);
  } else if constexpr (std::is_same_v<Op, gsync::op::min> || std::is_same_v<Op, gsync::op::max>) {
    if constexpr (is_float_v<T>) return T(static_cast<float>((static_cast<int>(h % 20001) - 10000) / 64.0));
    else if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<int>(h % 201) - 100);
    else return static_cast<T>(h % 201);
  } else {  // sum, avg, user ops built on addition
    if constexpr (is_float_v<T>) return T(static_cast<float>((static_cast<int>(h % 2001) - 1000) / 37.0));
    else if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<int>(h % 31) - 15);
    else return static_cast<T>(h % 16);
  }
}

template <class T> double to_double(T v) {
  if constexpr (std::is_same_v<T, gsync::half> || std::is_same_v<T, gsync::bfloat16>) return static_cast<double>(static_cast<float>(v));
  else return static_cast<double>(v);
}

/// Relative precision of T (unit roundoff), 0 for integers.
template <class T> double eps() {
  if constexpr (std::is_same_v<T, gsync::half>) return 1.0 / 2048;
  else if constexpr (std::is_same_v<T, gsync::bfloat16>) return 1.0 / 256;
  else if constexpr (std::is_same_v<T, float>) return 1.0 / 16777216;
  else if constexpr (std::is_same_v<T, double>) return 1.0 / 9007199254740992.0;
  else return 0;
}

/// Checks element i of a result against the double-precision reference over n ranks.
/// Returns true when within tolerance (exact for integers).
template <class T, class Op>
bool check_element(T got, int n, std::uint64_t i) {
  double acc = to_double(input<T, Op>(0, i)), mag = std::fabs(acc);
  for (int r = 1; r < n; ++r) {
    const double x = to_double(input<T, Op>(r, i));
    mag += std::fabs(x);
    if constexpr (std::is_same_v<Op, gsync::op::prod>) acc *= x;
    else if constexpr (std::is_same_v<Op, gsync::op::min>) acc = std::min(acc, x);
    else if constexpr (std::is_same_v<Op, gsync::op::max>) acc = std::max(acc, x);
    else acc += x;
  }
  if constexpr (std::is_same_v<Op, gsync::op::avg>) {
    if constexpr (is_float_v<T>) {
      acc /= n;
      mag /= n;
    } else {
      acc = std::is_signed_v<T> ? static_cast<double>(static_cast<long long>(acc) / n)
                                : static_cast<double>(static_cast<unsigned long long>(acc) / static_cast<unsigned>(n));
    }
  }
  const double g = to_double(got);
  if constexpr (!is_float_v<T>) return g == acc;
  else {
    if constexpr (std::is_same_v<Op, gsync::op::prod>) mag = std::fabs(acc);
    // Each of the n-1 combination steps rounds once to T, plus the inputs' own rounding.
    const double tol = (n + 1) * eps<T>() * std::max(mag, 1e-30) * 1.01;
    return std::fabs(g - acc) <= tol;
  }
}

/// Calls `f.template operator()<T>()` for every element type gsync reduces, in one order.
/// The sanitizer builds (GSYNC_TEST_SANITIZE, tools/sanitize.sh) take one type of each element
/// size and kind (both 16-bit floats, signed and unsigned integers of 1, 4 and 8 bytes): what a
/// sanitizer can find depends on sizes and code paths, which these cover, and the files that
/// sweep device collectives compile in about half the time. The plain build runs all twelve.
template <class F>
void for_each_dtype(F&& f) {
  f.template operator()<float>();
  f.template operator()<double>();
  f.template operator()<gsync::half>();
  f.template operator()<gsync::bfloat16>();
  f.template operator()<std::int8_t>();
#ifndef GSYNC_TEST_SANITIZE
  f.template operator()<std::uint8_t>();
  f.template operator()<std::int16_t>();
  f.template operator()<std::uint16_t>();
#endif
  f.template operator()<std::int32_t>();
#ifndef GSYNC_TEST_SANITIZE
  f.template operator()<std::uint32_t>();
  f.template operator()<std::int64_t>();
#endif
  f.template operator()<std::uint64_t>();
}

/// The element types the device-path tests sweep (staging, CUDA IPC, hierarchical, the GPU
/// program tests/cuda/device_collectives.cpp): one per element size and kind, the set above takes
/// under the sanitizers. What those paths do per type depends on its size (chunks, windows, slots)
/// and kind; the per-type reduction they call is checked for all twelve types against the host
/// loops (test_cuda_packs, and tests/cuda/kernels.cu on a GPU) and through every host algorithm.
/// The twelve here would double the build time of four of the costliest files (CI time).
template <class F>
void for_each_device_dtype(F&& f) {
  f.template operator()<float>();
  f.template operator()<double>();
  f.template operator()<gsync::half>();
  f.template operator()<gsync::bfloat16>();
  f.template operator()<std::int8_t>();
  f.template operator()<std::int32_t>();
  f.template operator()<std::uint64_t>();
}

/// Calls `f.template operator()<Op>()` for every built-in reduction operator.
template <class F>
void for_each_op(F&& f) {
  f.template operator()<gsync::op::sum>();
  f.template operator()<gsync::op::prod>();
  f.template operator()<gsync::op::min>();
  f.template operator()<gsync::op::max>();
  f.template operator()<gsync::op::avg>();
}

/// A gradient value for element i: spread over about +-667, with a value beyond the 16-bit types'
/// range (1e30) every 97 elements and a NaN every 211, so casts overflow and scans find some.
inline float gradient_value(std::uint64_t i) {
  if (i % 211 == 7) return std::numeric_limits<float>::quiet_NaN();
  if (i % 97 == 5) return 1e30f;
  return static_cast<float>((static_cast<int>(mix(i, 7, 3) % 4001) - 2000) / 3.0);
}

}  // namespace gsync_test
