// gsync-reduce-kernels: speed of the element loops every reduction step runs (core/reduce.hpp)
// and of the float <-> 16-bit casts of the gradient layer, one thread, on buffers that stay in
// cache (default 64 Ki elements) or not (--elems).
//
//   gsync-reduce-kernels [--elems N] [--reps R]
//
// Prints, per loop, elements per nanosecond and the bytes it reads and writes per second. Half
// loops use the CPU's F16C instructions where it has them; GSYNC_NO_F16C=1 runs the portable
// conversion instead, for comparison.

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
#include <gsync/grad/nonfinite.hpp>

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
  std::printf("# %zu elements, best of %d; F16C %s\n", n, reps, gsync::detail::f16c_available() ? "in use" : "not used");
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
  return 0;
}
