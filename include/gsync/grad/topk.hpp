#pragma once
/// \file
/// Top-k selection by magnitude, for sparse gradient compression.
///
/// `select_topk(e, k, ...)` picks exactly k indices of the largest |e_i| and returns them in
/// ascending order (so that a later scatter-add walks memory forwards). The threshold tau is the
/// k-th largest magnitude; every element above tau is taken and, of the elements equal to tau,
/// the ones with the lowest indices until k are taken. Ties are thus broken by index, so the
/// selection is a pure function of e, whichever way tau is found:
///   - sampled (n >= 2^16 and k <= n/16): the magnitudes of 2^14 evenly spaced elements give a
///     bound t that about 2k elements reach; one pass over e collects those (index and
///     magnitude, in index order), and `std::nth_element` over the collected ones finds tau.
///     When fewer than k or more than 8k + 4096 elements reach t (a sample that misjudged the
///     distribution, or many equal values), the full method runs instead. One streaming pass
///     over e instead of a copy and a selection over all of it: much faster for small k
///     (benchmarks/results/from_code_comments.md);
///   - full: the magnitudes are copied into a scratch array and `std::nth_element` finds tau
///     (O(n) on average), then one pass over e in index order takes the elements.
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

namespace detail {

/// The full method of select_topk (see the file comment). \param scratch resized to e.size().
inline void select_topk_full(std::span<const float> e, std::size_t k, std::vector<float>& scratch, std::uint32_t* idx) {
  const std::size_t n = e.size();
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

/// The sampled method of select_topk (see the file comment). Returns false, with nothing
/// written to idx, when the sample's bound does not give between k and 8k + 4096 candidates.
/// \param scratch working storage (keys of the sample, then of the candidates).
/// \param cand working storage for the candidates' indices.
inline bool select_topk_sampled(std::span<const float> e, std::size_t k, std::vector<float>& scratch,
                                std::vector<std::uint32_t>& cand, std::uint32_t* idx) {
  const std::size_t n = e.size();
  constexpr std::size_t samples = std::size_t{1} << 14;
  scratch.resize(samples);
  for (std::size_t j = 0; j < samples; ++j) scratch[j] = topk_key(e[j * n / samples]);
  // Expect ~k*s/n sampled keys above tau; take the bound where about twice that many are (plus
  // a few, so that sampling noise rarely leaves fewer than k candidates).
  const std::size_t want = 2 * (k * samples / n) + 16;
  if (want >= samples) return false;
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(samples - want), scratch.end());
  const float t = scratch[samples - want];
  const std::size_t cap = 8 * k + 4096;
  cand.resize(cap);
  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (topk_key(e[i]) >= t) {
      if (c == cap) return false;
      cand[c++] = static_cast<std::uint32_t>(i);
    }
  }
  if (c < k) return false;
  scratch.resize(c);
  for (std::size_t j = 0; j < c; ++j) scratch[j] = topk_key(e[cand[j]]);
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(c - k), scratch.begin() + static_cast<std::ptrdiff_t>(c));
  const float tau = scratch[c - k];  // every element with key >= tau (>= t) is a candidate
  std::size_t above = 0;
  for (std::size_t j = c - k + 1; j < c; ++j) above += scratch[j] > tau ? 1 : 0;
  std::size_t ties = k - above;
  std::size_t out = 0;
  for (std::size_t j = 0; j < c && out < k; ++j) {  // candidates are in index order
    const float key = topk_key(e[cand[j]]);
    const bool take_tie = key == tau && ties > 0;
    if (key > tau || take_tie) {
      idx[out++] = cand[j];
      ties -= take_tie ? 1 : 0;
    }
  }
  if (out != k)
    throw error(errc::invalid_argument, "select_topk: selected " + std::to_string(out) + " of " + std::to_string(k) +
                                            " entries (was the input modified concurrently?)");
  return true;
}

}  // namespace detail

/// Writes into `idx` (k entries) the indices of the k elements of `e` with the largest
/// `topk_key`, in ascending order; ties at the threshold go to the lowest indices.
/// \param scratch reused working storage (up to e.size() floats).
/// \param cand reused working storage (up to 8k + 4096 indices).
/// Requires 1 <= k <= e.size() <= 2^32 - 1.
inline void select_topk(std::span<const float> e, std::size_t k, std::vector<float>& scratch, std::vector<std::uint32_t>& cand,
                        std::uint32_t* idx) {
  const std::size_t n = e.size();
  if (k == 0 || k > n) throw error(errc::invalid_argument, "select_topk: k = " + std::to_string(k) + " for " + std::to_string(n) + " elements");
  if (n > std::numeric_limits<std::uint32_t>::max())
    throw error(errc::invalid_argument, "select_topk: " + std::to_string(n) + " elements do not fit 32-bit indices");
  if (k == n) {
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(i);
    return;
  }
  if (n >= (std::size_t{1} << 16) && k <= n / 16 && detail::select_topk_sampled(e, k, scratch, cand, idx)) return;
  detail::select_topk_full(e, k, scratch, idx);
}

/// select_topk with its own candidate storage (for callers that keep only `scratch`).
inline void select_topk(std::span<const float> e, std::size_t k, std::vector<float>& scratch, std::uint32_t* idx) {
  std::vector<std::uint32_t> cand;
  select_topk(e, k, scratch, cand, idx);
}

}  // namespace gsync::grad
