// The device kernels on a GPU against the host code, bit for bit: the reduce kernel
// (cuda/reduce.cuh) against the host loops (core/reduce.hpp) for every dtype x op, awkward counts,
// misaligned and in-place operands; the cast and unpack kernels (grad/cast.cuh) against the
// gradient layer's host passes (grad/nonfinite.hpp), values and non-finite count. Without a
// int8 encode / decode kernels (grad/quantize.cuh) against the host's blockwise quantizer
// (grad/quantize.hpp): scales, levels, residuals and decoded values. Without a
// CUDA device it says "skipped: no CUDA device" and exits 77 (ctest's SKIP_RETURN_CODE), never
// a pass. Exit 1 on any difference or CUDA error.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gsync/core/ops.hpp>
#include <gsync/core/reduce.hpp>
#include <gsync/grad/cast.cuh>
#include <gsync/grad/quantize.cuh>
#include <gsync/grad/quantize.hpp>
#include <gsync/cuda/reduce.cuh>
#include <gsync/grad/nonfinite.hpp>

#include "../support/reference.hpp"

namespace {

int failures = 0;

template <class T, class Op, bool Final>
void run(std::size_t n, std::size_t off, bool in_place) {
  const std::size_t cap = n + off + 16;
  std::vector<T> a(cap), b(cap), want(cap), got(cap);
  for (std::size_t i = 0; i < n; ++i) {
    a[off + i] = gsync_test::input<T, Op>(0, i);
    b[off + i] = gsync_test::input<T, Op>(1, i);
  }
  gsync::detail::reduce_to<Final>(want.data() + off, a.data() + off, b.data() + off, n, Op{}, 3);
  T *da = nullptr, *db = nullptr, *dd = nullptr;
  gsync::cuda::check(cudaMalloc(&da, cap * sizeof(T)), "cudaMalloc");
  gsync::cuda::check(cudaMalloc(&db, cap * sizeof(T)), "cudaMalloc");
  gsync::cuda::check(cudaMalloc(&dd, cap * sizeof(T)), "cudaMalloc");
  gsync::cuda::check(cudaMemcpy(da, a.data(), cap * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  gsync::cuda::check(cudaMemcpy(db, b.data(), cap * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  T* dst = in_place ? da : dd;
  gsync::cuda::reduce<Final>(dst + off, da + off, db + off, n, Op{}, 3, cudaStream_t{});
  gsync::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  gsync::cuda::check(cudaMemcpy(got.data(), dst, cap * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (n && std::memcmp(got.data() + off, want.data() + off, n * sizeof(T)) != 0) {
    ++failures;
    std::printf("FAIL: %zu-byte elements, %s, final %d, n %zu, offset %zu, in place %d\n", sizeof(T), std::string(Op::name).c_str(),
                Final ? 1 : 0, n, off, in_place ? 1 : 0);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
}

template <class T, class Op>
void sweep() {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, gsync::cuda::pack_elems<T> - 1, std::size_t{1000003}, std::size_t{1} << 22})
    for (std::size_t off : {std::size_t{0}, std::size_t{1}})
      for (bool in_place : {false, true}) {
        run<T, Op, false>(n, off, in_place);
        run<T, Op, true>(n, off, in_place);
      }
}

template <class T>
void sweep_ops() {
  gsync_test::for_each_op([&]<class Op>() { sweep<T, Op>(); });
}

template <class T>
T* to_device(const std::vector<T>& v) {
  T* d = nullptr;
  gsync::cuda::check(cudaMalloc(&d, v.size() * sizeof(T)), "cudaMalloc");
  gsync::cuda::check(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
  std::vector<T> v(n);
  gsync::cuda::check(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return v;
}

template <class From, class To>
void run_map(std::size_t n, std::size_t off) {
  std::vector<From> src(n + off + 16);
  for (std::size_t i = 0; i < n; ++i) {
    src[off + i] = gsync::grad::detail::from_f<From>(gsync_test::gradient_value(i));
  }
  std::vector<To> want(src.size());
  From* ds = to_device(src);
  To* dd = to_device(want);
  unsigned long long* dcount = nullptr;
  gsync::cuda::check(cudaMalloc(&dcount, sizeof *dcount), "cudaMalloc");
  gsync::cuda::check(cudaMemset(dcount, 0, sizeof *dcount), "cudaMemset");
  gsync::grad::cast_into(src.data() + off, want.data() + off, n);
  gsync::cuda::cast_into(ds + off, dd + off, n, cudaStream_t{});
  std::vector<To> got = to_host(dd, want.size());
  const bool cast_ok = !n || std::memcmp(got.data() + off, want.data() + off, n * sizeof(To)) == 0;
  const std::size_t want_bad = gsync::grad::unpack_scan(src.data() + off, want.data() + off, n, 3e38f);
  gsync::cuda::unpack_scan(ds + off, dd + off, n, 3e38f, dcount, cudaStream_t{});
  got = to_host(dd, want.size());
  const unsigned long long bad = to_host(dcount, 1)[0];
  if (!cast_ok || (n && std::memcmp(got.data() + off, want.data() + off, n * sizeof(To)) != 0) || bad != want_bad) {
    ++failures;
    std::printf("FAIL: map %zu -> %zu bytes, n %zu, offset %zu (cast %s, count %llu, host %zu)\n", sizeof(From), sizeof(To), n, off,
                cast_ok ? "ok" : "differs", bad, want_bad);
  }
  cudaFree(ds);
  cudaFree(dd);
  cudaFree(dcount);
}

template <class From, class To>
void sweep_map() {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000003}, std::size_t{1} << 22})
    for (std::size_t off : {std::size_t{0}, std::size_t{1}}) run_map<From, To>(n, off);
}

/// int8 encode (with and without error feedback) and decode of `n` values in blocks of `block`,
/// device against host, bit for bit. Block 1 holds a NaN and block 2 is negligible when present.
void run_int8(std::size_t n, std::size_t block, gsync::grad::rounding mode, bool feedback) {
  namespace gq = gsync::grad;
  std::vector<float> g(n), r(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = gsync_test::gradient_value(i);
    r[i] = 0.01f * gsync_test::gradient_value(i + 7);
  }
  if (n > block) g[block + 1] = std::numeric_limits<float>::quiet_NaN();
  if (n > 2 * block)
    for (std::size_t i = 2 * block; i < std::min(n, 3 * block); ++i) g[i] = r[i] = 0x1p-110f;
  const std::size_t blocks = (n + block - 1) / block;
  const auto rng = gq::counter_rng::make(42, 3, 17, 0);
  const std::uint64_t first = 1000;
  // host
  std::vector<float> hr = r, hscale(blocks), hdec(n), hacc(n, 1.5f);
  std::vector<std::int8_t> hq(n);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t off = b * block, len = std::min(block, n - off);
    std::vector<float> e(g.begin() + static_cast<std::ptrdiff_t>(off), g.begin() + static_cast<std::ptrdiff_t>(off + len));
    if (feedback)
      for (std::size_t i = 0; i < len; ++i) e[i] = hr[off + i] + e[i];
    const gq::block_scale s = gq::scale_of(e.data(), len);
    gq::quantize_block(e.data(), len, s, hq.data() + off, mode, rng, first + off);
    if (feedback) {
      gq::update_residual(e.data(), hq.data() + off, len, s);
      std::copy(e.begin(), e.end(), hr.begin() + static_cast<std::ptrdiff_t>(off));
    }
    hscale[b] = s.scale;
    gq::dequantize_block(hq.data() + off, len, s.scale, hdec.data() + off);
    gq::dequantize_add_block(hq.data() + off, len, s.scale, hacc.data() + off);
  }
  // device
  float* dg = to_device(g);
  float* dr = to_device(r);
  std::vector<float> zeros(std::max<std::size_t>(blocks, 1)), ones(std::max<std::size_t>(n, 1), 1.5f);
  float* dscale = to_device(zeros);
  std::vector<std::int8_t> qz(std::max<std::size_t>(n, 1));
  std::int8_t* dq = to_device(qz);
  float* ddec = to_device(ones);
  float* dacc = to_device(ones);
  gsync::cuda::int8_encode(dg, feedback ? dr : nullptr, n, block, mode, rng, first, dscale, dq, cudaStream_t{});
  gsync::cuda::int8_decode(dscale, dq, n, block, ddec, false, cudaStream_t{});
  gsync::cuda::int8_decode(dscale, dq, n, block, dacc, true, cudaStream_t{});
  const auto gq_ = to_host(dq, qz.size());
  const auto gscale = to_host(dscale, zeros.size());
  const auto gr = to_host(dr, r.size());
  const auto gdec = to_host(ddec, ones.size());
  const auto gacc = to_host(dacc, ones.size());
  const bool same = !n || (std::memcmp(gq_.data(), hq.data(), n) == 0 && std::memcmp(gscale.data(), hscale.data(), blocks * 4) == 0 &&
                           (!feedback || std::memcmp(gr.data(), hr.data(), n * 4) == 0) &&
                           std::memcmp(gdec.data(), hdec.data(), n * 4) == 0 && std::memcmp(gacc.data(), hacc.data(), n * 4) == 0);
  if (!same) {
    ++failures;
    std::printf("FAIL: int8 n %zu block %zu %s%s\n", n, block, mode == gq::rounding::nearest ? "nearest" : "stochastic",
                feedback ? " with error feedback" : "");
  }
  cudaFree(dg);
  cudaFree(dr);
  cudaFree(dscale);
  cudaFree(dq);
  cudaFree(ddec);
  cudaFree(dacc);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  try {
    gsync_test::for_each_dtype([&]<class T>() { sweep_ops<T>(); });
    sweep_map<float, gsync::bfloat16>();
    sweep_map<float, gsync::half>();
    sweep_map<gsync::bfloat16, float>();
    sweep_map<gsync::half, float>();
    sweep_map<float, float>();
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1000003}})
      for (std::size_t block : {std::size_t{64}, std::size_t{256}, std::size_t{4096}})
        for (auto mode : {gsync::grad::rounding::nearest, gsync::grad::rounding::stochastic})
          for (bool feedback : {false, true}) run_int8(n, block, mode, feedback);
  } catch (const gsync::error& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d difference(s)\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
