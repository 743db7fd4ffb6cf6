#pragma once
/// \file
/// The element engine of the IPC reduction (dst = src[0] op src[1] op ... op src[n-1]), in plain
/// C++ so that the CUDA kernel (cuda/ipc_kernels.cuh) and the host stand-in of the tests run the
/// same code: 16-byte packs where every pointer is aligned alike (cuda/packs.hpp), each element
/// accumulated in `accum_t<T>` (float for 16-bit floats) over the sources in rank order and
/// rounded once, `avg` finalized as `op::avg` does.

#include <cstddef>

#include "gsync/core/ops.hpp"
#include "gsync/cuda/ipc_api.hpp"
#include "gsync/cuda/packs.hpp"

namespace gsync::cuda {

/// One element of the n-source reduction at index `i`.
template <class T, class Op>
GSYNC_HD inline T ipc_combine_at(const ipc_sources& src, std::size_t i, const Op& op) noexcept {
  using A = accum_t<T>;
  A acc = static_cast<A>(static_cast<const T*>(src.p[0])[i]);
  for (int p = 1; p < src.n; ++p) acc = static_cast<A>(op(acc, static_cast<A>(static_cast<const T*>(src.p[p])[i])));
  if constexpr (finalizing_op<Op, T>) acc = static_cast<A>(op.finalize(acc, src.n));
  return gsync::detail::from_accum<T>(acc);
}

/// The share of the reduction over n elements (split `s` of dst and every source) that worker
/// `first` of `stride` does (a thread of the kernel's grid; the host runs one worker).
template <class T, class Op>
GSYNC_HD inline void ipc_reduce_share(const ipc_sources& src, T* dst, std::size_t n, split_plan s, const Op& op, std::size_t first,
                                      std::size_t stride) noexcept {
  using A = accum_t<T>;
  constexpr std::size_t P = pack_elems<T>;
  for (std::size_t i = first; i < s.head; i += stride) dst[i] = ipc_combine_at<T>(src, i, op);
  for (std::size_t k = first; k < s.packs; k += stride) {
    const std::size_t at = s.head + k * P;
    const pack<T> x0 = load_pack(static_cast<const T*>(src.p[0]) + at);
    A acc[P];
    for (std::size_t j = 0; j < P; ++j) acc[j] = static_cast<A>(x0.v[j]);
    for (int p = 1; p < src.n; ++p) {
      const pack<T> x = load_pack(static_cast<const T*>(src.p[p]) + at);
      for (std::size_t j = 0; j < P; ++j) acc[j] = static_cast<A>(op(acc[j], static_cast<A>(x.v[j])));
    }
    pack<T> r{};
    for (std::size_t j = 0; j < P; ++j) {
      A v = acc[j];
      if constexpr (finalizing_op<Op, T>) v = static_cast<A>(op.finalize(v, src.n));
      r.v[j] = gsync::detail::from_accum<T>(v);
    }
    store_pack(dst + at, r);
  }
  for (std::size_t i = s.head + s.packs * P + first; i < n; i += stride) dst[i] = ipc_combine_at<T>(src, i, op);
}

/// `Op` without its finalize: a level that only combines (the hierarchical allreduce inside a host).
/// \tparam Op a reduction operator.
template <class Op>
struct combine_only {
  Op op;  ///< the operator
  template <class A>
  GSYNC_HD constexpr A operator()(A a, A b) const {
    return op(a, b);
  }
};

/// The split of a reduction into `dst` from `src`.
template <class T>
GSYNC_HD inline split_plan ipc_split(const ipc_sources& src, const T* dst, std::size_t n) noexcept {
  const void* p[max_ipc_ranks + 1];
  p[0] = dst;
  for (int i = 0; i < src.n; ++i) p[i + 1] = src.p[i];
  return split(p, src.n + 1, n, sizeof(T));
}

/// `ipc_reduce_share` with the operator named at run time.
template <class T>
GSYNC_HD inline void ipc_reduce_any(const ipc_sources& src, T* dst, std::size_t n, split_plan s, ipc_op op, std::size_t first,
                                    std::size_t stride) noexcept {
  switch (op) {
    case ipc_op::sum: return ipc_reduce_share<T>(src, dst, n, s, gsync::op::sum{}, first, stride);
    case ipc_op::prod: return ipc_reduce_share<T>(src, dst, n, s, gsync::op::prod{}, first, stride);
    case ipc_op::min: return ipc_reduce_share<T>(src, dst, n, s, gsync::op::min{}, first, stride);
    case ipc_op::max: return ipc_reduce_share<T>(src, dst, n, s, gsync::op::max{}, first, stride);
    case ipc_op::avg: return ipc_reduce_share<T>(src, dst, n, s, gsync::op::avg{}, first, stride);
  }
}

/// Calls `f(T{})` with the element type named by `t`.
template <class F>
inline void visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::int8: return f(std::int8_t{});
    case dtype::uint8: return f(std::uint8_t{});
    case dtype::int16: return f(std::int16_t{});
    case dtype::uint16: return f(std::uint16_t{});
    case dtype::int32: return f(std::int32_t{});
    case dtype::uint32: return f(std::uint32_t{});
    case dtype::int64: return f(std::int64_t{});
    case dtype::uint64: return f(std::uint64_t{});
    case dtype::float16: return f(half{});
    case dtype::bfloat16: return f(bfloat16{});
    case dtype::float32: return f(float{});
    case dtype::float64: return f(double{});
  }
}

}  // namespace gsync::cuda
