#pragma once
/// \file
/// The primitive vocabulary every algorithm is written in.
///
/// An algorithm names element ranges of the operation's input and output (`in(range)`,
/// `out(range)`) and moves them with five primitives:
///   send(to, src)                          queue src for `to` (returns at once)
///   recv(from, dst)                        wait for a message, store it in dst
///   recv_reduce(from, dst, local, final)   dst = local (op) incoming   [then finalize]
///   recv_reduce_send(from, to, dst, local, final)  the same, then queue dst for `to`
///   recv_copy_send(from, to, dst)          recv, then queue dst for `to`
/// plus local steps: `reduce(dst, a, b, final)` (dst = a (op) b; dst may be a or b), `copy`,
/// `copy_final` (copy with finalize, for one-rank worlds), and `finish()` (wait until every queued
/// send has left the operation's buffers). `scratch(range)` names part of the communicator's fixed
/// scratch buffer (`scratch_elems()` elements), for schedules that must receive a whole message
/// before combining it. Algorithms never see sockets or raw memory:
/// a `region` is opaque to them, so device memory (a CUDA reduction on a stream) or registered RDMA
/// memory plug in by providing another primitives type with the same vocabulary, named by its
/// memory space (`primitives_for`, core/memory_space.hpp). This file is the host space's.
///
/// Host memory implementation: incoming data for a reduction streams through the transport
/// (`recv_stream`) in element-aligned pieces and is combined straight into dst, so no per-message
/// scratch is allocated; a plain recv lands directly in dst.

#include <cstddef>
#include <cstring>
#include <span>

#include "gsync/core/chunking.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/reduce.hpp"
#include "gsync/core/topology.hpp"

namespace gsync {

namespace cuda::detail {
template <class, class, class>
class staged_primitives;
}  // namespace cuda::detail

/// A range of one of the operation's buffers, as handed to primitives. Algorithms treat it as opaque.
/// \tparam T element type.
template <class T>
class region {
 public:
  region() = default;
  /// Number of elements in the region.
  std::size_t count() const noexcept { return n_; }

 private:
  template <class, class, class> friend class host_primitives;
  template <class, class, class> friend class cuda::detail::staged_primitives;
  region(T* p, std::size_t n) : p_(p), n_(n) {}
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Primitives over host memory and any transport.
/// \tparam T element type. \tparam Op reduction operator. \tparam X transport.
template <class T, class Op, class X>
class host_primitives {
 public:
  /// \param x transport; \param id identity of the operation's messages; \param in input (may equal
  /// out); \param out output; \param count elements; \param segment_elems pipelining unit;
  /// \param op operator; \param dl deadline of every wait in this operation.
  /// \param scratch the communicator's scratch buffer (aligned for any element type).
  host_primitives(X& x, message_id id, const T* in, T* out, std::size_t count, std::size_t segment_elems,
                  Op op, deadline dl, std::span<std::byte> scratch = {})
      : x_(x), id_(id), in_(const_cast<T*>(in)), out_(out), count_(count),
        segment_elems_(segment_elems == 0 ? 1 : segment_elems), op_(op), dl_(dl),
        scratch_(reinterpret_cast<T*>(scratch.data())), scratch_elems_(scratch.size() / sizeof(T)) {}

  int rank() const { return x_.rank(); }              ///< this rank
  int size() const { return x_.size(); }              ///< world size
  std::size_t count() const { return count_; }        ///< elements in the operation
  std::size_t segment_elems() const { return segment_elems_; }  ///< pipelining unit in elements
  bool in_place() const { return in_ == out_; }       ///< input and output are the same buffer
  /// Placement of the ranks on hosts (for hierarchical schedules).
  const topology& topo() const { return x_.topo(); }

  /// Elements that fit in the scratch buffer.
  std::size_t scratch_elems() const { return scratch_elems_; }
  /// A range of the scratch buffer (r.offset + r.count <= scratch_elems()).
  region<T> scratch(range r) const { return {scratch_ + r.offset, r.count}; }

