#pragma once
/// \file
/// Halving-doubling allreduce (Rabenseifner): a recursive-halving reduce-scatter followed by a
/// recursive-doubling allgather. log2(P) latencies each way like recursive doubling, but each rank
/// moves only 2(P-1)/P of the buffer, like the ring.
///
/// How chunks move. Let P be the largest power of two <= N.
///   Fold (only when N is not a power of two). Each rank r >= P sends its whole input to rank r-P
///   and then waits for the result; rank r-P combines the two (its own data on the left) into its
///   output. The ranks 0..P-1 form the core; every other rank takes no further part.
///   Reduce-scatter. The buffer is split into P near-equal blocks (chunking.hpp,
///   halving_doubling_layout). At step s = 0..log2(P)-1 a core rank v pairs with v XOR P/2^(s+1):
///   of the blocks it currently holds it sends the half its partner keeps and receives the
///   partner's copy of the half it keeps, combining it into its output as it streams in. The range
///   halves every step; at the last step the combination is the final one (avg divides there) and
///   rank v owns block v, reduced over all N ranks.
///   Allgather. The steps run backwards: at step s rank v sends everything it holds (its kept half,
///   now final) to the same partner and receives the partner's half into its output, so the range
///   doubles until every core rank holds the whole result.
///   Unfold. Rank r-P sends the whole result to rank r.
/// Every element is combined by exactly one core rank, in one order, and then only copied, so all
/// ranks hold bitwise identical results. Incoming data is reduced as it streams in, so no scratch is
/// needed whatever the size; out of place, the first step reads the input and writes the output,
/// so the input is never written and never copied.
/// Buffer safety: a range sent at reduce-scatter step s is written again only when the allgather
/// receives the partner's final version of it, which the partner sends only after it has received
/// (and thus the transport has released) ours; `finish()` between the two phases makes it explicit.

#include <algorithm>
#include <bit>
#include <string_view>

#include "gsync/core/chunking.hpp"

namespace gsync::algo {

/// Halving-doubling (Rabenseifner) algorithm policy: log-latency and bandwidth-optimal in the core.
struct halving_doubling {
  static constexpr std::string_view name = "halving_doubling";

  /// Runs the schedule over primitives `p`. \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    const range all{0, p.count()};
    if (n == 1) return p.copy_final(p.out(all), p.in(all));
    const int pow2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
    const int extra = n - pow2;
    if (r >= pow2) {  // folded rank: contribute, then receive the result
      p.send(r - pow2, p.in(all));
      p.finish();
      p.recv(r - pow2, p.out(all));
      return;
    }
    // Where this rank's current partial result is: the input until the first combination wrote the
    // output (folding in a partner writes it at once).
    bool in_output = false;
    if (r < extra) {
      p.recv_reduce(r + pow2, p.out(all), p.in(all), /*final=*/false);
      in_output = true;
    }
    const halving_doubling_layout L(p.count(), pow2);
    const int steps = L.steps();
    for (int s = 0; s < steps; ++s) {
      const int partner = L.partner(r, s);
      const range give = L.given(r, s), keep = L.kept(r, s);
      p.send(partner, in_output ? p.out(give) : p.in(give));
      p.recv_reduce(partner, p.out(keep), in_output ? p.out(keep) : p.in(keep), /*final=*/s == steps - 1);
      in_output = true;
    }
    p.finish();
    for (int s = steps - 1; s >= 0; --s) {
      const int partner = L.partner(r, s);
      p.send(partner, p.out(L.kept(r, s)));
      p.recv(partner, p.out(L.given(r, s)));
    }
    if (r < extra) p.send(r + pow2, p.out(all));
    p.finish();
  }
};

}  // namespace gsync::algo
