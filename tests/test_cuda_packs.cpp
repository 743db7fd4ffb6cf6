// The device kernels' element engine (cuda/packs.hpp) run on the host: the split of a range into a
// scalar head, 16-byte packs and a scalar tail for every alignment, and `reduce_share`, the body
// of the reduce kernel (cuda/reduce.cuh), run with several workers and compared bit for bit with
// the host loops (core/reduce.hpp) for every dtype x op; and the map engine of the cast and unpack
// kernels (grad/cast.cuh) against the host gradient passes. What the kernel computes on a GPU is this
// function with one worker per thread.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include <gsync/core/ops.hpp>
#include <gsync/core/reduce.hpp>
#include <gsync/cuda/packs.hpp>
#include <gsync/grad/nonfinite.hpp>

#include "support/reference.hpp"

namespace {

using gsync::cuda::split;
using gsync::cuda::split_plan;

split_plan split_at(std::uintptr_t d, std::uintptr_t a, std::uintptr_t b, std::size_t n, std::size_t elem) {
  const void* p[3] = {reinterpret_cast<const void*>(d), reinterpret_cast<const void*>(a), reinterpret_cast<const void*>(b)};
  return split(p, 3, n, elem);
}

template <class T>
std::vector<std::uint8_t> bytes_of(const T* p, std::size_t n) {
  std::vector<std::uint8_t> v(n * sizeof(T));
  if (n) std::memcpy(v.data(), p, v.size());
  return v;
}

template <class T, class Op, bool Final>
void check_against_host(std::size_t offset_elems, std::size_t n, std::size_t workers, bool in_place) {
  // 16-byte aligned storage with room for the offset: the pointers start offset_elems in.
  const std::size_t cap = n + 64;
  std::vector<gsync::cuda::pack<T>> sa(cap / gsync::cuda::pack_elems<T> + 2), sb(sa.size()), sd(sa.size()), sh(sa.size());
  T* a = reinterpret_cast<T*>(sa.data()) + offset_elems;
  T* b = reinterpret_cast<T*>(sb.data()) + offset_elems;
  T* d = in_place ? a : reinterpret_cast<T*>(sd.data()) + offset_elems;
  T* h = reinterpret_cast<T*>(sh.data()) + offset_elems;
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = gsync_test::input<T, Op>(0, i);
    b[i] = gsync_test::input<T, Op>(1, i);
  }
  gsync::detail::reduce_to<Final>(h, a, b, n, Op{}, 3);  // the host loops
  const void* p[3] = {d, a, b};
  const split_plan s = split(p, 3, n, sizeof(T));
  for (std::size_t w = 0; w < workers; ++w) gsync::cuda::reduce_share<Final>(d, a, b, n, s, Op{}, 3, w, workers);
  CHECK(bytes_of(d, n) == bytes_of(h, n));
}

template <class T, class Op>
void sweep() {
  CAPTURE(sizeof(T));
  CAPTURE(Op::name);
  for (std::size_t off : {std::size_t{0}, std::size_t{1}, gsync::cuda::pack_elems<T> - 1})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{257}, std::size_t{4099}})
      for (std::size_t workers : {std::size_t{1}, std::size_t{3}, std::size_t{64}}) {
        CAPTURE(off);
        CAPTURE(n);
        CAPTURE(workers);
        check_against_host<T, Op, false>(off, n, workers, false);
        check_against_host<T, Op, true>(off, n, workers, true);
      }
}

template <class T>
void sweep_ops() {
  gsync_test::for_each_op([&]<class Op>() { sweep<T, Op>(); });
}

}  // namespace

