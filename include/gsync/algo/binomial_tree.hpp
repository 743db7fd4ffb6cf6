#pragma once
/// \file
/// Binomial-tree broadcast and reduce: latency-optimal for small messages.
///
/// How chunks move. Ranks are renumbered relative to the root, v = (r - root) mod N, so the root
/// is v = 0. The tree has ceil(log2 N) levels: rank v's parent is v with its lowest set bit
/// cleared, and its children are v + 2^k for every 2^k below that bit (v + 2^k < N).
///   Broadcast. Rank v first receives the whole buffer from its parent (the root has none), then
///   sends it to its children, largest subtree (largest 2^k) first, so the buffer reaches every
///   rank after ceil(log2 N) message times.
///   Reduce. The other way round: rank v receives the partial of each child in turn, smallest 2^k
///   first, and combines it with its own value (its value on the left), then sends the result to
///   its parent; the root's combination with its last child is the last one (finalize applied, avg
///   divides there) and lands in the root's output. Non-root ranks accumulate in the
///   communicator's fixed scratch (their output is not theirs to write), so reduce walks the
///   buffer in scratch-sized pieces, each followed by `finish()` before the scratch is reused.
/// Cost: ceil(log2 N) latencies, each moving the whole buffer (or piece): better than the
/// pipelined chain (N-1 latencies) while the buffer is small.

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "gsync/core/chunking.hpp"

namespace gsync::algo {

/// Binomial-tree algorithm policy (latency-optimal broadcast and reduce).
struct binomial_tree {
  static constexpr std::string_view name = "binomial_tree";
  static constexpr std::string_view aliases = "tree";  ///< other names GSYNC_ALGO* accept

  /// Broadcast of `p.count()` elements (the output buffer) from `root`. \tparam P a primitives type.
  template <class P>
  static void broadcast(P& p, int root) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return;
    const int v = wrap(r - root, n);
    const auto all = p.out({0, p.count()});
    int mask = 1;
    for (; mask < n; mask <<= 1)
      if (v & mask) {
        p.recv(wrap(r - mask, n), all);
        break;
      }
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (v + mask < n) p.send(wrap(r + mask, n), all);
    p.finish();
  }

  /// Reduce of `p.count()` elements to `root` (output used on the root only).
  /// \tparam P a primitives type.
  template <class P>
  static void reduce(P& p, int root) {
    const int n = p.size(), r = p.rank();
    const std::size_t count = p.count();
    if (n == 1) return p.copy_final(p.out({0, count}), p.in({0, count}));
    const int v = wrap(r - root, n);
    for_each_piece(count, p.scratch_elems(), [&](const range mine) {
      const auto acc = v == 0 ? p.out(mine) : p.scratch({0, mine.count});
      bool combined = false;  // acc holds a partial (else the partial is still just the input)
      for (int mask = 1; mask < n; mask <<= 1) {
        if (v & mask) {
          p.send(wrap(r - mask, n), combined ? acc : p.in(mine));
          p.finish();  // the scratch is reused by the next piece
          break;
        }
        if (v + mask < n) {
          const bool last = v == 0 && (mask << 1) >= n;
          p.recv_reduce(wrap(r + mask, n), acc, combined ? acc : p.in(mine), last);
          combined = true;
        }
      }
    });
  }
};

}  // namespace gsync::algo
