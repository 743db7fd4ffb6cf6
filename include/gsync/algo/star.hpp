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

namespace gsync::algo {

/// Star (reduce to rank 0, send the result back) algorithm policy.
struct star {
  static constexpr std::string_view name = "star";

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
