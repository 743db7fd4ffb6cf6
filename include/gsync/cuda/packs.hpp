#pragma once
/// \file
/// The element engine of the device kernels (cuda/*.cuh), in plain C++ so that its logic runs,
/// and is tested, on the host too: data moves in 16-byte packs (one 128-bit load or store per
/// pack, what the memory system serves best), each element combined by the same
/// `detail::combine` as the host loops (core/reduce.hpp), so device and host results are equal
/// bit for bit. `split` says which part of an operation's range can move in packs: pointers
/// that are not 16-byte aligned alike leave a scalar head, and the rest of a pack-sized step a
/// scalar tail.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gsync/core/reduce.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::cuda {

/// Bytes of one pack.
inline constexpr std::size_t pack_bytes = 16;

/// Elements of T in one pack.
template <class T>
inline constexpr std::size_t pack_elems = pack_bytes / sizeof(T);

/// One pack of elements, 16-byte aligned (moved with one vector load or store).
template <class T>
struct alignas(pack_bytes) pack {
  T v[pack_elems<T>];
};
static_assert(sizeof(pack<float>) == pack_bytes && sizeof(pack<double>) == pack_bytes && sizeof(pack<std::int8_t>) == pack_bytes);

/// How a range of `n` elements splits: `head` scalar elements first (to reach 16-byte alignment),
/// then `packs` whole packs, then the rest scalar. `packs` is 0 when the pointers' offsets from a
/// 16-byte boundary differ (no common alignment exists: everything is scalar).
struct split_plan {
  std::size_t head = 0;   ///< scalar elements before the first pack
  std::size_t packs = 0;  ///< whole packs after them
};

/// The split of an operation over pointers `p[0..k)` (outputs and inputs alike) of `n` elements
/// of `elem` bytes each.
GSYNC_HD inline split_plan split(const void* const* p, int k, std::size_t n, std::size_t elem) noexcept {
  split_plan s;
  if (k <= 0 || elem == 0 || elem > pack_bytes) return s;
  const auto off = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(p[0]) % pack_bytes);
  for (int i = 1; i < k; ++i)
    if (static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(p[i]) % pack_bytes) != off) return s;
  if (off % elem != 0) return s;  // an element straddles every 16-byte boundary: scalar
  const std::size_t head_bytes = (pack_bytes - off) % pack_bytes;
  const std::size_t head = head_bytes / elem;
  if (head >= n) {
    s.head = n;
    return s;
  }
  s.head = head;
  s.packs = (n - head) / (pack_bytes / elem);
  return s;
}

/// Loads the pack at `p` (16-byte aligned): one 128-bit load on the device (as uint4: a struct
/// of smaller elements would be copied element by element), a copy on the host.
template <class T>
GSYNC_HD inline pack<T> load_pack(const T* p) noexcept {
#if defined(__CUDA_ARCH__)
  return gsync::detail::bit_cast<pack<T>>(*reinterpret_cast<const uint4*>(p));
#else
  pack<T> r;
  std::memcpy(static_cast<void*>(&r), p, sizeof r);
  return r;
#endif
}

/// Stores pack `v` at `p` (16-byte aligned): one 128-bit store on the device.
template <class T>
GSYNC_HD inline void store_pack(T* p, const pack<T>& v) noexcept {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = gsync::detail::bit_cast<uint4>(v);
#else
  std::memcpy(static_cast<void*>(p), &v, sizeof v);
#endif
}

/// One pack of dst = a (op) b, element by element (`Final`: finalize as the last step does).
template <bool Final, class T, class Op>
GSYNC_HD constexpr pack<T> combine_pack(const pack<T>& a, const pack<T>& b, const Op& op, int world) noexcept {
  pack<T> r{};
  for (std::size_t j = 0; j < pack_elems<T>; ++j) r.v[j] = gsync::detail::combine<Final>(a.v[j], b.v[j], op, world);
  return r;
}

