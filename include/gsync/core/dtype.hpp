#pragma once
/// \file
/// The element types gsync reduces, and their runtime names.
///
/// `dtype` is the runtime tag of an element type (for logs, the perf tool, fingerprints); `dtype_of<T>`
/// maps a C++ type to it. Only the twelve types listed here are elements; `gsync::element` (in
/// concepts.hpp) checks that at compile time.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "gsync/core/half.hpp"

namespace gsync {

/// Runtime tag of an element type.
enum class dtype : std::uint8_t {
  int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, float64,
};

namespace detail {
template <class T> struct dtype_map;
template <> struct dtype_map<std::int8_t> { static constexpr dtype value = dtype::int8; };
template <> struct dtype_map<std::uint8_t> { static constexpr dtype value = dtype::uint8; };
template <> struct dtype_map<std::int16_t> { static constexpr dtype value = dtype::int16; };
template <> struct dtype_map<std::uint16_t> { static constexpr dtype value = dtype::uint16; };
template <> struct dtype_map<std::int32_t> { static constexpr dtype value = dtype::int32; };
template <> struct dtype_map<std::uint32_t> { static constexpr dtype value = dtype::uint32; };
template <> struct dtype_map<std::int64_t> { static constexpr dtype value = dtype::int64; };
template <> struct dtype_map<std::uint64_t> { static constexpr dtype value = dtype::uint64; };
template <> struct dtype_map<half> { static constexpr dtype value = dtype::float16; };
template <> struct dtype_map<bfloat16> { static constexpr dtype value = dtype::bfloat16; };
template <> struct dtype_map<float> { static constexpr dtype value = dtype::float32; };
template <> struct dtype_map<double> { static constexpr dtype value = dtype::float64; };
template <class T, class = void> struct is_dtype : std::false_type {};
template <class T> struct is_dtype<T, std::void_t<decltype(dtype_map<T>::value)>> : std::true_type {};
}  // namespace detail

/// True for the element types gsync supports (after removing cv-qualifiers).
/// \tparam T candidate element type.
template <class T>
inline constexpr bool is_element_v = detail::is_dtype<std::remove_cv_t<T>>::value;

/// The runtime tag of element type `T`. \tparam T an element type (see `is_element_v`).
template <class T>
inline constexpr dtype dtype_of = detail::dtype_map<std::remove_cv_t<T>>::value;

/// Size in bytes of one element of `d`.
constexpr std::size_t size_of(dtype d) noexcept {
  switch (d) {
    case dtype::int8: case dtype::uint8: return 1;
    case dtype::int16: case dtype::uint16: case dtype::float16: case dtype::bfloat16: return 2;
    case dtype::int32: case dtype::uint32: case dtype::float32: return 4;
    case dtype::int64: case dtype::uint64: case dtype::float64: return 8;
  }
  return 0;
}

/// The name used in logs, the perf tool and error messages (`float32`, `bfloat16`, `int8`, ...).
constexpr std::string_view name(dtype d) noexcept {
  switch (d) {
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::int16: return "int16";
    case dtype::uint16: return "uint16";
    case dtype::int32: return "int32";
    case dtype::uint32: return "uint32";
    case dtype::int64: return "int64";
    case dtype::uint64: return "uint64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
  }
  return "?";
}

/// The type in which one reduction step combines two elements: `float` for `half` and `bfloat16`
/// (so a step rounds once, not per operation), the element type itself otherwise.
/// \tparam T an element type.
template <class T>
using accum_t = std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

}  // namespace gsync
