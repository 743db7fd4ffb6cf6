#pragma once
/// \file
/// A subgroup's view of a primitives object, so that any schedule can run inside a group of the
/// communicator's ranks on part of the buffer: the building block of hierarchical algorithms.
///
/// The view renumbers the ranks (`members[i]` is the communicator rank of group rank i), shifts
/// element ranges by `offset` into the parent's buffers, and optionally works in place on the
/// parent's output (the input of an inner level is the result of the level before). A view can
/// also withhold the operator's finalize, for a level whose result is still partial (avg must
/// divide once, by the whole world's size, at the very last combination).

#include <cstddef>
#include <span>

#include "gsync/core/chunking.hpp"

namespace gsync {

/// Subgroup view of primitives `P` (see file comment).
/// \tparam P a primitives type (core/primitives.hpp or another view).
template <class P>
class group_primitives {
 public:
  /// \param p parent primitives; \param members communicator ranks of the group, indexed by group
  /// rank; \param index this rank's group rank; \param offset first element of the group's range
  /// in the parent's buffers; \param count elements in the group's range; \param on_output read
  /// the input from the parent's output (in place); \param allow_final pass the finalize flag on.
  group_primitives(P& p, std::span<const int> members, int index, std::size_t offset, std::size_t count, bool on_output,
                   bool allow_final)
      : p_(p), members_(members), index_(index), offset_(offset), count_(count), on_output_(on_output), allow_final_(allow_final) {}

  int rank() const noexcept { return index_; }                                  ///< group rank
  int size() const noexcept { return static_cast<int>(members_.size()); }      ///< group size
  std::size_t count() const noexcept { return count_; }                         ///< elements in the group's range
  std::size_t segment_elems() const { return p_.segment_elems(); }             ///< pipelining unit
  std::size_t scratch_elems() const { return p_.scratch_elems(); }             ///< scratch capacity
  bool in_place() const { return on_output_ || p_.in_place(); }                ///< input is the output
  auto scratch(range r) const { return p_.scratch(r); }                        ///< scratch range (not shifted)
  auto in(range r) const { return on_output_ ? p_.out(shift(r)) : p_.in(shift(r)); }  ///< input range
  auto out(range r) const { return p_.out(shift(r)); }                          ///< output range

  template <class R> void send(int to, R src) { p_.send(members_[to], src); }
  template <class R> void recv(int from, R dst) { p_.recv(members_[from], dst); }
  template <class R> void recv_reduce(int from, R dst, R local, bool final) {
    p_.recv_reduce(members_[from], dst, local, final && allow_final_);
  }
  template <class R> void recv_reduce_send(int from, int to, R dst, R local, bool final) {
    p_.recv_reduce_send(members_[from], members_[to], dst, local, final && allow_final_);
  }
  template <class R> void recv_copy_send(int from, int to, R dst) { p_.recv_copy_send(members_[from], members_[to], dst); }
  template <class R> void reduce(R dst, R a, R b, bool final) { p_.reduce(dst, a, b, final && allow_final_); }
  template <class R> void copy(R dst, R src) { p_.copy(dst, src); }
  /// dst = src, finalized only when this view passes finalize on.
  template <class R> void copy_final(R dst, R src) {
    if (allow_final_) p_.copy_final(dst, src);
    else p_.copy(dst, src);
  }
  void finish() { p_.finish(); }  ///< wait until queued sends have left the buffers

 private:
  range shift(range r) const noexcept { return {offset_ + r.offset, r.count}; }
  P& p_;
  std::span<const int> members_;
  int index_;
  std::size_t offset_, count_;
  bool on_output_, allow_final_;
};

}  // namespace gsync
