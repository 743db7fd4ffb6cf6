#pragma once
/// \file
/// Chunk and segment arithmetic, pure and tested alone (tests/test_chunking.cpp).
///
/// A buffer of `count` elements is split into `parts` contiguous near-equal ranges: the first
/// `count % parts` ranges get one element more. The ring splits the buffer into one chunk per rank,
/// and every chunk into the same number of segments (the pipelining unit), so that segment k of a
/// chunk is a message both neighbours agree on without talking. Collectives whose blocks are
/// exactly one per rank (reduce-scatter, allgather) use `block_layout` instead.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

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

/// Walks `count` elements in pieces of `width` columns (at least 1; the last piece may be shorter),
/// calling `f(range)` for each in order: the loop of the schedules that keep partials in the
/// communicator's fixed scratch (ring and binomial-tree reduce, ring and dissemination
/// reduce-scatter). Each piece is a whole run of the schedule over its columns; `f` ends it with
/// `finish()` where the next piece reuses the scratch.
template <class F>
constexpr void for_each_piece(std::size_t count, std::size_t width, F&& f) {
  width = std::max<std::size_t>(1, width);
  for (std::size_t col = 0; col < count; col += width) f(range{col, std::min(width, count - col)});
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

/// Recursive halving / doubling layout (Rabenseifner) over a power-of-two group of `group` ranks,
/// numbered 0..group-1 (the "core" of a world, after non-power-of-two ranks have been folded in).
///
/// The buffer is split into `group` near-equal blocks (`split`); block v is the one rank v owns when
/// the reduce-scatter ends. Before step s (0 <= s < steps()) rank v holds the contiguous block
/// interval of the `group >> s` blocks whose indices agree with v in every bit above
/// `distance(s) = group >> (s + 1)`; its partner is v XOR distance(s). At step s the interval is
/// halved: the half that contains block v is `kept(v, s)`, the other half `given(v, s)` (which is
/// exactly what the partner keeps). The allgather replays the steps backwards: at step s a rank
/// sends kept(v, s) and receives given(v, s), so the interval doubles again.
class halving_doubling_layout {
 public:
  /// \param count elements in the whole buffer; \param group ranks in the core (a power of two >= 1).
  constexpr halving_doubling_layout(std::size_t count, int group) noexcept
      : count_(count), group_(group), steps_(0) {
    for (int g = group; g > 1; g >>= 1) ++steps_;
  }

  /// Number of halving (and of doubling) steps: log2(group).
  constexpr int steps() const noexcept { return steps_; }
  /// Distance to the partner at step s: group >> (s + 1).
  constexpr int distance(int s) const noexcept { return group_ >> (s + 1); }
  /// Partner of rank v at step s.
  constexpr int partner(int v, int s) const noexcept { return v ^ distance(s); }
  /// Elements of blocks [first, first + n) as one range.
  constexpr range blocks(int first, int n) const noexcept {
    if (n <= 0) return {split(count_, static_cast<std::size_t>(group_), static_cast<std::size_t>(first)).offset, 0};
    const range a = split(count_, static_cast<std::size_t>(group_), static_cast<std::size_t>(first));
    const range b = split(count_, static_cast<std::size_t>(group_), static_cast<std::size_t>(first + n - 1));
    return {a.offset, b.offset + b.count - a.offset};
  }
  /// What rank v holds before step s (s == steps(): after the last step, its own block).
  constexpr range held(int v, int s) const noexcept {
    const int n = group_ >> s;
    return blocks(v & ~(n - 1), n);
  }
  /// The half of held(v, s) that rank v keeps (and reduces) at step s; held(v, s + 1).
  constexpr range kept(int v, int s) const noexcept { return held(v, s + 1); }
  /// The half of held(v, s) that rank v hands to its partner at step s.
  constexpr range given(int v, int s) const noexcept { return held(partner(v, s), s + 1); }
  /// The block rank v owns (fully reduced) after the reduce-scatter.
  constexpr range owned(int v) const noexcept { return held(v, steps_); }

 private:
  std::size_t count_;
  int group_, steps_;
};

/// Block layout of the collectives whose buffers hold one block of exactly `width` elements per
/// rank (reduce-scatter, allgather): block `b` starts at `b * stride`; only the columns
/// [column, column + width) of each block are covered (a schedule that works through the blocks in
/// scratch-sized pieces passes the piece's columns; otherwise column = 0, width = stride). Every
/// covered range is cut into the same `segments()` segments of at most `segment_elems` elements.
class block_layout {
 public:
  /// \param stride elements from one block to the next (0: every block is the same buffer range);
  /// \param column first covered element within a block; \param width covered elements per block;
  /// \param segment_elems largest segment in elements (>= 1).
  constexpr block_layout(std::size_t stride, std::size_t column, std::size_t width, std::size_t segment_elems) noexcept
      : stride_(stride), column_(column), width_(width),
        segments_(std::max<std::size_t>(1, ceil_div(width, std::max<std::size_t>(1, segment_elems)))) {}

  /// The covered range of block `b` (b >= 0).
  constexpr range block(int b) const noexcept { return {static_cast<std::size_t>(b) * stride_ + column_, width_}; }
  /// Number of segments per block (>= 1; one empty segment when width is 0).
  constexpr std::size_t segments() const noexcept { return segments_; }
  /// Segment `k` of block `b`, as a range of the whole buffer.
  constexpr range segment(int b, std::size_t k) const noexcept {
    const range s = split(width_, segments_, k);
    return {static_cast<std::size_t>(b) * stride_ + column_ + s.offset, s.count};
  }

 private:
  std::size_t stride_, column_, width_, segments_;
};

/// Block layout of the v-collectives (allgatherv, reduce_scatterv, alltoallv): block `b` holds
/// `counts[b]` elements, the blocks packed in rank order (block b starts at counts[0] + ... +
/// counts[b-1]). `segment(b, k, column, width)` covers columns [column, column + width) of block b
/// (clipped to the block), cut into `segments(b, ...)` segments of at most `segment_elems`
/// elements; a block with no element in those columns has no segment, and both ends of a message
/// derive that alike from the counts, so an empty block is never sent.
class varied_blocks {
 public:
  /// \param counts elements per block; \param segment_elems largest segment in elements (>= 1).
  varied_blocks(std::span<const std::size_t> counts, std::size_t segment_elems)
      : off_(counts.size() + 1, 0), seg_(std::max<std::size_t>(1, segment_elems)) {
    for (std::size_t b = 0; b < counts.size(); ++b) off_[b + 1] = off_[b] + counts[b];
  }

  /// Elements in all blocks.
  std::size_t total() const noexcept { return off_.back(); }
  /// Elements in block `b`.
  std::size_t count(int b) const noexcept { return off_[static_cast<std::size_t>(b) + 1] - off_[static_cast<std::size_t>(b)]; }
  /// The largest block's element count.
  std::size_t largest() const noexcept {
    std::size_t m = 0;
    for (std::size_t b = 0; b + 1 < off_.size(); ++b) m = std::max(m, off_[b + 1] - off_[b]);
    return m;
  }
  /// Block `b` as a range of the whole buffer.
  range block(int b) const noexcept { return {off_[static_cast<std::size_t>(b)], count(b)}; }
  /// Block `b`'s columns [column, column + width), clipped to the block, as a range of the whole buffer.
  range columns(int b, std::size_t column, std::size_t width) const noexcept {
    const std::size_t n = count(b);
    return {off_[static_cast<std::size_t>(b)] + std::min(column, n), column >= n ? 0 : std::min(width, n - column)};
  }
  /// Segments of `columns(b, column, width)`: 0 when it is empty.
  std::size_t segments(int b, std::size_t column = 0, std::size_t width = static_cast<std::size_t>(-1)) const noexcept {
    return ceil_div(columns(b, column, width).count, seg_);
  }
  /// Segment `k` of `columns(b, column, width)`, as a range of the whole buffer.
  range segment(int b, std::size_t k, std::size_t column = 0, std::size_t width = static_cast<std::size_t>(-1)) const noexcept {
    const range c = columns(b, column, width);
    const range s = split(c.count, ceil_div(c.count, seg_), k);
    return {c.offset + s.offset, s.count};
  }

 private:
  std::vector<std::size_t> off_;  // N + 1 prefix sums
  std::size_t seg_;
};

/// `a mod n` in [0, n) for possibly negative a.
constexpr int wrap(int a, int n) noexcept { return ((a % n) + n) % n; }

}  // namespace gsync
