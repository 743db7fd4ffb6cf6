#pragma once
/// \file
/// Dissemination schedules: the barrier, and the latency-optimal allgather and reduce-scatter
/// (Bruck's pattern with every block kept in its final place, so no rotation at the end).
///
/// How messages move. In round k (distance d = 2^k, k = 0 .. ceil(log2 N)-1) rank r talks to
/// r-d and r+d only, so every rank takes part in ceil(log2 N) rounds instead of the ring's N-1
/// steps, for any N (not only powers of two).
/// - barrier: rank r sends a zero-byte message to r+d and waits for one from r-d. After round k a
///   rank has heard, directly or through the ranks it heard from, from the 2^(k+1)-1 ranks before
///   it, so after the last round it has heard from every rank.
/// - allgather: before round k rank r holds blocks r, r+1, ..., r+d-1 (mod N) in their places in
///   the output; it sends the first m = min(d, N-d) of them to r-d and receives blocks r+d ..
///   r+d+m-1 from r+d. A run of blocks that wraps past block N-1 travels as two messages. Every
///   rank receives each other block exactly once: (N-1)c elements in, as for the ring.
/// - reduce_scatter: the allgather run backwards (rounds from the largest distance down, data
///   flowing the other way, combining instead of copying): rank r keeps partial sums of the
///   blocks in the communicator's scratch (a copy of its input first); in each round it sends
///   its partials of blocks r+d .. r+d+m-1 to r+d and combines the partials of blocks r .. r+m-1
///   that r-d sends into its own; the last round (d = 1) combines block r into the output, with
///   the finalize (avg divides). Each rank's contribution to a block is combined exactly once.
///   The partials of N blocks live in the scratch, so larger calls walk the blocks in column
///   pieces of scratch/N elements, each piece a full dissemination followed by `finish()` before
///   the next piece reuses the scratch (more rounds, but the schedule stays the one asked for).
/// No message of a round is sent from memory that a later round writes: allgather writes only
/// blocks it does not hold yet, and reduce-scatter only partials it keeps.

#include <algorithm>
#include <string>
#include <string_view>

#include "gsync/core/chunking.hpp"
#include "gsync/core/error.hpp"

namespace gsync::algo {

/// Dissemination algorithm policy (barrier, allgather, reduce_scatter).
struct dissemination {
  static constexpr std::string_view name = "dissemination";

  /// The barrier schedule over primitives `p` (messages are empty regions). \tparam P a primitives type.
  template <class P>
  static void barrier(P& p) {
    const int n = p.size(), r = p.rank();
    for (int d = 1; d < n; d <<= 1) {
      p.send(wrap(r + d, n), p.in({0, 0}));
      p.recv(wrap(r - d, n), p.out({0, 0}));
    }
    p.finish();
  }

  /// Calls `f(range)` for the element ranges of blocks first, first+1, ..., first+m-1 (mod n) of
  /// c elements each: one range, or two where the run wraps past block n-1.
  template <class F>
  static void block_run(int first, int m, int n, std::size_t c, F&& f) {
    const int head = first + m <= n ? m : n - first;
    f(range{static_cast<std::size_t>(first) * c, static_cast<std::size_t>(head) * c});
    if (head < m) f(range{0, static_cast<std::size_t>(m - head) * c});
  }

  /// Allgather: `p.count()` = c elements per block; the input is one block, the output N blocks.
  /// \tparam P a primitives type.
  template <class P>
  static void allgather(P& p) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    p.copy(p.out({static_cast<std::size_t>(r) * c, c}), p.in({0, c}));
    for (int d = 1; d < n; d <<= 1) {
      const int m = d < n - d ? d : n - d;
      block_run(r, m, n, c, [&](range g) { p.send(wrap(r - d, n), p.out(g)); });
      block_run(wrap(r + d, n), m, n, c, [&](range g) { p.recv(wrap(r + d, n), p.out(g)); });
    }
    p.finish();
  }

  /// Reduce-scatter: `p.count()` = c elements per block; the input is N blocks, the output block r.
  /// \tparam P a primitives type.
  template <class P>
  static void reduce_scatter(P& p) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    if (n == 1) return p.copy_final(p.out({0, c}), p.in({0, c}));
    if (p.scratch_elems() < static_cast<std::size_t>(n))
      throw error(errc::invalid_argument, "dissemination reduce_scatter keeps a partial of each of the " + std::to_string(n) +
                                              " blocks in the communicator's scratch, which holds only " +
                                              std::to_string(p.scratch_elems()) + " elements of this type: use the ring");
    const std::size_t width = std::min(c, p.scratch_elems() / static_cast<std::size_t>(n));  // columns per piece
    int top = 1;
    while (top * 2 < n) top *= 2;  // the largest distance
    for_each_piece(c, width, [&](const range piece) {
      const std::size_t col = piece.offset, w = piece.count;
      for (int b = 0; b < n; ++b)  // partials: block b's columns of this piece at b*w
        p.copy(p.scratch({static_cast<std::size_t>(b) * w, w}), p.in({static_cast<std::size_t>(b) * c + col, w}));
      for (int d = top; d >= 1; d >>= 1) {
        const int m = d < n - d ? d : n - d;
        block_run(wrap(r + d, n), m, n, w, [&](range g) { p.send(wrap(r + d, n), p.scratch(g)); });
        block_run(r, m, n, w, [&](range g) {
          if (d == 1) p.recv_reduce(wrap(r - d, n), p.out({col, w}), p.scratch(g), /*final=*/true);  // m = 1: block r
          else p.recv_reduce(wrap(r - d, n), p.scratch(g), p.scratch(g), false);
        });
      }
      p.finish();  // the next piece reuses the scratch
    });
  }
};

}  // namespace gsync::algo
