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
#include "gsync/core/cost_model.hpp"

namespace gsync::algo {

/// Halving-doubling (Rabenseifner) algorithm policy: log-latency and bandwidth-optimal in the core.
struct halving_doubling {
  static constexpr std::string_view name = "halving_doubling";
  static constexpr std::string_view aliases = "hd rabenseifner";  ///< other names GSYNC_ALGO* accept

  /// Allreduce model (algo/registry.hpp): 2L + 2f messages; the core moves 2(P-1)/P of the buffer,
  /// the fold 2 whole buffers: (2L+2f) alpha + step_penalty (2(P-1)/P + 2f) s beta + ((P-1)/P + f) s gamma.
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept {
    return (2 * w.L + 2 * w.f) * m.alpha_us + step_penalty * (2 * (w.P - 1) / w.P + 2 * w.f) * w.s * m.beta_us_per_byte +
           ((w.P - 1) / w.P + w.f) * w.s * m.gamma_us_per_byte;
  }
  /// Messages in all: 2 P L + 2(N-P).
  static constexpr double allreduce_messages(const world_shape& w, const cost_model&) noexcept {
    return 2 * w.P * w.L + 2 * (w.N - w.P);
  }
  /// Bytes one rank sends, averaged: (2(P-1) s + 2(N-P) s) / N.
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept {
    return (2 * (w.P - 1) * w.s + 2 * (w.N - w.P) * w.s) / w.N;
  }
  /// Across hosts: per core step of distance d, two hops (halving and doubling) of the share
  /// s/2^(i+1) exchanged there, priced by d's load, bytes x the placement's penalty; the fold as
  /// recursive doubling's.
  static double allreduce_placed_us(const world_shape& w, const placed_costs& c) noexcept {
    const int steps = static_cast<int>(w.L);
    double t = 0, share = w.s;
    for (int i = 0; i < steps; ++i) {
      share /= 2;  // exchanged at the step of distance P / 2^(i+1)
      t += 2 * c.hop(c.t.xor_load(steps - 1 - i), share, 1.0, c.hd_pen);
    }
    if (w.f != 0) t += 2 * c.hop(c.t.fold_load(), w.s, 1.0, c.hd_pen);
    return t + ((w.P - 1) / w.P + w.f) * w.s * c.inter.gamma_us_per_byte;
  }
  /// Halving-doubling's steps cannot overlap (step k+1 sends what step k just combined), while the
  /// ring pipelines segments across all its steps. With equal byte counts the ring measured faster
  /// on large buffers, over loopback TCP (benchmarks/results/algorithms/README.md) and over 1 Gbit/s
  /// links (benchmarks/results/cluster/A_mid_sizes.md; select.hpp `shared_hd_even_bytes`).
  /// This factor on the bandwidth term stands for that lost overlap.
  static constexpr double step_penalty = 1.1;
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why = "log2(N) latencies and 2(P-1)/P of the buffer";

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
