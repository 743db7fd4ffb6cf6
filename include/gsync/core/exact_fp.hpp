#pragma once
/// \file
/// Floating-point steps whose results do not depend on how the device code was compiled. nvcc's
/// `--use_fast_math`, `-ftz=true`, `-prec-div=false` and `--fmad` change what `a + b`, `a * b`,
/// `a / b`, `a < b` and float-to-int conversions compile to (flushed subnormals, approximate
/// division, products fused into the next sum), and CUDA's rounding intrinsics (`__fadd_rn`) are
/// flushed under `-ftz=true` too. Only PTX written out is left alone, so on the device these
/// functions are one PTX instruction each (round to nearest even, subnormals kept, never fused);
/// on the host, and in constant evaluation, they are the plain operators. Every gsync kernel
/// (reduce, IPC reduce, avg, cast, norm, quantize) computes through them, and
/// tests/cuda_flags.sh checks that their PTX is the same under those flags as without.

#include <cstdint>
#include <type_traits>

#include "gsync/detail/hd.hpp"

namespace gsync::detail {

#if defined(__CUDA_ARCH__)
#define GSYNC_FP_ASM(A, F32, F64, a, b)                                                \
  if (!__builtin_is_constant_evaluated()) {                                            \
    if constexpr (std::is_same_v<A, float>) {                                          \
      float r;                                                                         \
      asm(F32 " %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));                              \
      return r;                                                                        \
    } else if constexpr (std::is_same_v<A, double>) {                                  \
      double r;                                                                        \
      asm(F64 " %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));                              \
      return r;                                                                        \
    }                                                                                  \
  }
#else
#define GSYNC_FP_ASM(A, F32, F64, a, b)
#endif

/// a + b, rounded to nearest even. \tparam A any arithmetic type (float and double exactly so).
template <class A>
GSYNC_HD constexpr A rn_add(A a, A b) noexcept {
  GSYNC_FP_ASM(A, "add.rn.f32", "add.rn.f64", a, b)
  return static_cast<A>(a + b);
}
/// a - b, rounded to nearest even.
template <class A>
GSYNC_HD constexpr A rn_sub(A a, A b) noexcept {
  GSYNC_FP_ASM(A, "sub.rn.f32", "sub.rn.f64", a, b)
  return static_cast<A>(a - b);
}
/// a * b, rounded to nearest even (never fused with a following sum).
template <class A>
GSYNC_HD constexpr A rn_mul(A a, A b) noexcept {
  GSYNC_FP_ASM(A, "mul.rn.f32", "mul.rn.f64", a, b)
  return static_cast<A>(a * b);
}
/// a / b, correctly rounded (IEEE division, also under -prec-div=false); integers divide as C++ does.
template <class A>
GSYNC_HD constexpr A rn_div(A a, A b) noexcept {
  GSYNC_FP_ASM(A, "div.rn.f32", "div.rn.f64", a, b)
  return static_cast<A>(a / b);
}
#undef GSYNC_FP_ASM

/// a < b (false when either is NaN), subnormals compared as they are.
template <class A>
GSYNC_HD constexpr bool ordered_less(A a, A b) noexcept {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated()) {
    if constexpr (std::is_same_v<A, float>) {
      unsigned r;
      asm("{\n\t.reg .pred p;\n\tsetp.lt.f32 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(r) : "f"(a), "f"(b));
      return r != 0;
    } else if constexpr (std::is_same_v<A, double>) {
      unsigned r;
      asm("{\n\t.reg .pred p;\n\tsetp.lt.f64 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(r) : "d"(a), "d"(b));
      return r != 0;
    }
  }
#endif
  return a < b;
}

/// The float `v` as a double (exact; subnormal floats kept).
GSYNC_HD constexpr double widen(float v) noexcept {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated()) {
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(v));
    return r;
  }
#endif
  return static_cast<double>(v);
}

/// The float `v` truncated toward zero to an int32 (`v` within its range), as static_cast does.
GSYNC_HD constexpr std::int32_t trunc_to_int(float v) noexcept {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated()) {
    std::int32_t r;
    asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
  }
#endif
  return static_cast<std::int32_t>(v);
}

}  // namespace gsync::detail
