#pragma once
/// \file
/// Dissemination barrier.
///
/// How messages move. In round k = 0, 1, ..., ceil(log2 N)-1, rank r sends a zero-byte message to
/// rank r+2^k and waits for one from rank r-2^k. After round k a rank has heard, directly or
/// through the ranks it heard from, from the 2^(k+1)-1 ranks before it, so after the last round it
/// has heard from every rank: no rank leaves the barrier before every rank has entered it. No rank
/// waits for more than one message per round, and no message carries data.

#include <string_view>

#include "gsync/core/chunking.hpp"

namespace gsync::algo {

/// Dissemination algorithm policy (barrier).
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
};

}  // namespace gsync::algo
