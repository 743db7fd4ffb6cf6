#pragma once
/// \file
/// Host staging plans of the collectives that `staged_plan::cut` does not fit: gather and scatter
/// (N blocks on the root, one elsewhere: every rank cuts by the root's side, `rooted_plan`) and the
/// v-collectives (allgatherv, reduce_scatterv, alltoallv: blocks of different sizes, packed, cut
/// into windows of the same columns of every block, cuda/staging.hpp `staged_buffer::sizes`). The
/// pinned mirrors stay within the staging size however large the buffers. Window w of a block of
/// n elements holds its columns [w * we, (w + 1) * we); each window runs the collective on those
/// pieces (`window_counts`).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "gsync/cuda/staging.hpp"
#include "gsync/dispatch/device_collective.hpp"

namespace gsync::detail {

/// Gather's and scatter's plan: `c` elements per rank, N blocks on the root's side of `in` or
/// `out` and one on the others'; every rank cuts windows by the root's mirror (N + 1 blocks), so
/// all make the same number.
template <class T>
cuda::detail::staged_plan rooted_plan(cuda::detail::staged_buffer in, cuda::detail::staged_buffer out, std::size_t n, std::size_t c,
                                      std::size_t staging_bytes) {
  cuda::detail::staged_plan plan{in, out, false};
  const std::size_t we = std::max<std::size_t>(1, std::min(staging_bytes / ((n + 1) * sizeof(T)), std::max<std::size_t>(c, 1)));
  plan.in.window_elems = plan.out.window_elems = we;
  plan.windows = c == 0 ? 0 : (c + we - 1) / we;
  return plan;
}

/// A device buffer of blocks of `sizes` elements of T, packed in rank order.
template <class T>
cuda::detail::staged_buffer staged_varied(T* dev, std::span<const std::size_t> sizes, bool copy_in, bool copy_out) {
  std::size_t largest = 0;
  for (std::size_t x : sizes) largest = std::max(largest, x);
  auto b = staged(dev, sizes.size(), largest, copy_in, copy_out);
  b.sizes = std::make_shared<const std::vector<std::size_t>>(sizes.begin(), sizes.end());
  return b;
}

/// Columns per block in one window such that `blocks` blocks of `elem`-byte elements fit in
/// `staging_bytes` with both parts' alignment: the same on every rank (it reads only the world
/// size and the settings).
inline std::size_t varied_window(std::size_t staging_bytes, std::size_t blocks, std::size_t elem) {
  const std::size_t room = staging_bytes > 2 * cuda::detail::mirror_align ? staging_bytes - 2 * cuda::detail::mirror_align : 0;
  return std::max<std::size_t>(1, room / (std::max<std::size_t>(1, blocks) * elem));
}

/// The plan of `in` and `out` cut into windows of `we` columns.
inline cuda::detail::staged_plan varied_plan(cuda::detail::staged_buffer in, cuda::detail::staged_buffer out, std::size_t we) {
  cuda::detail::staged_plan plan{std::move(in), std::move(out), false};
  plan.in.window_elems = plan.out.window_elems = we;
  plan.windows = std::max(plan.in.windows(), plan.out.windows());
  return plan;
}

/// The counts of window `w` of `we` columns: block b's elements in it.
inline std::vector<std::size_t> window_counts(std::span<const std::size_t> counts, std::size_t w, std::size_t we) {
  std::vector<std::size_t> sub(counts.size());
  for (std::size_t b = 0; b < counts.size(); ++b) {
    const std::size_t first = w * we;
    sub[b] = counts[b] <= first ? 0 : std::min(we, counts[b] - first);
  }
  return sub;
}

/// The sum of `v`.
inline std::size_t sum_of(const std::vector<std::size_t>& v) noexcept {
  std::size_t t = 0;
  for (std::size_t x : v) t += x;
  return t;
}

}  // namespace gsync::detail
