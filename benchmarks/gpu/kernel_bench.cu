// GPU kernel bandwidth, against the device's own copy bandwidth measured in the same run:
// cudaMemcpyAsync device-to-device, then gsync's reduce (a + b -> c and in place, f32 and bf16),
// wire cast (f32 -> bf16), fused unpack (bf16 -> f32, scaled, non-finite count) and int8 encode
// (with error feedback) / decode at 256 MiB of float32 (or the given size). Bandwidth counts the
// bytes each kernel reads plus writes, divided by the median of 20 timed runs (CUDA events).
// Also the pinned host <-> device copy bandwidth (the staged path's PCIe bound).
// Output: a markdown table on stdout. Exit 77 without a device.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <gsync/core/ops.hpp>
#include <gsync/grad/cast.cuh>
#include <gsync/grad/quantize.cuh>
#include <gsync/cuda/reduce.cuh>

namespace {

double median_ms(const std::function<void(cudaStream_t)>& f, cudaStream_t s, int reps = 20) {
  cudaEvent_t a, b;
  gsync::cuda::check(cudaEventCreate(&a), "cudaEventCreate");
  gsync::cuda::check(cudaEventCreate(&b), "cudaEventCreate");
  f(s);  // warm-up
  gsync::cuda::check(cudaStreamSynchronize(s), "sync");
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, s);
    f(s);
    cudaEventRecord(b, s);
    gsync::cuda::check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) << 20 : std::size_t{256} << 20;
  const std::size_t n = bytes / 4;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %zu MiB of float32 per operand\n\n", prop.name, bytes >> 20);
  float *a, *b, *c, *r, *scales;
  gsync::bfloat16 *ha, *hb, *hc;
  std::int8_t* q;
  unsigned long long* bad;
  auto alloc = [](auto** p, std::size_t sz) { gsync::cuda::check(cudaMalloc(reinterpret_cast<void**>(p), sz), "cudaMalloc"); };
  alloc(&a, bytes), alloc(&b, bytes), alloc(&c, bytes), alloc(&r, bytes);
  alloc(&ha, bytes / 2), alloc(&hb, bytes / 2), alloc(&hc, bytes / 2);
  alloc(&q, n), alloc(&scales, (n / 256 + 1) * 4), alloc(&bad, 8);
  cudaMemset(a, 0, bytes), cudaMemset(b, 0, bytes), cudaMemset(r, 0, bytes), cudaMemset(ha, 0, bytes / 2), cudaMemset(hb, 0, bytes / 2);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

  struct row {
    std::string name;
    double moved;  // bytes read + written
    double ms;
  };
  std::vector<row> rows;
  auto run = [&](std::string name, double moved, std::function<void(cudaStream_t)> f) { rows.push_back({std::move(name), moved, median_ms(f, s)}); };
  const double B = static_cast<double>(bytes);
  run("copy D2D (cudaMemcpyAsync)", 2 * B, [&](cudaStream_t st) { cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, st); });
  run("reduce f32 a+b->c", 3 * B, [&](cudaStream_t st) { gsync::cuda::reduce<false>(c, a, b, n, gsync::op::sum{}, 1, st); });
  run("reduce f32 in place", 3 * B, [&](cudaStream_t st) { gsync::cuda::reduce<false>(c, c, b, n, gsync::op::sum{}, 1, st); });
  run("reduce bf16 a+b->c", 1.5 * B, [&](cudaStream_t st) { gsync::cuda::reduce<false>(hc, ha, hb, n, gsync::op::sum{}, 1, st); });
  run("cast f32->bf16", 1.5 * B, [&](cudaStream_t st) { gsync::cuda::cast_into(a, hc, n, st); });
  run("unpack bf16->f32 (scale, count)", 1.5 * B, [&](cudaStream_t st) { gsync::cuda::unpack_scan(ha, c, n, 0.5f, bad, st); });
  run("int8 encode + error feedback", 3.25 * B, [&](cudaStream_t st) {
    gsync::cuda::int8_encode(a, r, n, 256, gsync::grad::rounding::nearest, gsync::grad::counter_rng{}, 0, scales, q, st);
  });
  run("int8 decode", 1.25 * B, [&](cudaStream_t st) { gsync::cuda::int8_decode(scales, q, n, 256, c, false, st); });
  // pinned host memory <-> device: the staged path's bound
  void* pinned = nullptr;
  gsync::cuda::check(cudaHostAlloc(&pinned, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  run("D2H into pinned host memory", B, [&](cudaStream_t st) { cudaMemcpyAsync(pinned, a, bytes, cudaMemcpyDeviceToHost, st); });
  run("H2D from pinned host memory", B, [&](cudaStream_t st) { cudaMemcpyAsync(a, pinned, bytes, cudaMemcpyHostToDevice, st); });
  gsync::cuda::check(cudaGetLastError(), "kernels");

  const double copy = rows[0].moved / rows[0].ms / 1e6;
  std::printf("| operation | GB/s (read + written) | fraction of D2D copy |\n|---|---|---|\n");
  for (const row& x : rows) {
    const double gbs = x.moved / x.ms / 1e6;
    std::printf("| %s | %.1f | %.2f |\n", x.name.c_str(), gbs, gbs / copy);
  }
  cudaFreeHost(pinned);
  return 0;
}