  /// A range of the input buffer (read only for primitives).
  region<T> in(range r) const { return {in_ + r.offset, r.count}; }
  /// A range of the output buffer.
  region<T> out(range r) const { return {out_ + r.offset, r.count}; }

  /// Queue `src` for `to`.
  void send(int to, region<T> src) { x_.post_send(to, id_, bytes(src.p_), src.n_ * sizeof(T)); }

  /// Wait for the next message from `from` and store it in `dst`.
  void recv(int from, region<T> dst) { x_.recv(from, id_, wbytes(dst.p_), dst.n_ * sizeof(T), dl_); }

  /// dst = local (op) incoming from `from`; with `final`, the operator's finalize is applied too.
  void recv_reduce(int from, region<T> dst, region<T> local, bool final) {
    if (final) recv_reduce_impl<true>(from, dst, local);
    else recv_reduce_impl<false>(from, dst, local);
  }

  /// recv_reduce, then queue the result for `to`.
  void recv_reduce_send(int from, int to, region<T> dst, region<T> local, bool final) {
    recv_reduce(from, dst, local, final);
    send(to, dst);
  }

  /// recv, then queue what arrived for `to`.
  void recv_copy_send(int from, int to, region<T> dst) {
    recv(from, dst);
    send(to, dst);
  }

  /// dst = finalize(src) (a copy for ops without finalize); used when no peer contributes.
  void copy_final(region<T> dst, region<T> src) { detail::finalize_copy(dst.p_, src.p_, src.n_, op_, size()); }

  /// dst = a (op) b, then finalize when `final`; dst may be the same region as a or b.
  void reduce(region<T> dst, region<T> a, region<T> b, bool final) {
    if (final) reduce_impl<true>(dst, a, b);
    else reduce_impl<false>(dst, a, b);
  }

  /// dst = src (no-op when they are the same region).
  void copy(region<T> dst, region<T> src) {
    if (dst.p_ != src.p_ && src.n_) std::memcpy(static_cast<void*>(dst.p_), src.p_, src.n_ * sizeof(T));
  }

  /// Wait until every queued send has released its source bytes.
  void finish() { x_.flush_sends(dl_); }

 private:
  template <bool Final>
  void recv_reduce_impl(int from, region<T> dst, region<T> local) {
    std::size_t done = 0;
    T* d = dst.p_;
    const T* l = local.p_;
    const Op op = op_;
    const int world = size();
    x_.recv_stream(from, id_, dst.n_ * sizeof(T), sizeof(T),
                   [&](std::span<const std::byte> piece) {
                     const std::size_t n = piece.size() / sizeof(T);
                     const T* incoming = reinterpret_cast<const T*>(piece.data());
                     if (d == l) detail::reduce_inplace<Final>(d + done, incoming, n, op, world);
                     else detail::reduce_to<Final>(d + done, l + done, incoming, n, op, world);
                     done += n;
                   },
                   dl_);
  }
  template <bool Final>
  void reduce_impl(region<T> dst, region<T> a, region<T> b) {
    if (dst.p_ == a.p_) detail::reduce_inplace<Final>(dst.p_, b.p_, dst.n_, op_, size());
    else if (dst.p_ == b.p_) detail::reduce_inplace_rhs<Final>(dst.p_, a.p_, dst.n_, op_, size());
    else detail::reduce_to<Final>(dst.p_, a.p_, b.p_, dst.n_, op_, size());
  }
  static const std::byte* bytes(const T* p) { return reinterpret_cast<const std::byte*>(p); }
  static std::byte* wbytes(T* p) { return reinterpret_cast<std::byte*>(p); }

  X& x_;
  message_id id_;
  T* in_;
  T* out_;
  std::size_t count_;
  std::size_t segment_elems_;
  Op op_;
  deadline dl_;
  T* scratch_;
  std::size_t scratch_elems_;
};

/// Host memory runs schedules over host_primitives.
/// \tparam T element type. \tparam Op reduction operator. \tparam X transport.
template <class T, class Op, class X>
struct primitives_for<host_memory, T, Op, X> {
  using type = host_primitives<T, Op, X>;  ///< the host space's primitives
};

}  // namespace gsync