TEST_CASE("cuda packs: a range splits into an aligned head, whole packs and a tail") {
  struct row {
    std::uintptr_t d, a, b;
    std::size_t n, elem, head, packs;
    const char* what;
  };
  const row rows[] = {
      {0x1000, 0x2000, 0x3000, 10, 4, 0, 2, "all 16-byte aligned: no head, floor(n / 4) packs of float"},
      {0x1004, 0x2004, 0x3004, 20, 4, 3, 4, "the same offset 4: 3 floats reach the boundary, then packs"},
      {0x1004, 0x2008, 0x3004, 100, 4, 0, 0, "offsets that differ: no common alignment, all scalar"},
      {0x1004, 0x2004, 0x3004, 100, 8, 0, 0, "an offset that is no multiple of the element: doubles straddle every boundary"},
      {0x1001, 0x2001, 0x3001, 5, 1, 5, 0, "a range shorter than the head: all head"},
      {0x1001, 0x2001, 0x3001, 100, 1, 15, 5, "int8 at offset 1: 15 to the boundary, then packs of 16"},
  };
  for (const row& r : rows) {
    CAPTURE(r.what);
    const auto s = split_at(r.d, r.a, r.b, r.n, r.elem);
    CHECK(s.head == r.head);
    CHECK(s.packs == r.packs);
  }
}

TEST_CASE("cuda packs: the reduce kernel's body gives the host loops' bits for every dtype and op") {
  gsync_test::for_each_dtype([&]<class T>() { sweep_ops<T>(); });
}

// The gradient passes' kernels (grad/cast.cuh) run `map_share` with the host passes' element
// functions: the same bits as grad::cast_into and grad::unpack_scan, and the same count.
namespace {

template <class From, class To>
void check_map(std::size_t off, std::size_t n, std::size_t workers, float factor) {
  std::vector<gsync::cuda::pack<From>> ss(n / gsync::cuda::pack_elems<From> + 3);
  std::vector<gsync::cuda::pack<To>> sd(n / gsync::cuda::pack_elems<To> + 3), sh(sd.size());
  From* src = reinterpret_cast<From*>(ss.data()) + off;
  To* dst = reinterpret_cast<To*>(sd.data()) + off;
  To* want = reinterpret_cast<To*>(sh.data()) + off;
  for (std::size_t i = 0; i < n; ++i) {
    src[i] = gsync::grad::detail::from_f<From>(gsync_test::gradient_value(i));
  }
  constexpr std::size_t G = gsync::cuda::step_elems<From, To>;
  // The cast.
  gsync::grad::cast_into(src, want, n);
  std::size_t steps = gsync::cuda::map_steps(dst, src, n, G);
  for (std::size_t w = 0; w < workers; ++w)
    gsync::cuda::map_share(dst, src, n, steps, [](From v) { return gsync::grad::detail::from_f<To>(gsync::grad::detail::to_f(v)); }, w, workers);
  CHECK(bytes_of(dst, n) == bytes_of(want, n));
  // The fused unpack and its count.
  const std::size_t want_bad = gsync::grad::unpack_scan(src, want, n, factor);
  std::size_t bad = 0;
  for (std::size_t w = 0; w < workers; ++w)
    gsync::cuda::map_share(dst, src, n, steps,
                           [&](From v) {
                             const To r = gsync::grad::detail::unpack_one<From, To>(v, factor);
                             bad += gsync::grad::detail::nonfinite_bit(gsync::grad::detail::to_f(r));
                             return r;
                           },
                           w, workers);
  CHECK(bytes_of(dst, n) == bytes_of(want, n));
  CHECK(bad == want_bad);
  if (off == 0 && n >= G) CHECK(steps == n / G);  // aligned: whole steps
  if (off != 0) CHECK(steps == 0);                 // misaligned: scalar
}

template <class From, class To>
void sweep_map() {
  for (std::size_t off : {std::size_t{0}, std::size_t{1}})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{1000}, std::size_t{4099}})
      for (std::size_t workers : {std::size_t{1}, std::size_t{5}}) {
        CAPTURE(off);
        CAPTURE(n);
        CAPTURE(workers);
        check_map<From, To>(off, n, workers, 0.125f);
        check_map<From, To>(off, n, workers, 3e38f);  // overflows: counted
      }
}

}  // namespace

TEST_CASE("cuda packs: the cast and unpack kernels' body gives the host passes' bits and counts") {
  sweep_map<float, gsync::bfloat16>();
  sweep_map<float, gsync::half>();
  sweep_map<gsync::bfloat16, float>();
  sweep_map<gsync::half, float>();
  sweep_map<float, float>();
  sweep_map<gsync::half, gsync::bfloat16>();
}
