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

#include <string_view>

#include "gsync/core/chunking.hpp"

namespace gsync::algo {

/// Ring algorithm policy (bandwidth-optimal, pipelined).
struct ring {
  static constexpr std::string_view name = "ring";

  /// Runs the ring allreduce schedule over primitives `p` (see core/primitives.hpp).
  /// \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    const ring_layout L(p.count(), n, p.segment_elems());
    const std::size_t S = L.segments();
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);

    for (std::size_t k = 0; k < S; ++k) p.send(next, p.in(L.segment(r, k)));
    for (int s = 0; s <= n - 2; ++s) {
      const int c = wrap(r - s - 1, n);
      for (std::size_t k = 0; k < S; ++k) {
        const range seg = L.segment(c, k);
        p.recv_reduce_send(prev, next, p.out(seg), p.in(seg), /*final=*/s == n - 2);
      }
    }
    for (int t = 0; t <= n - 3; ++t) {
      const int c = wrap(r - t, n);
      for (std::size_t k = 0; k < S; ++k) p.recv_copy_send(prev, next, p.out(L.segment(c, k)));
    }
    const int last = wrap(r + 2, n);
    for (std::size_t k = 0; k < S; ++k) p.recv(prev, p.out(L.segment(last, k)));
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
  /// 	param P a primitives type.
  template <class P>
  static void reduce_scatter_phase(P& p, bool final) {
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
      for (std::size_t k = 0; k < S; ++k) {
        const range seg = L.segment(c, k);
        if (s < n - 2) p.recv_reduce_send(prev, next, p.out(seg), p.in(seg), false);
        else p.recv_reduce(prev, p.out(seg), p.in(seg), final);
      }
    }
  }

  /// The chunk rank `p.rank()` holds after `reduce_scatter_phase`.
  template <class P>
  static range owned_chunk(const P& p) {
    return ring_layout(p.count(), p.size(), p.segment_elems()).chunk(wrap(p.rank() + 1, p.size()));
  }

  /// See `reduce_scatter_phase`. \tparam P a primitives type.
  template <class P>
  static void allgather_phase(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return;
    const ring_layout L(p.count(), n, p.segment_elems());
    const std::size_t S = L.segments();
    const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
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
