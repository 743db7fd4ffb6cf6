#pragma once
/// \file
/// Reduction operators.
///
/// An operator is a small function object combining two values of the accumulation type
/// (`accum_t<T>`: float for half/bfloat16, T otherwise). It is passed by value and called directly
/// inside the reduction loop, so it inlines and the loop vectorizes; there is no type erasure anywhere
/// on that path. An operator may also define `finalize(value, world_size)`, applied once to each fully
/// reduced element inside the last reduction step (that is how `avg` divides without another pass).
///
/// A user operator is any type satisfying `gsync::reduction_op<Op, T>` (concepts.hpp), e.g.
/// \code
///   struct absmax { template <class A> A operator()(A a, A b) const { return std::max(a < 0 ? -a : a, b < 0 ? -b : b); } };
///   gsync::allreduce(comm, std::span<float>{v}, absmax{});
/// \endcode
/// It must be associative and commutative up to the rounding the user accepts, and identical on all ranks.
/// For device buffers its call operator (and `finalize`) must be callable on the device: mark them
/// `GSYNC_HD` (detail/hd.hpp), as the operators below are.

#include <string_view>
#include <type_traits>

#include "gsync/core/exact_fp.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::op {

/// Sum.
struct sum {
  static constexpr std::string_view name = "sum";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return detail::rn_add(a, b); }
};

/// Product.
struct prod {
  static constexpr std::string_view name = "prod";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return detail::rn_mul(a, b); }
};

/// Minimum. For floating types, a NaN operand propagates only where `<` says so (as std::min).
struct min {
  static constexpr std::string_view name = "min";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return detail::ordered_less(b, a) ? b : a; }
};

/// Maximum. For floating types, a NaN operand propagates only where `<` says so (as std::max).
struct max {
  static constexpr std::string_view name = "max";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return detail::ordered_less(a, b) ? b : a; }
};

/// Average: sum, then divided by the world size in the last reduction step. For integer types the
/// division truncates toward zero (C++ integer division), as MPI users would expect of an int average.
struct avg {
  static constexpr std::string_view name = "avg";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return detail::rn_add(a, b); }
  template <class A> GSYNC_HD constexpr A finalize(A v, int world_size) const noexcept {
    using W = std::common_type_t<A, int>;  // int8 -> int, uint64 -> uint64, float -> float
    return static_cast<A>(detail::rn_div(static_cast<W>(v), static_cast<W>(world_size)));
  }
};

}  // namespace gsync::op
