#pragma once
/// \file
/// Ring allreduce: reduce-scatter, then allgather, each N-1 steps around the ring, pipelined.
///
/// How chunks move. The buffer is cut into N chunks (chunking.hpp), chunk c's home being rank c-1.
/// Every rank sends only to `next` = r+1 and receives only from `prev` = r-1.
///   Reduce-scatter. Step 0: rank r sends its own input chunk r. At step s (0..N-2) it receives chunk
///   r-s-1 from prev, combines it with its input chunk into the output, and forwards the result at
///   step s+1. At step N-2 the chunk it receives is r+1, now reduced over all ranks: the last
///   combination also applies the operator's finalize (avg divides here), and rank r owns chunk r+1.
///   Allgather. Rank r forwards its finished chunk r+1; at step t (0..N-2) it receives chunk r-t,
///   stores it in the output and (except at the last step) forwards it.
/// Each chunk travels as S segments (segment size = communicator's segment_bytes), all segments of
/// a step being queued before the next step's: segment k of step s+1 leaves as soon as segment k of
/// step s has arrived and been combined, so receiving, reducing and sending overlap and every link
/// stays busy. Each rank sends and receives 2(N-1)/N of the buffer, the bandwidth optimum.
/// Results are bitwise identical on every rank: each chunk is combined in one order, by its owner's
/// chain, and then copied. Out of place, the input is only read: no copy of it is made.
///
/// The same policy holds the ring's other schedules; each opens with how its chunks move.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>

#include "gsync/core/chunking.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::algo {

/// Ring algorithm policy (bandwidth-optimal, pipelined).
struct ring {
  static constexpr std::string_view name = "ring";

  /// Allreduce model (algo/registry.hpp): 2(N-1) steps, each chunk (s/N) in Sr = ceil(s/N/seg)
  /// segments, pipelined (a segment leaves as soon as it has arrived, so the latencies of a
  /// pipeline of depth 2(N-1) over Sr segments add up to 2(N-1) + Sr - 1):
  ///   (2(N-1) + Sr - 1) alpha + 2(N-1)/N s beta + (N-1)/N s gamma
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept {
    const double Sr = message_pieces(w.s / w.N, m.segment_bytes);
    return (2 * (w.N - 1) + Sr - 1) * m.alpha_us + 2 * (w.N - 1) / w.N * w.s * m.beta_us_per_byte +
           (w.N - 1) / w.N * w.s * m.gamma_us_per_byte;
  }
  /// Messages in all, over every rank: 2(N-1) N Sr.
  static constexpr double allreduce_messages(const world_shape& w, const cost_model& m) noexcept {
    return 2 * (w.N - 1) * w.N * message_pieces(w.s / w.N, m.segment_bytes);
  }
  /// Bytes one rank sends: 2(N-1)/N s.
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept { return 2 * (w.N - 1) / w.N * w.s; }
  /// Across hosts the crossing hops set the pace: (2(N-1) + Sr - 1) alpha' + 2(N-1)/N s beta x
  /// ring_load, alpha' being the slower hop's (placed_costs::mixed).
  static double allreduce_placed_us(const world_shape& w, const placed_costs& c) noexcept {
    const double Sr = message_pieces(w.s / w.N, c.inter.segment_bytes);
    return (2 * (w.N - 1) + Sr - 1) * c.mixed.alpha_us +
           2 * (w.N - 1) / w.N * w.s * c.inter.beta_us_per_byte * std::max(1, c.t.ring_load()) +
           (w.N - 1) / w.N * w.s * c.inter.gamma_us_per_byte;
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why = "bandwidth-bound: the pipelined ring moves 2(N-1)/N of the buffer";

  /// Runs the ring allreduce schedule over primitives `p` (see core/primitives.hpp).
  /// \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    if (p.size() == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    // The last reduce-scatter step forwards each finished segment at once: it is also the
    // allgather's first send, so the two phases overlap with no bubble between them.
    reduce_scatter_phase(p, /*final=*/true, /*forward_last=*/true);
    allgather_phase(p, /*first_sent=*/true);
    p.finish();
  }

