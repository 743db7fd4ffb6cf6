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
#include <exception>
#include <span>
#include <string>
#include <utility>

#include "gsync/core/chunking.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/elem_kernels.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/topology.hpp"

namespace gsync {

namespace cuda::detail {
template <class>
class staged_primitives;
}  // namespace cuda::detail

/// A range of one of the operation's buffers, as the typed primitives (host_primitives below, and
/// spaces built on it) hand it out. Algorithms treat it as opaque.
/// \tparam T element type.
template <class T>
class region {
 public:
  region() = default;
  /// Number of elements in the region.
  std::size_t count() const noexcept { return n_; }

 private:
  template <class, class, class> friend class host_primitives;
  region(T* p, std::size_t n) : p_(p), n_(n) {}
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// A range of one of the operation's buffers for the untyped host primitives: its first byte and
/// its length in elements. Algorithms treat it as opaque.
class host_region {
 public:
  host_region() = default;
  /// Number of elements in the region.
  std::size_t count() const noexcept { return n_; }

 private:
  template <class> friend class basic_host_primitives;
  template <class, class, class> friend class host_primitives;
  template <class> friend class cuda::detail::staged_primitives;
  host_region(std::byte* p, std::size_t n) : p_(p), n_(n) {}
  std::byte* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Primitives over host memory and any transport, for every element type and operator: the
/// element loops are reached through the (T, Op) table handed in (core/elem_kernels.hpp), so the
/// schedules run over this type are compiled once per transport. The host memory space's
/// primitives (`primitives_for<host_memory, T, Op, X>`).
/// \tparam X transport.
template <class X>
class basic_host_primitives {
 public:
  /// \param x transport; \param id identity of the operation's messages; \param in input (may equal
  /// out); \param out output; \param count elements; \param segment_elems pipelining unit;
  /// \param op operator, referred to and not copied: it must outlive these primitives (an empty
  /// operator excepted); \param dl deadline of every wait in this operation.
  /// \param scratch the communicator's scratch buffer (aligned for any element type).
  template <class T, class Op>
  basic_host_primitives(X& x, message_id id, const T* in, T* out, std::size_t count, std::size_t segment_elems,
                        const Op& op, deadline dl, std::span<std::byte> scratch = {})
      : basic_host_primitives(x, id, detail::elem_kernels_of<T, Op>, &op, const_cast<T*>(in), out, count,
                              segment_elems, dl, scratch) {}
  /// The same, untyped: `k` is the (T, Op) table, `op` the operator it is given.
  basic_host_primitives(X& x, message_id id, const detail::elem_kernels& k, const void* op, void* in, void* out,
                        std::size_t count, std::size_t segment_elems, deadline dl, std::span<std::byte> scratch = {})
      : x_(x), id_(id), k_(k), op_(op), es_(k.elem_size), in_(static_cast<std::byte*>(in)), out_(static_cast<std::byte*>(out)),
        count_(count), segment_elems_(segment_elems == 0 ? 1 : segment_elems), dl_(dl), scratch_(scratch.data()),
        scratch_elems_(scratch.size() / k.elem_size) {}

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
  host_region scratch(range r) const { return {scratch_ + r.offset * es_, r.count}; }

  /// A range of the input buffer (read only for primitives).
  host_region in(range r) const { return {in_ + r.offset * es_, r.count}; }
  /// A range of the output buffer.
  host_region out(range r) const { return {out_ + r.offset * es_, r.count}; }

  /// Queue `src` for `to`.
  void send(int to, host_region src) { x_.post_send(to, id_, src.p_, src.n_ * es_); }

  /// Wait for the next message from `from` and store it in `dst`.
  void recv(int from, host_region dst) { x_.recv(from, id_, dst.p_, dst.n_ * es_, dl_); }

  /// dst = local (op) incoming from `from`; with `final`, the operator's finalize is applied too.
  void recv_reduce(int from, host_region dst, host_region local, bool final) {
    std::size_t done = 0;  // bytes
    std::byte* d = dst.p_;
    const std::byte* l = local.p_;
    const int world = size();
    const std::size_t es = es_;
    const void* op = op_;
    auto* inplace = k_.reduce_inplace[final];
    auto* to = k_.reduce_to[final];
    x_.recv_stream(from, id_, dst.n_ * es, es,
                   [&](std::span<const std::byte> piece) {
                     const std::size_t n = piece.size() / es;
                     if (d == l) inplace(d + done, piece.data(), n, op, world);
                     else to(d + done, l + done, piece.data(), n, op, world);
                     done += piece.size();
                   },
                   dl_);
    if (detail::op_fault) [[unlikely]] raise_op_fault();
  }

  /// recv_reduce, then queue the result for `to`.
  void recv_reduce_send(int from, int to, host_region dst, host_region local, bool final) {
    recv_reduce(from, dst, local, final);
    send(to, dst);
  }

  /// recv, then queue what arrived for `to`.
  void recv_copy_send(int from, int to, host_region dst) {
    recv(from, dst);
    send(to, dst);
  }

  /// dst = finalize(src) (a copy for ops without finalize); used when no peer contributes.
  void copy_final(host_region dst, host_region src) {
    k_.finalize_copy(dst.p_, src.p_, src.n_, op_, size());
    if (detail::op_fault) [[unlikely]] raise_op_fault();
  }

