#pragma once
/// \file
/// Direct allreduce: every rank sends its buffer to every other rank and reduces locally. One
/// round of messages, so the fewest latencies of all schedules, at the price of N-1 whole-buffer
/// transfers per rank: for tiny worlds and tiny messages.
///
/// How chunks move. The buffer is processed in pieces of at most `scratch_elems()` elements (the
/// communicator's fixed scratch buffer). For each piece:
///   1. Rank r queues its input piece for every other rank (N-1 sends, posted before any receive,
///      so on TCP they progress while the rank waits for the others').
///   2. It folds the N contributions in the fixed rank order 0, 1, ..., N-1 into an accumulator:
///      acc = x0; acc = acc (op) x1; ...; acc = acc (op) x(N-1), the last combination also applying
///      the operator's finalize (avg divides there). x0 is rank 0's piece (received, or copied from
///      the input on rank 0); each peer's piece is combined as it streams in, one peer at a time,
///      and the rank's own piece is combined from its input when its turn comes. Every rank thus
///      evaluates the same expression in the same order: results are bitwise identical everywhere.
///   3. Out of place the accumulator is the output piece itself. In place the input piece is still
///      queued for the peers, so the accumulator is the scratch buffer instead: after the fold the
///      rank waits until every peer has taken its piece (`finish()`), then copies the scratch into
///      the buffer.
/// So at most one piece of scratch is used (none out of place), never N-1 copies; at most (N-1)
/// pieces per rank are in flight at once, which on TCP fits in the socket buffers.

#include <algorithm>
#include <string_view>

#include "gsync/core/chunking.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::algo {

/// Direct (all-to-all exchange, local fold in rank order) algorithm policy.
struct direct {
  static constexpr std::string_view name = "direct";

  /// Allreduce model (algo/registry.hpp): q = ceil(s/scr) pieces, each N-1 messages out and in:
  ///   q (N-1) alpha + (N-1) s beta + (N-1) s gamma
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept {
    return message_pieces(w.s, m.scratch_bytes) * (w.N - 1) * m.alpha_us + (w.N - 1) * w.s * m.beta_us_per_byte +
           (w.N - 1) * w.s * m.gamma_us_per_byte;
  }
  /// Messages in all: N(N-1) q.
  static constexpr double allreduce_messages(const world_shape& w, const cost_model& m) noexcept {
    return w.N * (w.N - 1) * message_pieces(w.s, m.scratch_bytes);
  }
  /// Bytes one rank sends: (N-1) s.
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept { return (w.N - 1) * w.s; }
  /// Across hosts: q (N-1) alpha' + all_to_all_load s beta.
  static double allreduce_placed_us(const world_shape& w, const placed_costs& c) noexcept {
    const double q = message_pieces(w.s, c.inter.scratch_bytes);
    return q * (w.N - 1) * c.mixed.alpha_us + static_cast<double>(c.t.all_to_all_load()) * w.s * c.inter.beta_us_per_byte +
           (w.N - 1) * w.s * c.inter.gamma_us_per_byte;
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why = "one round: every rank sends its buffer to every other";

  /// Runs the schedule over primitives `p`. \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    const bool in_place = p.in_place();
    const std::size_t piece = std::max<std::size_t>(1, p.scratch_elems());
    for (std::size_t off = 0; off < p.count(); off += piece) {
      const range mine{off, std::min(piece, p.count() - off)};
      const auto acc = in_place ? p.scratch({0, mine.count}) : p.out(mine);
      for (int j = 0; j < n; ++j)
        if (j != r) p.send(j, p.in(mine));
      if (r == 0) p.copy(acc, p.in(mine));
      else p.recv(0, acc);
      for (int j = 1; j < n; ++j) {
        const bool last = j == n - 1;
        if (j == r) p.reduce(acc, acc, p.in(mine), last);
        else p.recv_reduce(j, acc, acc, last);
      }
      p.finish();  // every peer has this piece: the input piece may be overwritten, the next sent
      if (in_place) p.copy(p.out(mine), acc);
    }
  }

  /// Linear gather of `p.count()` = c elements per rank to `root`: every other rank sends its
  /// input straight to the root, which copies its own block and receives block j from rank j
  /// straight into place in its output (N blocks, rank order), taking the ranks in order while
  /// their messages arrive together. N-1 messages, one latency; the root's link carries (N-1)c.
  /// In place on the root (input = output block root) its copy is a no-op. No scratch.
  /// \tparam P a primitives type.
  template <class P>
  static void gather(P& p, int root) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    const block_layout L(c, 0, c, c);
    if (r != root) {
      p.send(root, p.in({0, c}));
      return p.finish();
    }
    p.copy(p.out(L.block(root)), p.in({0, c}));
    for (int s = 1; s < n; ++s) p.recv(wrap(root + s, n), p.out(L.block(wrap(root + s, n))));
  }

  /// Linear scatter of `p.count()` = c elements per rank from `root`: the root queues input block
  /// j for every rank j (in ring order from root + 1), copies its own block into its output and
  /// waits until the blocks have left; every other rank receives its block straight into its
  /// output. N-1 messages, one latency. In place on the root (output = input block root) its copy
  /// is a no-op. No scratch.
  /// \tparam P a primitives type.
  template <class P>
  static void scatter(P& p, int root) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    const block_layout L(c, 0, c, c);
    if (r != root) return p.recv(root, p.out({0, c}));
    for (int s = 1; s < n; ++s) p.send(wrap(root + s, n), p.in(L.block(wrap(root + s, n))));
    p.copy(p.out({0, c}), p.in(L.block(root)));
    p.finish();
  }
};

}  // namespace gsync::algo
