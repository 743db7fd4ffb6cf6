#pragma once
/// \file
/// How a communicator numbers its operations (core/communicator.hpp). Every rank that issues the
/// same sequence of collectives gives them the same numbers, which travel in each frame's
/// fingerprint (mismatch and stall reports name them). Point-to-point messages are numbered per
/// peer and direction, so that they never advance the collective sequence: the n-th recv from a
/// peer matches that peer's n-th send to this rank. Operations issued inside a submit() job (on the
/// engine thread) come from counters of their own, with the top bit set (from 2^63), so a
/// collective run inside a job must be run inside a job on every rank.

#include <cstdint>
#include <string>
#include <vector>

namespace gsync::detail {

/// An operation's number for messages: "op #N", or "job op #N" for one issued inside a submit()
/// job (numbered from 2^63, see op_numbering), never the raw 2^63 + N.
inline std::string op_label(std::uint64_t seq) {
  constexpr std::uint64_t bit = std::uint64_t{1} << 63;
  return (seq & bit ? "job op #" : "op #") + std::to_string(seq & ~bit);
}

class op_numbering {
 public:
  /// The top bit of the numbers of operations issued inside submit() jobs.
  static constexpr std::uint64_t in_job_bit = std::uint64_t{1} << 63;

  /// The next collective's number.
  std::uint64_t collective(bool in_job) noexcept { return in_job ? in_job_bit | ++job_seq_ : ++seq_; }
  /// The next message's number to `peer` of `size` ranks (1, 2, ...).
  std::uint64_t send(int peer, int size, bool in_job) { return (in_job ? in_job_bit : 0) | ++at(in_job ? job_p2p_ : p2p_, peer, size).sent; }
  /// Counts a collective that completed on this rank (detail::op_scope); what a shrink's survivors agree on.
  void completed() noexcept { ++completed_; }
  /// Collectives completed so far (read once no operation runs: after a failure, in a shrink).
  std::uint64_t completed_count() const noexcept { return completed_; }
  /// The next message's number expected from `peer` of `size` ranks (1, 2, ...).
  std::uint64_t recv(int peer, int size, bool in_job) { return (in_job ? in_job_bit : 0) | ++at(in_job ? job_p2p_ : p2p_, peer, size).received; }

  /// Per peer of `size` ranks, the messages numbered so far as expected from it (issue time):
  /// where a receive from any source issued now stands with each peer.
  std::vector<std::uint64_t> received_counts(int size, bool in_job) {
    std::vector<std::uint64_t> r(static_cast<std::size_t>(size));
    for (int p = 0; p < size; ++p) r[static_cast<std::size_t>(p)] = at(in_job ? job_p2p_ : p2p_, p, size).received;
    return r;
  }

 private:
  struct pair_counts {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
  };
  static pair_counts& at(std::vector<pair_counts>& v, int peer, int size) {
    if (v.empty()) v.resize(static_cast<std::size_t>(size));  // once per communicator
    return v[static_cast<std::size_t>(peer)];
  }
  std::uint64_t seq_ = 0;
  std::uint64_t completed_ = 0;          // collectives completed (inside jobs too)
  std::uint64_t job_seq_ = 0;            // collectives inside submit() jobs (engine thread only)
  std::vector<pair_counts> p2p_;         // per peer, for send/recv
  std::vector<pair_counts> job_p2p_;     // per peer, for send/recv inside submit() jobs
};

/// Where a receive from any source stands at issue: per peer, the messages numbered so far as
/// expected from it, and whether it was issued inside a submit() job (which numbering it uses).
struct any_source_base {
  std::vector<std::uint64_t> counts;
  bool in_job = false;
};

/// A receive from any source learns which peer's message it takes only when it runs, so it
/// cannot be numbered at issue as a recv is: it takes the next message of the peer it matches,
/// and every receive from that peer issued after it expects one message further on. This counts,
/// per peer and numbering (outside and inside submit() jobs), the messages such receives took;
/// read and written only by running operations (which never run concurrently on a communicator).
class any_source_shift {
 public:
  /// What to add to the number of a message expected from `peer` (`seq`: as numbered at issue).
  std::uint64_t of(int peer, std::uint64_t seq) const noexcept {
    const auto& v = taken_[(seq & op_numbering::in_job_bit) ? 1 : 0];
    return v.empty() ? 0 : v[static_cast<std::size_t>(peer)];
  }
  /// A receive from any source of numbering `in_job` took `peer`'s next message.
  void took(int peer, int size, bool in_job) {
    auto& v = taken_[in_job ? 1 : 0];
    if (v.empty()) v.resize(static_cast<std::size_t>(size));
    ++v[static_cast<std::size_t>(peer)];
  }

 private:
  std::vector<std::uint64_t> taken_[2];
};

}  // namespace gsync::detail