  /// dst = a (op) b, then finalize when `final`; dst may be the same region as a or b.
  void reduce(host_region dst, host_region a, host_region b, bool final) {
    if (dst.p_ == a.p_) k_.reduce_inplace[final](dst.p_, b.p_, dst.n_, op_, size());
    else if (dst.p_ == b.p_) k_.reduce_inplace_rhs[final](dst.p_, a.p_, dst.n_, op_, size());
    else k_.reduce_to[final](dst.p_, a.p_, b.p_, dst.n_, op_, size());
    if (detail::op_fault) [[unlikely]] raise_op_fault();
  }

  /// dst = src (no-op when they are the same region).
  void copy(host_region dst, host_region src) {
    if (dst.p_ != src.p_ && src.n_) std::memcpy(dst.p_, src.p_, src.n_ * es_);
  }

  /// Wait until every queued send has released its source bytes.
  void finish() { x_.flush_sends(dl_); }

 private:
  // The user's operator threw in an element loop (detail::op_fault): this rank's part of the
  // operation stops before anything built on the result is sent, and the peers are told through
  // the transport's abort (else they would wait for data that never comes), so the operation
  // fails on every rank. Here: errc::invalid_argument naming what the operator threw.
  [[noreturn, gnu::cold]] void raise_op_fault() {
    std::string what = "an exception not derived from std::exception";
    try {
      std::rethrow_exception(std::exchange(detail::op_fault, nullptr));
    } catch (const std::exception& e) {
      what = std::string("'") + e.what() + "'";
    } catch (...) {
    }
    const std::string msg = "rank " + std::to_string(rank()) + ": the reduction operator threw " + what;
    if constexpr (requires { x_.abort(msg); }) x_.abort(msg);
    throw error(errc::invalid_argument, msg);
  }

  X& x_;
  message_id id_;
  const detail::elem_kernels& k_;
  const void* op_;
  std::size_t es_;
  std::byte* in_;
  std::byte* out_;
  std::size_t count_;
  std::size_t segment_elems_;
  deadline dl_;
  std::byte* scratch_;
  std::size_t scratch_elems_;
};

/// The host primitives with typed regions (`region<T>`), owning their operator: for memory spaces
/// built on host memory that want typed regions (tests/test_memory_space.cpp). Not copyable: the untyped primitives
/// inside refer to the operator held here.
/// \tparam T element type. \tparam Op reduction operator. \tparam X transport.
template <class T, class Op, class X>
class host_primitives {
 public:
  /// As basic_host_primitives, the operator copied.
  host_primitives(X& x, message_id id, const T* in, T* out, std::size_t count, std::size_t segment_elems, Op op,
                  deadline dl, std::span<std::byte> scratch = {})
      : op_(std::move(op)), b_(x, id, in, out, count, segment_elems, op_, dl, scratch),
        in_(const_cast<T*>(in)), out_(out), scratch_(reinterpret_cast<T*>(scratch.data())) {}
  host_primitives(const host_primitives&) = delete;
  host_primitives& operator=(const host_primitives&) = delete;

  int rank() const { return b_.rank(); }                          ///< this rank
  int size() const { return b_.size(); }                          ///< world size
  std::size_t count() const { return b_.count(); }                ///< elements in the operation
  std::size_t segment_elems() const { return b_.segment_elems(); }  ///< pipelining unit in elements
  bool in_place() const { return b_.in_place(); }                 ///< input and output are the same buffer
  const topology& topo() const { return b_.topo(); }              ///< placement of the ranks
  std::size_t scratch_elems() const { return b_.scratch_elems(); }  ///< elements of scratch
  region<T> scratch(range r) const { return {scratch_ + r.offset, r.count}; }  ///< a scratch range
  region<T> in(range r) const { return {in_ + r.offset, r.count}; }            ///< an input range
  region<T> out(range r) const { return {out_ + r.offset, r.count}; }          ///< an output range

  void send(int to, region<T> src) { b_.send(to, h(src)); }   ///< basic_host_primitives::send
  void recv(int from, region<T> dst) { b_.recv(from, h(dst)); }  ///< basic_host_primitives::recv
  /// basic_host_primitives::recv_reduce
  void recv_reduce(int from, region<T> dst, region<T> local, bool final) { b_.recv_reduce(from, h(dst), h(local), final); }
  /// basic_host_primitives::recv_reduce_send
  void recv_reduce_send(int from, int to, region<T> dst, region<T> local, bool final) {
    b_.recv_reduce_send(from, to, h(dst), h(local), final);
  }
  /// basic_host_primitives::recv_copy_send
  void recv_copy_send(int from, int to, region<T> dst) { b_.recv_copy_send(from, to, h(dst)); }
  void copy_final(region<T> dst, region<T> src) { b_.copy_final(h(dst), h(src)); }  ///< finalize-copy
  /// basic_host_primitives::reduce
  void reduce(region<T> dst, region<T> a, region<T> b, bool final) { b_.reduce(h(dst), h(a), h(b), final); }
  void copy(region<T> dst, region<T> src) { b_.copy(h(dst), h(src)); }  ///< dst = src
  void finish() { b_.finish(); }  ///< wait until queued sends have left the buffers

 private:
  static host_region h(region<T> r) { return {reinterpret_cast<std::byte*>(r.p_), r.n_}; }
  Op op_;
  basic_host_primitives<X> b_;
  T* in_;
  T* out_;
  T* scratch_;
};

/// Host memory runs schedules over the untyped basic_host_primitives (one schedule instance per
/// transport and algorithm, whatever the element type and operator).
/// \tparam T element type. \tparam Op reduction operator. \tparam X transport.
template <class T, class Op, class X>
struct primitives_for<host_memory, T, Op, X> {
  using type = basic_host_primitives<X>;  ///< the host space's primitives
};

}  // namespace gsync
