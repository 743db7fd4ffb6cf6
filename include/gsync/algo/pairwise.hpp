#pragma once
/// \file
/// Pairwise-exchange alltoall.
///
/// How chunks move. The input and output hold N blocks of c elements each; input block j goes to
/// rank j, output block j comes from rank j. Rank r first copies its own block (input block r to
/// output block r). Then, at step s = 1..N-1, it sends input block r+s to rank r+s and receives
/// output block r-s from rank r-s, straight into place, and waits until its send has left
/// (`finish()`) before the next step. Every rank therefore talks to exactly one destination and
/// one source per step, and each step's pairs form a permutation, so no link or receiver is
/// oversubscribed. The send is queued before the receive so that on a transport that progresses
/// queued sends while it waits to receive (TCP) both directions move at once. Each rank sends
/// and receives (N-1)c elements; no scratch is used.

#include <span>
#include <string_view>

#include "gsync/core/chunking.hpp"

namespace gsync::algo {

/// Pairwise-exchange algorithm policy (alltoall).
struct pairwise {
  static constexpr std::string_view name = "pairwise";

  /// Alltoall with `p.count()` = c elements per block. \tparam P a primitives type.
  template <class P>
  static void alltoall(P& p) {
    const int n = p.size(), r = p.rank();
    const std::size_t c = p.count();
    const block_layout L(c, 0, c, c);
    p.copy(p.out(L.block(r)), p.in(L.block(r)));
    for (int s = 1; s < n; ++s) {
      const int to = wrap(r + s, n), from = wrap(r - s, n);
      p.send(to, p.in(L.block(to)));
      p.recv(from, p.out(L.block(from)));
      p.finish();
    }
  }

  /// Alltoallv: input block j (`send_counts[j]` elements) goes to rank j, output block j
  /// (`recv_counts[j]`) comes from rank j, both packed in rank order. The same steps as
  /// `alltoall`, with each block at its own offset; an empty block is neither sent nor awaited
  /// (the two ends agree by the counts: rank i's send_counts[j] is rank j's recv_counts[i]).
  /// \tparam P a primitives type.
  template <class P>
  static void alltoallv(P& p, std::span<const std::size_t> send_counts, std::span<const std::size_t> recv_counts) {
    const int n = p.size(), r = p.rank();
    const varied_blocks S(send_counts, 1), R(recv_counts, 1);
    p.copy(p.out(R.block(r)), p.in(S.block(r)));
    for (int s = 1; s < n; ++s) {
      const int to = wrap(r + s, n), from = wrap(r - s, n);
      if (S.count(to) != 0) p.send(to, p.in(S.block(to)));
      if (R.count(from) != 0) p.recv(from, p.out(R.block(from)));
      p.finish();
    }
  }
};

}  // namespace gsync::algo
