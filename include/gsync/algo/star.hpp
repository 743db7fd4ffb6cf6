#pragma once
/// \file
/// Star allreduce: every rank sends its buffer to rank 0, which reduces and sends the result back
/// to every rank. Two latencies and 2(N-1) messages in all, the fewest of any schedule (recursive
/// doubling sends N log2(N), direct N(N-1)), at the price of rank 0 handling all of them one
/// after another and moving (N-1) whole buffers each way: for small buffers on small worlds, and
/// where the messages' processor time rather than the wire is the cost (ranks that share cores).
///
/// How chunks move. The whole buffer is one message each way, no pieces:
///   1. Every rank r > 0 sends its input to rank 0, then receives the result from rank 0 into
///      its output (in place, once its own send has left the buffer).
///   2. Rank 0 folds the N contributions in the fixed rank order 0, 1, ..., N-1 into its output:
///      acc = x0; acc = acc (op) x1; ...; acc = acc (op) x(N-1), the last combination applying the
///      operator's finalize (avg divides there), combining each peer's buffer as it streams in.
///      In place, x0 is the buffer itself and the fold needs no copy.
///   3. Rank 0 sends the result to ranks 1..N-1 and waits until all have taken it.
/// Every rank receives rank 0's bits, so results are bitwise identical everywhere. No scratch.

#include <string_view>

#include "gsync/core/chunking.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::algo {

/// Star (reduce to rank 0, send the result back) algorithm policy.
struct star {
  static constexpr std::string_view name = "star";

  /// Allreduce model (algo/registry.hpp): two latencies, plus rank 0's own work on the other
  /// 2(N-2) messages, one after another, each taken as half an alpha (alpha counts the work at
  /// both ends and the wire); rank 0's link carries (N-1) s in, then (N-1) s out:
  ///   N alpha + 2(N-1) s beta + (N-1) s gamma
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept {
    return w.N * m.alpha_us + 2 * (w.N - 1) * w.s * m.beta_us_per_byte + (w.N - 1) * w.s * m.gamma_us_per_byte;
  }
  /// Messages in all: 2(N-1).
  static constexpr double allreduce_messages(const world_shape& w, const cost_model&) noexcept { return 2 * (w.N - 1); }
  /// Bytes one rank sends, averaged: 2(N-1)/N s (rank 0 sends (N-1) s, the others s each).
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept { return 2 * (w.N - 1) / w.N * w.s; }
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why = "the fewest messages: every rank's buffer to rank 0 and the result back";

  /// Runs the schedule over primitives `p`. \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    const range all{0, p.count()};
    if (n == 1) return p.copy_final(p.out(all), p.in(all));
    if (p.count() == 0) return;
    if (r != 0) {
      p.send(0, p.in(all));
      if (p.in_place()) p.finish();  // the result lands where the input is still being sent from
      p.recv(0, p.out(all));
      return;
    }
    const auto acc = p.out(all);
    if (!p.in_place()) p.copy(acc, p.in(all));
    for (int j = 1; j < n; ++j) p.recv_reduce(j, acc, acc, j == n - 1);
    for (int j = 1; j < n; ++j) p.send(j, acc);
    p.finish();
  }
};

}  // namespace gsync::algo
