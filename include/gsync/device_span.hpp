#pragma once
/// \file
/// `gsync::device_span<T>`: a view of CUDA device memory, and the device memory space.
///
/// \code
///   float* grad;  cudaMalloc(&grad, n * sizeof(float));
///   gsync::allreduce(comm, gsync::device_span<float>{grad, n}, gsync::op::avg{}, stream);
/// \endcode
///
/// This header includes no CUDA header, so a translation unit compiled by a host compiler alone
/// can name device buffers and streams: `cuda_stream` is `CUstream_st*`, the very type that
/// `cudaStream_t` names in CUDA's headers, so a `cudaStream_t` passes as it is.
///
/// The memory space of a `device_span` is `device_memory`. A transport whose traits say it moves
/// device memory (`supports_device_memory`, none yet: the CUDA IPC link of issue 28 will) runs the
/// schedule on device memory directly; every other transport moves device buffers through pinned
/// host staging (cuda/staging.hpp): what a collective does on device memory is then its host
/// schedule run over a host mirror of the buffers, so results are those of the host path.

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "gsync/core/concepts.hpp"
#include "gsync/core/memory_space.hpp"

struct CUstream_st;  // CUDA's stream type: cudaStream_t is CUstream_st*

namespace gsync {

/// A CUDA stream (`cudaStream_t`); nullptr is the default (legacy) stream.
using cuda_stream = CUstream_st*;

/// A (pointer, count) view of device memory, as `std::span` is of host memory. `const T` for
/// inputs; a `device_span<T>` converts to `device_span<const T>`. The pointer is a device (or
/// managed) address the CUDA runtime can copy from and to; gsync never dereferences it on the host.
/// \tparam T element type (possibly const).
template <class T>
  requires element<std::remove_const_t<T>>
class device_span {
 public:
  using element_type = T;                       ///< element type (const for inputs)
  using value_type = std::remove_const_t<T>;    ///< element type without const

  /// An empty view.
  constexpr device_span() noexcept = default;
  /// `n` elements of device memory at `data`.
  constexpr device_span(T* data, std::size_t n) noexcept : p_(data), n_(n) {}
  /// A view of mutable elements viewed as const.
  /// \tparam U the source's element type (T without const).
  template <class U>
    requires(std::is_const_v<T> && std::is_same_v<U, std::remove_const_t<T>>)
  constexpr device_span(device_span<U> s) noexcept : p_(s.data()), n_(s.size()) {}

  constexpr T* data() const noexcept { return p_; }                          ///< device address
  constexpr std::size_t size() const noexcept { return n_; }                 ///< elements
  constexpr std::size_t size_bytes() const noexcept { return n_ * sizeof(T); }  ///< bytes
  constexpr bool empty() const noexcept { return n_ == 0; }                  ///< no elements
  /// Elements [offset, offset + count) of this view (no bounds check beyond the caller's).
  constexpr device_span subspan(std::size_t offset, std::size_t count) const noexcept { return {p_ + offset, count}; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Device memory: CUDA device (or managed) memory, viewed by `device_span<T>`.
struct device_memory {
  static constexpr std::string_view name = "device";  ///< for messages
  /// Transport X moves device buffers without staging when its traits say so.
  /// \tparam X a transport.
  template <class X>
  static constexpr bool moved_by = bool(transport_traits<X>::supports_device_memory);
};
static_assert(memory_space<device_memory>);

/// `device_span` views device memory.
/// \tparam T element type (possibly const).
template <class T>
struct memory_space_of<device_span<T>> {
  using type = device_memory;  ///< the space
};

}  // namespace gsync
