#pragma once
/// \file
/// Chunk and segment arithmetic, pure and tested alone (tests/test_chunking.cpp).
///
/// A buffer of `count` elements is split into `parts` contiguous near-equal ranges: the first
/// `count % parts` ranges get one element more. The ring splits the buffer into one chunk per rank,
/// and every chunk into the same number of segments (the pipelining unit), so that segment k of a
/// chunk is a message both neighbours agree on without talking.

#include <algorithm>
#include <cstddef>

namespace gsync {

/// A contiguous element range [offset, offset + count).
struct range {
  std::size_t offset = 0;  ///< first element
  std::size_t count = 0;   ///< number of elements
  friend constexpr bool operator==(const range&, const range&) = default;
};

/// Part `i` of `count` elements split into `parts` near-equal contiguous ranges (parts >= 1, i < parts).
constexpr range split(std::size_t count, std::size_t parts, std::size_t i) noexcept {
  const std::size_t q = count / parts, rem = count % parts;
  return {i * q + std::min(i, rem), q + (i < rem ? 1 : 0)};
}

/// Ceiling division for sizes.
constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept { return (a + b - 1) / b; }

/// Ring layout: `world` chunks of near-equal size, each cut into `segments()` segments of at most
/// `segment_elems` elements (the same segment count for every chunk; a chunk smaller than the others
/// by one element simply has slightly smaller segments, an empty chunk has empty segments).
class ring_layout {
 public:
  /// \param count elements in the whole buffer; \param world ranks (>= 1);
  /// \param segment_elems largest segment in elements (>= 1).
  constexpr ring_layout(std::size_t count, int world, std::size_t segment_elems) noexcept
      : count_(count), world_(static_cast<std::size_t>(world)),
        segments_(std::max<std::size_t>(1, ceil_div(ceil_div(count, world_), std::max<std::size_t>(1, segment_elems)))) {}

  /// Chunk `c` (0 <= c < world) of the buffer.
  constexpr range chunk(int c) const noexcept { return split(count_, world_, static_cast<std::size_t>(c)); }
  /// Number of segments in every chunk (>= 1).
  constexpr std::size_t segments() const noexcept { return segments_; }
  /// Segment `k` of chunk `c`, as a range of the whole buffer.
  constexpr range segment(int c, std::size_t k) const noexcept {
    const range ch = chunk(c);
    const range s = split(ch.count, segments_, k);
    return {ch.offset + s.offset, s.count};
  }

 private:
  std::size_t count_, world_, segments_;
};

/// `a mod n` in [0, n) for possibly negative a.
constexpr int wrap(int a, int n) noexcept { return ((a % n) + n) % n; }

}  // namespace gsync
