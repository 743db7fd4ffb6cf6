#pragma once
/// \file
/// The element loops of one (element type, operator) pair as a table of plain functions, so that
/// the host schedules, which only move ranges, are compiled once per transport instead of once per
/// (T, Op): a file that calls allreduce for five element types generates the seven schedules once,
/// and five of these tables. Each entry is the loop of core/reduce.hpp for that pair, inlined and
/// vectorized inside its entry as before; the schedules reach it through one indirect call per
/// piece (a segment, or what the transport hands over at a time), never per element.

#include <cstddef>
#include <exception>
#include <type_traits>

#include "gsync/core/reduce.hpp"

namespace gsync::detail {

/// The loops of one (T, Op) pair over untyped pointers. `op` points to the operator (unused for
/// an empty one, which is default-constructed instead: a stateless operator may be a temporary
/// that is gone when the loop runs). Index [Final] selects whether the operator's finalize runs.
struct elem_kernels {
  std::size_t elem_size;  ///< sizeof(T)
  /// dst = a (op) b; dst overlaps neither.
  void (*reduce_to[2])(void* dst, const void* a, const void* b, std::size_t n, const void* op, int world);
  /// dst = dst (op) b.
  void (*reduce_inplace[2])(void* dst, const void* b, std::size_t n, const void* op, int world);
  /// dst = a (op) dst.
  void (*reduce_inplace_rhs[2])(void* dst, const void* a, std::size_t n, const void* op, int world);
  /// dst = finalize(src) (a copy for operators without finalize); dst may equal src.
  void (*finalize_copy)(void* dst, const void* src, std::size_t n, const void* op, int world);
};

/// What a reduction operator that may throw (not `nothrow_op`) threw in this thread's element
/// loops, the first such exception of the running operation: the primitives fail the operation
/// with it once the loop has returned (basic_host_primitives::raise_op_fault). A thread runs one
/// operation at a time, so one slot per thread is enough.
inline thread_local std::exception_ptr op_fault;

/// Runs the loop `f` of operator `Op`: as is for a `nothrow_op`, else catching what it throws into
/// `op_fault` (the loop stops there; the operation fails anyway).
template <class Op, class T, class F>
inline void guard_op(F&& f) noexcept {
  if constexpr (nothrow_op<Op, T>) {
    f();
  } else {
    try {
      f();
    } catch (...) {
      if (!op_fault) op_fault = std::current_exception();
    }
  }
}

/// The operator behind an untyped pointer (see elem_kernels).
template <class Op>
inline decltype(auto) op_at(const void* op) noexcept {
  if constexpr (std::is_empty_v<Op> && std::is_default_constructible_v<Op>) return Op{};
  else return *static_cast<const Op*>(op);
}

template <bool Final, class T, class Op>
void kernel_reduce_to(void* dst, const void* a, const void* b, std::size_t n, const void* op, int world) {
  guard_op<Op, T>([&] { reduce_to<Final>(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), n, op_at<Op>(op), world); });
}
template <bool Final, class T, class Op>
void kernel_reduce_inplace(void* dst, const void* b, std::size_t n, const void* op, int world) {
  guard_op<Op, T>([&] { reduce_inplace<Final>(static_cast<T*>(dst), static_cast<const T*>(b), n, op_at<Op>(op), world); });
}
template <bool Final, class T, class Op>
void kernel_reduce_inplace_rhs(void* dst, const void* a, std::size_t n, const void* op, int world) {
  guard_op<Op, T>([&] { reduce_inplace_rhs<Final>(static_cast<T*>(dst), static_cast<const T*>(a), n, op_at<Op>(op), world); });
}
template <class T, class Op>
void kernel_finalize_copy(void* dst, const void* src, std::size_t n, const void* op, int world) {
  guard_op<Op, T>([&] { finalize_copy(static_cast<T*>(dst), static_cast<const T*>(src), n, op_at<Op>(op), world); });
}

/// The table of (T, Op).
/// \tparam T element type. \tparam Op reduction operator.
template <class T, class Op>
inline constexpr elem_kernels elem_kernels_of{
    sizeof(T),
    {&kernel_reduce_to<false, T, Op>, &kernel_reduce_to<true, T, Op>},
    {&kernel_reduce_inplace<false, T, Op>, &kernel_reduce_inplace<true, T, Op>},
    {&kernel_reduce_inplace_rhs<false, T, Op>, &kernel_reduce_inplace_rhs<true, T, Op>},
    &kernel_finalize_copy<T, Op>,
};

}  // namespace gsync::detail
