#pragma once
// From torch's element types and reduce operations to gsync's: a tensor's ScalarType selects the
// C++ element type (complex as its real pairs, bool as bytes), a ReduceOp the operator.

#include <cstdint>
#include <string>
#include <type_traits>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <gsync/core/error.hpp>
#include <gsync/core/half.hpp>
#include <gsync/core/ops.hpp>

namespace gsync_torch {

/// Bitwise operators for integer tensors (ReduceOp BAND, BOR, BXOR): user operators to gsync.
struct bit_and {
  static constexpr std::string_view name = "band";
  template <class A> A operator()(A a, A b) const noexcept { return static_cast<A>(a & b); }
};
struct bit_or {
  static constexpr std::string_view name = "bor";
  template <class A> A operator()(A a, A b) const noexcept { return static_cast<A>(a | b); }
};
struct bit_xor {
  static constexpr std::string_view name = "bxor";
  template <class A> A operator()(A a, A b) const noexcept { return static_cast<A>(a ^ b); }
};

[[noreturn]] inline void refuse(const std::string& what) { throw gsync::error(gsync::errc::invalid_argument, "gsync backend: " + what); }

/// Elements of gsync's type in `t`: complex tensors count their real and imaginary parts.
inline std::int64_t elements(const at::Tensor& t) { return t.is_complex() ? 2 * t.numel() : t.numel(); }

/// Calls `f.template operator()<T>()` with the gsync element type of `s`.
template <class F>
decltype(auto) with_type(at::ScalarType s, F&& f) {
  switch (s) {
    case at::kFloat: case at::kComplexFloat: return f.template operator()<float>();
    case at::kDouble: case at::kComplexDouble: return f.template operator()<double>();
    case at::kHalf: case at::kComplexHalf: return f.template operator()<gsync::half>();
    case at::kBFloat16: return f.template operator()<gsync::bfloat16>();
    case at::kChar: return f.template operator()<std::int8_t>();
    case at::kByte: case at::kBool: return f.template operator()<std::uint8_t>();
    case at::kShort: return f.template operator()<std::int16_t>();
    case at::kInt: return f.template operator()<std::int32_t>();
    case at::kLong: return f.template operator()<std::int64_t>();
    default: refuse(std::string("tensors of type ") + c10::toString(s) + " are not supported");
  }
}

/// Calls `f(op)` with the gsync operator of `r` for elements T of a tensor of type `s`. As NCCL
/// does, SUM and PRODUCT of bool tensors are logical or and and (max and min of bytes 0 and 1).
template <class T, class F>
void with_op(const c10d::ReduceOp& r, at::ScalarType s, F&& f) {
  const bool logical = s == at::kBool, complex = at::isComplexType(s);
  switch (r.op_) {
    case c10d::ReduceOp::SUM: return logical ? f(gsync::op::max{}) : f(gsync::op::sum{});
    case c10d::ReduceOp::AVG:
      if (logical) refuse("AVG of bool tensors");
      return f(gsync::op::avg{});
    case c10d::ReduceOp::PRODUCT:
      if (complex) refuse("PRODUCT of complex tensors (their parts would be multiplied one by one)");
      return logical ? f(gsync::op::min{}) : f(gsync::op::prod{});
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      if (complex) refuse("MIN and MAX of complex tensors");
      return r.op_ == c10d::ReduceOp::MIN ? f(gsync::op::min{}) : f(gsync::op::max{});
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if constexpr (std::is_integral_v<T>) {
        if (r.op_ == c10d::ReduceOp::BAND) return f(bit_and{});
        if (r.op_ == c10d::ReduceOp::BOR) return f(bit_or{});
        return f(bit_xor{});
      } else {
        refuse(std::string("bitwise reductions of ") + c10::toString(s) + " tensors (integers and bool only)");
      }
    default: refuse("this ReduceOp (PREMUL_SUM is NCCL's)");
  }
}

}  // namespace gsync_torch
