// gsync-reduce-kernels: speed of the element loops every reduction step runs (core/reduce.hpp),
// of the float <-> 16-bit casts of the gradient layer and of its int8 block quantizer
// (grad/quantize.hpp, grad/int8_exchange.hpp), one thread, on buffers that stay in cache
// (default 64 Ki elements) or not (--elems).
//
//   gsync-reduce-kernels [--elems N] [--reps R]
//
// Prints, per loop, elements per nanosecond and the bytes it reads and writes per second. Half
// loops use the CPU's F16C instructions where it has them, bfloat16 and int8 loops an AVX2 copy
// where it has AVX2; GSYNC_NO_F16C=1 and GSYNC_NO_AVX2=1 run the baseline code instead, for
// comparison.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gsync/core/half.hpp>
#include <gsync/core/half_simd.hpp>
#include <gsync/core/ops.hpp>
#include <gsync/core/reduce.hpp>
#include <gsync/grad/int8_exchange.hpp>
#include <gsync/grad/nonfinite.hpp>
#include <gsync/grad/quantize.hpp>

namespace {

template <class F>
double best_ns(int reps, F&& f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = ns < best ? ns : best;
  }
  return best;
}

void report(const char* what, std::size_t n, std::size_t bytes_moved, double ns) {
  std::printf("%-34s %8.3f elem/ns %8.2f GB/s\n", what, static_cast<double>(n) / ns, static_cast<double>(bytes_moved) / ns);
}

template <class T>
void sum_loop(const char* name, std::size_t n, int reps) {
  std::vector<T> a(n), b(n), out(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = T(static_cast<float>(i % 1000) * 0.001f), b[i] = T(static_cast<float>(i % 777) * 0.002f);
  const gsync::op::sum op;
  const double ns = best_ns(reps, [&] { gsync::detail::reduce_to<false>(out.data(), a.data(), b.data(), n, op, 1); });
  report(name, n, 3 * n * sizeof(T), ns);
  volatile float sink = static_cast<float>(out[n / 2]);
  (void)sink;
}

/// The int8 quantizer's loops, block 256, and the whole encode of the int8 exchange (e = g + r,
/// scale, quantize, residual) and its decode.
void int8_loops(std::size_t n, int reps) {
  namespace g = gsync::grad;
  constexpr std::size_t B = 256;
  std::vector<float> x(n), r(n, 0.0f), out(n);
  std::vector<std::int8_t> q(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 2654435761u) % 20001) * 1e-4f - 1.0f;
  const g::counter_rng rng = g::counter_rng::make(1, 0, 0, 0);
  auto blocks = [&](auto&& f) {
    for (std::size_t off = 0; off < n; off += B) f(off, std::min(B, n - off));
  };
  volatile float sink = 0;
  report("int8 scale (max |x| per block)", n, 4 * n, best_ns(reps, [&] {
           float acc = 0;
           blocks([&](std::size_t o, std::size_t l) { acc += g::scale_of(x.data() + o, l).scale; });
           sink = acc;
         }));
  std::vector<g::block_scale> sc((n + B - 1) / B);
  blocks([&](std::size_t o, std::size_t l) { sc[o / B] = g::scale_of(x.data() + o, l); });
  report("int8 quantize nearest", n, 5 * n, best_ns(reps, [&] {
           blocks([&](std::size_t o, std::size_t l) { g::quantize_block(x.data() + o, l, sc[o / B], q.data() + o, g::rounding::nearest, rng, o); });
         }));
  report("int8 quantize stochastic", n, 5 * n, best_ns(reps, [&] {
           blocks([&](std::size_t o, std::size_t l) { g::quantize_block(x.data() + o, l, sc[o / B], q.data() + o, g::rounding::stochastic, rng, o); });
         }));
  report("int8 residual (e -= D(q))", n, 9 * n, best_ns(reps, [&] {
           blocks([&](std::size_t o, std::size_t l) { std::memcpy(out.data() + o, x.data() + o, 4 * l); g::update_residual(out.data() + o, q.data() + o, l, sc[o / B]); });
         }));
  report("int8 dequantize-add", n, 9 * n, best_ns(reps, [&] {
           blocks([&](std::size_t o, std::size_t l) { g::dequantize_add_block(q.data() + o, l, sc[o / B].scale, out.data() + o); });
         }));
  const g::int8_wire_layout L(n, 1, B);
  std::vector<std::uint8_t> rec(L.record);
  report("int8 encode with EF (whole record)", n, 13 * n, best_ns(reps, [&] {
           g::detail::int8_encode(n, L, g::rounding::nearest, rng, 0, true, rec.data(), [&](std::size_t o, std::size_t l) {
             float* e = r.data() + o;
             for (std::size_t i = 0; i < l; ++i) e[i] += x[o + i];
             return e;
           });
           std::fill(r.begin(), r.end(), 0.0f);
         }));
  report("int8 decode (whole record)", n, 5 * n, best_ns(reps, [&] { g::detail::int8_decode<false>(rec.data(), n, L, out.data()); }));
  sink = out[n / 3];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 64 * 1024;
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--elems" && i + 1 < argc) n = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: gsync-reduce-kernels [--elems N] [--reps R]\n");
      return 2;
    }
  }
  if (n == 0 || reps <= 0) return 2;
  std::printf("# %zu elements, best of %d; F16C %s, AVX2 %s\n", n, reps, gsync::detail::f16c_available() ? "in use" : "not used",
              gsync::detail::avx2_available() ? "in use" : "not used");
  sum_loop<float>("sum float32 (dst = a + b)", n, reps);
  sum_loop<gsync::bfloat16>("sum bfloat16", n, reps);
  sum_loop<gsync::half>("sum float16", n, reps);
  std::vector<float> f(n);
  std::vector<gsync::half> h(n);
  std::vector<gsync::bfloat16> bf(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>(i % 4096) * 0.37f - 700.0f;
  report("cast float32 -> float16", n, 6 * n, best_ns(reps, [&] { gsync::grad::cast_into(f.data(), h.data(), n); }));
  report("cast float16 -> float32", n, 6 * n, best_ns(reps, [&] { gsync::grad::cast_into(h.data(), f.data(), n); }));
  report("cast float32 -> bfloat16", n, 6 * n, best_ns(reps, [&] { gsync::grad::cast_into(f.data(), bf.data(), n); }));
  report("cast bfloat16 -> float32", n, 6 * n, best_ns(reps, [&] { gsync::grad::cast_into(bf.data(), f.data(), n); }));
  int8_loops(n, reps);
  return 0;
}
