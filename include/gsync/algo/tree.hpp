#pragma once
/// \file
/// Double-binary-tree allreduce, pipelined: log-latency like recursive doubling, but each rank
/// moves about twice the buffer whatever N, so it keeps scaling where the ring's 2(N-1) latencies
/// dominate (medium messages on many ranks).
///
/// How chunks move. Two binary trees span the ranks (core/tree_shape.hpp): tree 0 and tree 1, the
/// same in-order shape shifted by one rank, so that every rank is an interior node in at most one
/// of them. The buffer is cut in two halves; tree t carries half t. Each half is cut into S
/// segments of at most `segment_elems()` elements (the same S for both halves).
///   Up (reduce). For segment k, a leaf sends its input segment to its parent. An interior node
///   receives the segment from its left child, combining it with its own input into its output as
///   it streams in, then from its right child, combining again, and sends the partial result to
///   its parent. At the root the last combination is the final one (avg divides there).
///   Down (broadcast). The root sends the final segment to its children; every other node receives
///   it from its parent into its output and forwards it to its children.
/// Pipelining. Let d(x) be the depth of node x and H the tree's height. "Up k" at x runs in round
/// k + H - d(x) and "down k" in round k + H + d(x): every message is received exactly one round
/// after it is sent (the root's up and down of segment k share round k + H, up first). Each rank
/// runs its four streams of operations (up and down in either tree) merged in round order, tree 0
/// before tree 1 within a round, so segment k+1 travels up while segment k travels down and the
/// two trees run at the same time. Two properties follow. No deadlock: a receive in round j waits
/// for a send of round j-1, which every rank queues before it blocks in round j. No mix-up: all
/// messages of one operation share one wire identity, so the messages from x to y must be received
/// in the order they were sent; as each arrives exactly one round later and same-round messages go
/// tree 0 first on both sides, the orders agree. The schedule takes S + 2H rounds (H <= log2 N).
/// Results are bitwise identical on every rank: each segment is combined once, along its tree's
/// reduction order, and the root's result is only copied downwards.
/// Buffer safety: a node's output segment, sent up at "up k", is overwritten only at "down k" by
/// the final value, which its parent sends only after having received (so the transport has
/// released) the partial one. Out of place, the input is only read.

#include <algorithm>
#include <string_view>

#include "gsync/core/chunking.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/core/tree_shape.hpp"

namespace gsync::algo {

/// Pipelined double-binary-tree algorithm policy.
struct tree {
  static constexpr std::string_view name = "tree";

  /// Allreduce model (algo/registry.hpp): 2H + St - 1 rounds (St = ceil(s/2/seg) segments per
  /// half), each costing about two messages at the busiest rank (interior in one tree: two
  /// children, leaf in the other); the busiest rank sends 3 halves up and down its interior tree
  /// and 1 in its leaf tree, plus the pipeline fill of 2H segments:
  ///   2(2H+St-1) alpha + (2s + 2H s/(2St)) beta + s gamma
  /// Across hosts its crossings are not modelled: every hop is priced as one that crosses.
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept {
    const double St = message_pieces(w.s / 2, m.segment_bytes);
    return 2 * (2 * w.H + St - 1) * m.alpha_us + (2 * w.s + 2 * w.H * w.s / (2 * St)) * m.beta_us_per_byte + w.s * m.gamma_us_per_byte;
  }
  /// Messages in all: 4(N-1) St (two trees, each segment up and down every edge).
  static constexpr double allreduce_messages(const world_shape& w, const cost_model& m) noexcept {
    return 4 * (w.N - 1) * message_pieces(w.s / 2, m.segment_bytes);
  }
  /// Bytes one rank sends, averaged: 2(N-1)/N s (each half up and down N-1 edges).
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept { return 2 * (w.N - 1) / w.N * w.s; }
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why = "pipelined double binary tree: log2(N) depth, about 2x the buffer per rank";

  /// Runs the schedule over primitives `p`. \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    // Two halves, each cut into the same number of segments (ring_layout over two "chunks").
    const ring_layout L(p.count(), 2, p.segment_elems());
    const long S = static_cast<long>(L.segments());
    const binary_tree trees[2] = {binary_tree(n, 0), binary_tree(n, 1)};
    struct node {
      int parent, left, right;
      long up_at, down_at;  // rounds of "up 0" and "down 0"
    };
    node me[2];
    long last_round = 0;
    for (int t = 0; t < 2; ++t) {
      const binary_tree& b = trees[t];
      const int d = b.depth(r), h = b.height();
      me[t] = {b.parent(r), b.left(r), b.right(r), h - d, h + d};
      last_round = std::max(last_round, me[t].down_at + S - 1);
    }
    for (long round = 0; round <= last_round; ++round) {
      for (int t = 0; t < 2; ++t) {
        const node& x = me[t];
        const long ku = round - x.up_at;
        if (ku >= 0 && ku < S) {  // up: reduce segment ku towards the root
          const range seg = L.segment(t, static_cast<std::size_t>(ku));
          const bool root = x.parent < 0;
          if (x.left < 0) {
            p.send(x.parent, p.in(seg));  // a leaf (never the root when n >= 2)
          } else {
            p.recv_reduce(x.left, p.out(seg), p.in(seg), root && x.right < 0);
            if (x.right >= 0) p.recv_reduce(x.right, p.out(seg), p.out(seg), root);
            if (!root) p.send(x.parent, p.out(seg));
          }
        }
        const long kd = round - x.down_at;
        if (kd >= 0 && kd < S) {  // down: the final segment kd towards the leaves
          const range seg = L.segment(t, static_cast<std::size_t>(kd));
          if (x.parent >= 0) p.recv(x.parent, p.out(seg));
          if (x.left >= 0) p.send(x.left, p.out(seg));
          if (x.right >= 0) p.send(x.right, p.out(seg));
        }
      }
    }
    p.finish();
  }
};

}  // namespace gsync::algo
