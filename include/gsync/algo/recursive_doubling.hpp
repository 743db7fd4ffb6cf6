#pragma once
/// \file
/// Recursive-doubling allreduce: latency-optimal for small messages.
///
/// How chunks move. Let P be the largest power of two <= N. If N is not a power of two, each rank
/// r >= P first sends its whole input to rank r-P, which combines it with its own; rank r-P later
/// sends the final result back (two extra hops for those ranks only). Among the P ranks, at step k
/// (mask = 2^k) each rank exchanges its whole partial result with rank r XOR mask and combines the
/// two, lower rank's data on the left, so after log2(P) steps every rank holds the full reduction,
/// bitwise identical everywhere. The last step applies the operator's finalize (avg divides there).
/// Cost: log2(P) (+2) message latencies, each of the whole buffer: best for small buffers, where the
/// ring's 2(N-1) latencies dominate. The partner's data lands in the communicator's fixed scratch
/// buffer, so buffers larger than the scratch are processed in scratch-sized pieces.

#include <algorithm>
#include <bit>
#include <string_view>

#include "gsync/core/chunking.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::algo {

/// Recursive-doubling algorithm policy (latency-optimal).
struct recursive_doubling {
  static constexpr std::string_view name = "recursive_doubling";
  static constexpr std::string_view aliases = "rd";  ///< other names GSYNC_ALGO* accept

  /// Allreduce model (algo/registry.hpp): L + 2f whole-buffer exchanges (the fold adds two hops),
  /// in q = ceil(s/scr) scratch-sized pieces: q (L+2f) alpha + (L+2f) s beta + (L+f) s gamma.
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept {
    return message_pieces(w.s, m.scratch_bytes) * (w.L + 2 * w.f) * m.alpha_us + (w.L + 2 * w.f) * w.s * m.beta_us_per_byte +
           (w.L + w.f) * w.s * m.gamma_us_per_byte;
  }
  /// Messages in all: (P L + 2(N-P)) q.
  static constexpr double allreduce_messages(const world_shape& w, const cost_model& m) noexcept {
    return (w.P * w.L + 2 * (w.N - w.P)) * message_pieces(w.s, m.scratch_bytes);
  }
  /// Bytes one rank sends, averaged: (P L s + 2(N-P) s) / N.
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept {
    return (w.P * w.L * w.s + 2 * (w.N - w.P) * w.s) / w.N;
  }
  /// Across hosts: per step k (partner r XOR 2^k) one whole-buffer hop priced by its load, q times
  /// alpha; the fold's two hops by fold_load.
  static double allreduce_placed_us(const world_shape& w, const placed_costs& c) noexcept {
    const double q = message_pieces(w.s, c.inter.scratch_bytes);
    const int steps = static_cast<int>(w.L);
    double t = 0;
    for (int k = 0; k < steps; ++k) t += c.hop(c.t.xor_load(k), w.s, q, 1.0);
    if (w.f != 0) t += 2 * c.hop(c.t.fold_load(), w.s, q, 1.0);
    return t + (w.L + w.f) * w.s * c.inter.gamma_us_per_byte;
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why = "latency-bound: log2(N) whole-buffer exchanges";

  /// Runs the schedule over primitives `p`. \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    const int pow2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
    const int extra = n - pow2;
    const std::size_t piece = std::max<std::size_t>(1, p.scratch_elems());
    for (std::size_t off = 0; off < p.count(); off += piece) {
      const range all{off, std::min(piece, p.count() - off)};
      const range tmp{0, all.count};
      if (r >= pow2) {  // folded rank: contribute, then receive the result
        p.send(r - pow2, p.in(all));
        p.recv(r - pow2, p.out(all));
        p.finish();
        continue;
      }
      // The partial result lives in the output from the first combination on; until then (no
      // fold into this rank) the first step sends the input itself and combines it into the
      // output, which saves a copy of the whole buffer.
      const bool folded_in = r < extra;
      if (folded_in) p.recv_reduce(r + pow2, p.out(all), p.in(all), false);
      for (int mask = 1; mask < pow2; mask <<= 1) {
        const int partner = r ^ mask;
        const bool last = (mask << 1) == pow2;
        const auto mine = mask == 1 && !folded_in ? p.in(all) : p.out(all);
        p.send(partner, mine);
        p.recv(partner, p.scratch(tmp));
        p.finish();  // the output is about to change: the partner must have taken what it was sent
        if (r & mask) p.reduce(p.out(all), p.scratch(tmp), mine, last);
        else p.reduce(p.out(all), mine, p.scratch(tmp), last);
      }
      if (r < extra) {
        p.send(r + pow2, p.out(all));
        p.finish();
      }
    }
  }
};

}  // namespace gsync::algo