  /// Ring reduce-scatter: `p.count()` = c elements per block; the input holds N blocks of c
  /// (block b at b*c), the output one block, and rank r ends with block r reduced over all ranks.
  ///
  /// How chunks move. Block b's reduction is a chain that starts at rank b+1 and ends at rank b:
  /// every rank sends only to next = r+1 and receives only from prev = r-1. Step 0: rank r sends
  /// its input block r-1. At step s (0..N-2) it receives the partial of block r-s-2 from prev,
  /// combines it with its own input block (its value on the left) and forwards the result at step
  /// s+1; at step N-2 the block that arrives is r itself, the combination is the last one (it
  /// applies the operator's finalize: avg divides here) and lands in the output. Each block travels
  /// as S segments, every segment of a step queued before the next step's, so receiving, combining
  /// and sending overlap as in the allreduce. The partials of steps 0..N-3 must stay intact until
  /// next has taken them, and the output holds one block only, so they live in the communicator's
  /// fixed scratch, one slot per step: the blocks are therefore processed in pieces of
  /// scratch/(N-2) columns (the whole block when N = 2), each piece a full pipelined ring followed by
  /// `finish()` before the next piece reuses the scratch. Each rank sends and receives (N-1)c
  /// elements, the bandwidth optimum. In place (output = input block r), block r is read only by
  /// the last combination, which writes it.
  /// \tparam P a primitives type.
  template <class P>
  static void reduce_scatter(P& p) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    if (n == 1) return p.copy_final(p.out({0, c}), p.in({0, c}));
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    const std::size_t width = n > 2 ? p.scratch_elems() / static_cast<std::size_t>(n - 2) : c;
    for_each_piece(c, width, [&](const range piece) {
      const std::size_t col = piece.offset, w = piece.count;
      const block_layout in_l(c, col, w, p.segment_elems());   // N input blocks
      const block_layout out_l(0, col, w, p.segment_elems());  // the one output block
      const block_layout tmp_l(w, 0, w, p.segment_elems());    // scratch slot s = partial of step s
      const std::size_t S = in_l.segments();
      for (std::size_t k = 0; k < S; ++k) p.send(next, p.in(in_l.segment(wrap(r - 1, n), k)));
      for (int s = 0; s <= n - 2; ++s) {
        const int b = wrap(r - s - 2, n);
        for (std::size_t k = 0; k < S; ++k) {
          if (s == n - 2) p.recv_reduce(prev, p.out(out_l.segment(0, k)), p.in(in_l.segment(b, k)), /*final=*/true);
          else p.recv_reduce_send(prev, next, p.scratch(tmp_l.segment(s, k)), p.in(in_l.segment(b, k)), false);
        }
      }
      p.finish();
    });
  }

  /// Ring allgather: `p.count()` = c elements per block; the input is one block, the output N
  /// blocks of c, block b being rank b's input.
  ///
  /// How chunks move. Rank r copies its input into output block r (nothing to do in place, where
  /// the input is that block) and sends it to next = r+1. At step t (0..N-2) it receives block
  /// r-t-1 from prev = r-1 straight into its place in the output and, except at the last step,
  /// forwards it from there. Every block travels as S segments, all segments of a step queued
  /// before the next step's, so a segment is forwarded as soon as it has arrived. Each rank sends
  /// and receives (N-1)c elements; no scratch is used.
  /// \tparam P a primitives type.
  template <class P>
  static void allgather(P& p) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    const block_layout L(c, 0, c, p.segment_elems());
    const std::size_t S = L.segments();
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    if (n > 1)
      for (std::size_t k = 0; k < S; ++k) p.send(next, p.in(L.segment(0, k)));  // block 0 of the input = the input
    p.copy(p.out(L.block(r)), p.in({0, c}));
    for (int t = 0; t <= n - 2; ++t) {
      const int b = wrap(r - t - 1, n);
      for (std::size_t k = 0; k < S; ++k) {
        if (t < n - 2) p.recv_copy_send(prev, next, p.out(L.segment(b, k)));
        else p.recv(prev, p.out(L.segment(b, k)));
      }
    }
    p.finish();
  }

  /// Ring allgatherv: block b holds `counts[b]` elements (rank b's input), packed in rank order
  /// in the output (`varied_blocks`). The allgather's schedule with blocks of their own sizes: rank
  /// r sends its input to next, copies it into output block r, and at step t (0..N-2) receives
  /// block r-t-1 from prev into place, forwarding it except at the last step. Each block travels in
  /// segments of at most `segment_elems()`; an empty block is neither sent nor awaited. Each rank
  /// sends and receives every block but its own once, the bandwidth optimum. No scratch.
  /// \tparam P a primitives type.
  template <class P>
  static void allgatherv(P& p, std::span<const std::size_t> counts) {
    const int n = p.size(), r = p.rank();
    const varied_blocks L(counts, p.segment_elems());
    const range mine = L.block(r);
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    if (n > 1)
      for (std::size_t k = 0; k < L.segments(r); ++k) {
        const range seg = L.segment(r, k);
        p.send(next, p.in({seg.offset - mine.offset, seg.count}));
      }
    p.copy(p.out(mine), p.in({0, mine.count}));
    for (int t = 0; t <= n - 2; ++t) {
      const int b = wrap(r - t - 1, n);
      for (std::size_t k = 0; k < L.segments(b); ++k) {
        if (t < n - 2) p.recv_copy_send(prev, next, p.out(L.segment(b, k)));
        else p.recv(prev, p.out(L.segment(b, k)));
      }
    }
    p.finish();
  }

  /// Ring reduce_scatterv: the input packs N blocks, block b of `counts[b]` elements; rank r ends
  /// with block r reduced over all ranks in its output (`counts[r]` elements). The reduce-scatter's
  /// chains (block b's starts at rank b+1 and ends at rank b, the last combination finalizing)
  /// with blocks of their own sizes: the blocks are walked in pieces of scratch/(N-2) columns (all
  /// columns when N = 2), the partials of steps 0..N-3 in scratch slots as in `reduce_scatter`; a
  /// block with no element in a piece's columns has no message in it. In place (output = input
  /// block r) block r is read only by the last combination, which writes it.
  /// \tparam P a primitives type.
  template <class P>
  static void reduce_scatterv(P& p, std::span<const std::size_t> counts) {
    const int n = p.size(), r = p.rank();
    const varied_blocks L(counts, p.segment_elems());
    const range mine = L.block(r);
    if (n == 1) return p.copy_final(p.out({0, mine.count}), p.in(mine));
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    const std::size_t largest = L.largest();
    const std::size_t width = n > 2 ? p.scratch_elems() / static_cast<std::size_t>(n - 2) : largest;
    for_each_piece(largest, width, [&](const range piece) {
      const std::size_t col = piece.offset, w = piece.count;
      const int first = wrap(r - 1, n);
      for (std::size_t k = 0; k < L.segments(first, col, w); ++k) p.send(next, p.in(L.segment(first, k, col, w)));
      for (int s = 0; s <= n - 2; ++s) {
        const int b = wrap(r - s - 2, n);
        const std::size_t home = L.block(b).offset + col;  // where the piece's columns of block b start
        for (std::size_t k = 0; k < L.segments(b, col, w); ++k) {
          const range seg = L.segment(b, k, col, w);
          if (s == n - 2) p.recv_reduce(prev, p.out({seg.offset - mine.offset, seg.count}), p.in(seg), /*final=*/true);
          else p.recv_reduce_send(prev, next, p.scratch({static_cast<std::size_t>(s) * w + seg.offset - home, seg.count}), p.in(seg), false);
        }
      }
      p.finish();
    });
  }

  /// Pipelined chain broadcast of `p.count()` elements (the output buffer) from `root`.
  ///
  /// How chunks move. The ranks form a chain in ring order starting at the root: root, root+1, ...,
  /// root+N-1. The buffer is cut into segments; the root queues every segment for root+1; each
  /// other rank receives segment k from its predecessor into its buffer and (except the last rank)
  /// forwards it from there at once, so all N-1 links carry different segments at the same time.
  /// Cost: (N-1+S-1) segment times, about one buffer time for many segments: bandwidth-optimal for
  /// large buffers. No scratch is used.
  /// \tparam P a primitives type.
  template <class P>
  static void broadcast(P& p, int root) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return;
    const int v = wrap(r - root, n);
    const block_layout L(0, 0, p.count(), p.segment_elems());
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    for (std::size_t k = 0; k < L.segments(); ++k) {
      const auto seg = p.out(L.segment(0, k));
      if (v == 0) p.send(next, seg);
      else if (v == n - 1) p.recv(prev, seg);
      else p.recv_copy_send(prev, next, seg);
    }
    p.finish();
  }

  /// Pipelined chain reduce of `p.count()` elements to `root` (output used on the root only).
  ///
  /// How chunks move. The chain runs in ring order towards the root: root+N-1 -> root+N-2 -> ... ->
  /// root+1 -> root. The last rank of the chain sends its input segments; each middle rank receives
  /// segment k's partial from its upstream neighbour (r+1), combines it with its own input segment
  /// (its value on the left) and forwards the result at once to r-1; the root's combination is the
  /// last (finalize applied, avg divides) and lands in its output. Middle ranks keep their partials
  /// in the communicator's fixed scratch (their output is not theirs to write), so every rank walks
  /// the buffer in scratch-sized pieces, a middle rank calling `finish()` after each piece before
  /// reusing the scratch. In place (input = output on the root) each segment is read before it is
  /// overwritten.
  /// \tparam P a primitives type.
  template <class P>
  static void reduce(P& p, int root) {
    const int n = p.size(), r = p.rank();
    const std::size_t count = p.count();
    if (n == 1) return p.copy_final(p.out({0, count}), p.in({0, count}));
    const int v = wrap(r - root, n);
    const int up = wrap(r + 1, n), down = wrap(r - 1, n);
    for_each_piece(count, p.scratch_elems(), [&](const range piece) {
      const std::size_t col = piece.offset, w = piece.count;
      const block_layout L(0, col, w, p.segment_elems());
      const block_layout tmp(0, 0, w, p.segment_elems());
      for (std::size_t k = 0; k < L.segments(); ++k) {
        if (v == n - 1) p.send(down, p.in(L.segment(0, k)));
        else if (v == 0) p.recv_reduce(up, p.out(L.segment(0, k)), p.in(L.segment(0, k)), /*final=*/true);
        else p.recv_reduce_send(up, down, p.scratch(tmp.segment(0, k)), p.in(L.segment(0, k)), false);
      }
      if (v != 0 && v != n - 1) p.finish();  // the scratch is reused by the next piece
    });
    p.finish();
  }

  /// The allreduce's two halves as separate phases, for hierarchical schedules (algo/hierarchical.hpp).
  ///
  /// How chunks move. `reduce_scatter_phase` is the allreduce's reduce-scatter over the same
  /// layout (N chunks of the whole buffer, chunking.hpp), except that the last step only combines:
  /// rank r ends holding chunk r+1 (`owned_chunk`) in its output, reduced over the group, finalized
  /// only when `final` is set. `allgather_phase` starts from every rank holding its owned chunk in
  /// the output: rank r sends it to next, and at step t receives chunk r-t from prev into the
  /// output, forwarding it except at the last step. Both are pipelined in segments like the
  /// allreduce. The phases do not call `finish()`; the caller does, before it reuses buffers.
  /// \tparam P a primitives type.
  template <class P>
  static void reduce_scatter_phase(P& p, bool final, bool forward_last = false) {
    const int n = p.size(), r = p.rank();
    if (n == 1) {
      if (final) p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
      else p.copy(p.out({0, p.count()}), p.in({0, p.count()}));
      return;
    }
    const ring_layout L(p.count(), n, p.segment_elems());
    const std::size_t S = L.segments();
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    for (std::size_t k = 0; k < S; ++k) p.send(next, p.in(L.segment(r, k)));
    for (int s = 0; s <= n - 2; ++s) {
      const int c = wrap(r - s - 1, n);
      const bool last = s == n - 2;
      for (std::size_t k = 0; k < S; ++k) {
        const range seg = L.segment(c, k);
        if (!last || forward_last) p.recv_reduce_send(prev, next, p.out(seg), p.in(seg), last && final);
        else p.recv_reduce(prev, p.out(seg), p.in(seg), final);
      }
    }
  }

  /// The chunk rank `p.rank()` holds after `reduce_scatter_phase`.
  template <class P>
  static range owned_chunk(const P& p) {
    return ring_layout(p.count(), p.size(), p.segment_elems()).chunk(wrap(p.rank() + 1, p.size()));
  }

  /// See `reduce_scatter_phase`; with `first_sent`, the owned chunk was already forwarded by it.
  /// \tparam P a primitives type.
  template <class P>
  static void allgather_phase(P& p, bool first_sent = false) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return;
    const ring_layout L(p.count(), n, p.segment_elems());
    const std::size_t S = L.segments();
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
    if (!first_sent)
      for (std::size_t k = 0; k < S; ++k) p.send(next, p.out(L.segment(wrap(r + 1, n), k)));
    for (int t = 0; t <= n - 2; ++t) {
      const int c = wrap(r - t, n);
      for (std::size_t k = 0; k < S; ++k) {
        if (t < n - 2) p.recv_copy_send(prev, next, p.out(L.segment(c, k)));
        else p.recv(prev, p.out(L.segment(c, k)));
      }
    }
  }
};

}  // namespace gsync::algo