/// The share of dst = a (op) b over n elements (split `s`) that worker `first` of `stride`
/// workers does: elements and packs first, first + stride, ... of the head, the packs and the
/// tail. A device kernel runs it with one worker per thread of its grid; the host tests run it
/// with every worker in turn. dst may equal a or b.
template <bool Final, class T, class Op>
GSYNC_HD inline void reduce_share(T* dst, const T* a, const T* b, std::size_t n, split_plan s, const Op& op, int world,
                                  std::size_t first, std::size_t stride) noexcept {
  for (std::size_t i = first; i < s.head; i += stride) dst[i] = gsync::detail::combine<Final>(a[i], b[i], op, world);
  constexpr std::size_t P = pack_elems<T>;
  for (std::size_t p = first; p < s.packs; p += stride) {
    const std::size_t at = s.head + p * P;
    store_pack(dst + at, combine_pack<Final>(load_pack(a + at), load_pack(b + at), op, world));
  }
  for (std::size_t i = s.head + s.packs * P + first; i < n; i += stride)
    dst[i] = gsync::detail::combine<Final>(a[i], b[i], op, world);
}

/// Elements per step of an elementwise map from `From` to `To` (a cast, a scaled unpack): 16
/// bytes of the narrower type, so that every step loads and stores whole packs of both.
template <class From, class To>
inline constexpr std::size_t step_elems = pack_bytes / (sizeof(From) < sizeof(To) ? sizeof(From) : sizeof(To));

/// `G` elements moved as whole packs (G * sizeof(T) is a multiple of 16).
template <class T, std::size_t G>
struct alignas(pack_bytes) elems {
  T v[G];
};

/// Whole steps of `step` elements in a map over n elements from `src` to `dst`: n / step when both
/// pointers are 16-byte aligned, else 0 (the map then runs scalar).
GSYNC_HD inline std::size_t map_steps(const void* dst, const void* src, std::size_t n, std::size_t step) noexcept {
  const bool aligned = reinterpret_cast<std::uintptr_t>(dst) % pack_bytes == 0 &&
                       reinterpret_cast<std::uintptr_t>(src) % pack_bytes == 0;
  return aligned && step ? n / step : 0;
}

/// Loads G elements at `p` (16-byte aligned): 128-bit loads on the device, a copy on the host.
template <class T, std::size_t G>
GSYNC_HD inline elems<T, G> load_elems(const T* p) noexcept {
  static_assert(G * sizeof(T) % pack_bytes == 0);
#if defined(__CUDA_ARCH__)
  struct raw {
    uint4 q[G * sizeof(T) / pack_bytes];
  } r;
  for (std::size_t j = 0; j < G * sizeof(T) / pack_bytes; ++j) r.q[j] = reinterpret_cast<const uint4*>(p)[j];
  return gsync::detail::bit_cast<elems<T, G>>(r);
#else
  elems<T, G> r;
  std::memcpy(static_cast<void*>(&r), p, sizeof r);
  return r;
#endif
}

/// Stores G elements at `p` (16-byte aligned): 128-bit stores on the device.
template <class T, std::size_t G>
GSYNC_HD inline void store_elems(T* p, const elems<T, G>& e) noexcept {
#if defined(__CUDA_ARCH__)
  struct raw {
    uint4 q[G * sizeof(T) / pack_bytes];
  };
  const raw r = gsync::detail::bit_cast<raw>(e);
  for (std::size_t j = 0; j < G * sizeof(T) / pack_bytes; ++j) reinterpret_cast<uint4*>(p)[j] = r.q[j];
#else
  std::memcpy(static_cast<void*>(p), &e, sizeof e);
#endif
}

/// The share of dst[i] = f(src[i]) over n elements (`steps` whole steps from map_steps, then the
/// rest scalar) that worker `first` of `stride` workers does, as reduce_share. dst may equal src
/// only when From and To are the same type.
template <class From, class To, class F>
GSYNC_HD inline void map_share(To* dst, const From* src, std::size_t n, std::size_t steps, F&& f, std::size_t first,
                               std::size_t stride) {
  constexpr std::size_t G = step_elems<From, To>;
  for (std::size_t s = first; s < steps; s += stride) {
    const elems<From, G> in = load_elems<From, G>(src + s * G);
    elems<To, G> out;
    for (std::size_t j = 0; j < G; ++j) out.v[j] = f(in.v[j]);
    store_elems<To, G>(dst + s * G, out);
  }
  for (std::size_t i = steps * G + first; i < n; i += stride) dst[i] = f(src[i]);
}

}  // namespace gsync::cuda
