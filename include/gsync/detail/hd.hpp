#pragma once
/// \file
/// `GSYNC_HD`: marks the functions that run on both sides of a CUDA build, the host and the
/// device (`__host__ __device__` when nvcc or clang compiles CUDA, nothing otherwise): the
/// reduction operators, the 16-bit conversions and the element combine, so that a device kernel
/// computes each element with the very code the host path uses and gets the same bits.
/// A user operator used on device buffers marks its call operator with it too (or
/// `__host__ __device__` itself). `detail::bit_cast` is std::bit_cast for such functions
/// (std::bit_cast is a host function to nvcc).

#include <type_traits>

#if defined(__CUDACC__)
#define GSYNC_HD __host__ __device__
#else
#define GSYNC_HD
#endif

/// The inline namespace of the templates whose meaning depends on whether nvcc compiles the file:
/// a user operator's GPU kernel (cuda::ipc_user_reduction) exists only there, so the device
/// collectives that may use it are distinct entities in .cu and .cpp files (as CUB tags its
/// namespace), instead of one name with two definitions that the linker would merge.
#if defined(__CUDACC__)
#define GSYNC_TU_NS tu_nvcc
#else
#define GSYNC_TU_NS tu_host
#endif

namespace gsync::detail {

/// std::bit_cast, callable from host and device code.
template <class To, class From>
  requires(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>)
[[nodiscard]] GSYNC_HD constexpr To bit_cast(const From& v) noexcept {
  return __builtin_bit_cast(To, v);
}

}  // namespace gsync::detail
