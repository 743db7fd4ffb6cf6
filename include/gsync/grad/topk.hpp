#pragma once
/// \file
/// Top-k selection by magnitude, for sparse gradient compression.
///
/// `select_topk(e, k, ...)` picks exactly k indices of the largest |e_i| and returns them in
/// ascending order (so that a later scatter-add walks memory forwards). How: the magnitudes are
/// copied into a scratch array and `std::nth_element` finds the threshold tau, the k-th largest
/// (O(n) on average); one pass over e in index order then takes every element above tau and, of
/// the elements equal to tau, the ones with the lowest indices until k are taken. Ties are thus
/// broken by index, so the selection is a pure function of e.
///
/// Non-finite values: the magnitude key of a NaN is +Inf (NaN has no order, and nth_element
/// needs a strict weak ordering), so NaN and Inf elements are selected before any finite one.
/// When at most k elements are non-finite they are all sent; otherwise k of them are: either
/// way the synced result holds a non-finite value, which a NaN detector downstream sees.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "gsync/core/error.hpp"

namespace gsync::grad {

/// Number of entries top-k keeps of n: max(1, ceil(ratio * n)), at most n; 0 when n is 0.
/// \param ratio fraction kept, in (0, 1].
[[nodiscard]] inline std::size_t topk_count(std::size_t n, double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0))
    throw error(errc::invalid_argument, "topk: ratio " + std::to_string(ratio) + " is outside (0, 1]");
  if (n == 0) return 0;
  const double want = std::ceil(ratio * static_cast<double>(n));
  const std::size_t k = want >= static_cast<double>(n) ? n : static_cast<std::size_t>(want);
  return std::clamp<std::size_t>(k, 1, n);
}

/// Ordering key of a value: |x|, with NaN mapped to +Inf.
[[nodiscard]] inline float topk_key(float x) noexcept {
  const std::uint32_t a = std::bit_cast<std::uint32_t>(x) & 0x7fffffffu;
  return std::bit_cast<float>(a > 0x7f800000u ? 0x7f800000u : a);
}

/// Writes into `idx` (k entries) the indices of the k elements of `e` with the largest
/// `topk_key`, in ascending order; ties at the threshold go to the lowest indices.
/// \param scratch reused working storage (resized to e.size()).
/// Requires 1 <= k <= e.size() <= 2^32 - 1.
inline void select_topk(std::span<const float> e, std::size_t k, std::vector<float>& scratch, std::uint32_t* idx) {
  const std::size_t n = e.size();
  if (k == 0 || k > n) throw error(errc::invalid_argument, "select_topk: k = " + std::to_string(k) + " for " + std::to_string(n) + " elements");
  if (n > std::numeric_limits<std::uint32_t>::max())
    throw error(errc::invalid_argument, "select_topk: " + std::to_string(n) + " elements do not fit 32-bit indices");
  if (k == n) {
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(i);
    return;
  }
  scratch.resize(n);
  float* m = scratch.data();
  for (std::size_t i = 0; i < n; ++i) m[i] = topk_key(e[i]);
  std::nth_element(m, m + (n - k), m + n);
  const float tau = m[n - k];  // k-th largest key; m[n-k+1 ..] are >= tau
  std::size_t above = 0;
  for (std::size_t i = n - k + 1; i < n; ++i) above += m[i] > tau ? 1 : 0;
  std::size_t ties = k - above;  // how many keys equal to tau to take (>= 1)
  std::size_t out = 0;
  for (std::size_t i = 0; i < n && out < k; ++i) {
    const float key = topk_key(e[i]);
    const bool take_tie = key == tau && ties > 0;
    if (key > tau || take_tie) {
      idx[out++] = static_cast<std::uint32_t>(i);
      ties -= take_tie ? 1 : 0;
    }
  }
  if (out != k)  // cannot happen unless e changed under us
    throw error(errc::invalid_argument, "select_topk: selected " + std::to_string(out) + " of " + std::to_string(k) +
                                            " entries (was the input modified concurrently?)");
}

}  // namespace gsync::grad
