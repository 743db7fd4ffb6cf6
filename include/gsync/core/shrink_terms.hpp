#pragma once
/// \file
/// What `communicator::shrink` is asked and what it agreed (core/communicator.hpp; the TCP /
/// shared-memory transport's agreement: transport/mesh/shrink.ipp).
///
/// The rule that keeps one job from becoming two: a shrink goes on only with more than half of
/// the ranks of the communicator being shrunk, or exactly half when they include its rank 0 (two
/// disjoint groups can never both qualify). A rank left out, or on the smaller side of a network
/// partition, or one that was stopped while the others went on, fails with `errc::excluded`.
/// `shrink_options::min_size` replaces that rule with a size of the caller's choosing.
///
/// The survivors also agree on how many collectives of the old communicator every one of them
/// completed (`shrink_report::agreed_ops`); a rank that completed one more (`my_ops`) finished an
/// operation some others did not, and must redo it with them:
/// \code
///   comm = comm.shrink();
///   const auto& s = comm.last_shrink();
///   if (s.my_ops > s.agreed_ops) { /* roll back the last step */ }
/// \endcode

#include <cstdint>
#include <vector>

namespace gsync {

/// The caller's terms for `communicator::shrink`.
struct shrink_options {
  /// Fewest ranks the new communicator may have. 0 (the default): a majority of the communicator
  /// being shrunk, or exactly half including its rank 0. A value below a majority lets both sides
  /// of a partition go on as two jobs: choose it only where that cannot happen or does no harm.
  /// Every rank should pass the same value; the agreement uses the largest value among its ranks.
  int min_size = 0;
};

/// What a shrink agreed, kept by the communicator it made (`communicator::last_shrink`).
struct shrink_report {
  /// Collectives of the shrunk communicator completed by every rank of the new one.
  std::uint64_t agreed_ops = 0;
  /// Collectives of the shrunk communicator this rank completed: `agreed_ops`, or more when this
  /// rank finished an operation that failed on another survivor.
  std::uint64_t my_ops = 0;
  /// Size of the communicator shrunk (0: this communicator was not made by a shrink).
  int old_size = 0;
  /// Rank i of the new communicator was rank `old_ranks[i]` of the shrunk one.
  std::vector<int> old_ranks;
};

/// What a transport's shrink is given (`shrinkable_transport`, core/concepts.hpp).
struct shrink_terms {
  int min_size = 0;                 ///< shrink_options::min_size
  std::uint64_t completed_ops = 0;  ///< collectives this rank completed on the communicator shrunk
};

namespace detail {
/// The rule of the file comment: may `members` ranks of a communicator of `size` ranks go on?
/// `has_first`: they include its rank 0. `min_size` > 0 replaces the majority rule.
constexpr bool shrink_quorum(int members, bool has_first, int size, int min_size) noexcept {
  if (members <= 0) return false;
  if (min_size > 0) return members >= min_size;
  return 2 * members > size || (2 * members == size && has_first);
}
/// The fewest ranks `shrink_quorum` accepts, with or without rank 0 among them, for messages.
constexpr int shrink_needed(int size, int min_size, bool has_first) noexcept {
  return min_size > 0 ? min_size : has_first ? (size + 1) / 2 : size / 2 + 1;
}
}  // namespace detail

}  // namespace gsync
