// Device allreduce over CUDA IPC (one-shot and two-shot) against host staging, in one run:
// `gsyncrun -n N -- gsync-gpu-ipc-bench [max MiB]`. Every rank uses GPU local_rank % devices.
//
// 1. The time to open a peer's arena: cudaIpcOpenMemHandle of a 2 MiB and of a 1 GiB allocation
//    of the next rank (the slowest rank's time).
// 2. The device's own copy bandwidth (cudaMemcpyAsync device to device of 256 MiB, bytes read and
//    written per second), rank 0 alone.
// 3. Sizes 8 B .. max (x4 steps), float32 sum, on three communicators of the same processes (one
//    per store port: the launcher's, +1, +2): IPC forced one-shot, IPC forced two-shot, IPC
//    disabled (host staging). Time per operation: the median over 5 batches of (wall time of k
//    back-to-back operations on one stream, then a stream synchronisation) / k. busbw as
//    nccl-tests: algbw x 2 (N-1) / N. The memory bound: with all N processes on one GPU, each reads
//    N inputs and writes one output, N (N + 1) x bytes through the device memory at the copy
//    bandwidth; "of bound" is that time over the faster IPC schedule's time.
// Rank 0 prints markdown tables. Exit 77 without a device.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <gsync/gsync.hpp>

#include "timing.hpp"

namespace {

using gsync_bench::ok;
using gsync_bench::per_op_s;

double max_over_ranks(gsync::tcp_communicator& comm, double v) {
  gsync::allreduce(comm, std::span<double>(&v, 1), gsync::op::max{});
  return v;
}

/// Slowest cudaIpcOpenMemHandle, in microseconds, of the next rank's allocation of `bytes`.
double open_us(gsync::tcp_communicator& comm, std::size_t bytes) {
  const int n = comm.size(), r = comm.rank();
  if (n < 2) return 0;
  void* mine = nullptr;
  ok(cudaMalloc(&mine, bytes), "cudaMalloc");
  cudaIpcMemHandle_t h{};
  ok(cudaIpcGetMemHandle(&h, mine), "cudaIpcGetMemHandle");
  std::vector<std::uint8_t> all(sizeof h * static_cast<std::size_t>(n));
  gsync::allgather(comm, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&h), sizeof h), std::span<std::uint8_t>(all));
  cudaIpcMemHandle_t peer{};
  std::memcpy(&peer, all.data() + sizeof h * static_cast<std::size_t>((r + 1) % n), sizeof h);
  void* p = nullptr;
  const auto a = std::chrono::steady_clock::now();
  ok(cudaIpcOpenMemHandle(&p, peer, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
  ok(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
  gsync::barrier(comm);  // every importer closed before the exporter frees
  cudaFree(mine);
  return max_over_ranks(comm, us);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  const std::size_t max_bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  const auto li = gsync::bootstrap::launch_info::from_env();
  const gsync::config base = gsync::config::from_env();
  auto comm = gsync::tcp_communicator::join(li, base);
  ok(cudaSetDevice(comm.local_rank() % devices), "cudaSetDevice");
  const int N = comm.size();
  const bool r0 = comm.rank() == 0;

  const double open_small = open_us(comm, std::size_t{2} << 20), open_large = open_us(comm, std::size_t{1} << 30);
  if (r0) std::printf("## Opening a peer's arena (%d processes)\n\n| allocation | cudaIpcOpenMemHandle us (slowest rank) |\n|---|---|\n| 2 MiB | %.1f |\n| 1 GiB | %.1f |\n\n", N, open_small, open_large);

  cudaStream_t s = nullptr;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  float *a = nullptr, *b = nullptr;
  ok(cudaMalloc(reinterpret_cast<void**>(&a), max_bytes), "cudaMalloc");
  ok(cudaMalloc(reinterpret_cast<void**>(&b), max_bytes), "cudaMalloc");
  ok(cudaMemset(a, 0, max_bytes), "cudaMemset");
  double copy_bw = 0;  // bytes read + written per second
  gsync::barrier(comm);
  if (r0) {
    const std::size_t cb = std::min<std::size_t>(max_bytes, std::size_t{256} << 20);
    const double t = per_op_s(
        [&](int reps) {
          for (int i = 0; i < reps; ++i) ok(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
          ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        },
        5);
    copy_bw = 2.0 * static_cast<double>(cb) / t;
    std::printf("## Device copy bandwidth\n\n%.1f GB/s (bytes read + written, %zu MiB device to device)\n\n", copy_bw / 1e9, cb >> 20);
  }
  gsync::barrier(comm);
  copy_bw = max_over_ranks(comm, copy_bw);

  gsync::config one = base, two = base, staged = base;
  one.cuda_ipc.algo = "oneshot";
  two.cuda_ipc.algo = "twoshot";
  staged.cuda_ipc.enabled = false;
  auto at_port = [&](int plus) {
    auto l = li;
    l.master_port = static_cast<std::uint16_t>(li.master_port + plus);
    return l;
  };
  comm.set_timeout(std::chrono::seconds(120));
  auto c1 = gsync::tcp_communicator::join(at_port(1), one);
  auto c2 = gsync::tcp_communicator::join(at_port(2), two);
  auto c3 = gsync::tcp_communicator::join(at_port(3), staged);
  const double n = N;
  if (r0)
    std::printf("## Allreduce float32 sum, %d processes\n\n| bytes | one-shot us | busbw GB/s | two-shot us | busbw GB/s | staged us | busbw GB/s | "
                "best IPC / staged speedup | of memory bound |\n|---|---|---|---|---|---|---|---|---|\n",
                N);
  for (std::size_t bytes = 8; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / 4;
    const int k = bytes <= (1u << 20) ? 100 : bytes <= (16u << 20) ? 20 : 5;
    auto time_on = [&](gsync::tcp_communicator& c) {
      gsync::barrier(c);
      return per_op_s(
          [&](int reps) {
            for (int i = 0; i < reps; ++i) gsync::allreduce(c, gsync::device_span<float>{a, count}, gsync::op::sum{}, s);
            ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          },
          k);
    };
    const double t1 = max_over_ranks(comm, time_on(c1)), t2 = max_over_ranks(comm, time_on(c2)), t3 = max_over_ranks(comm, time_on(c3));
    if (r0) {
      const double f = 2 * (n - 1) / n * static_cast<double>(bytes) / 1e9;
      const double best = std::min(t1, t2);
      const double bound = n * (n + 1) * static_cast<double>(bytes) / copy_bw;
      std::printf("| %zu | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f |\n", bytes, t1 * 1e6, f / t1, t2 * 1e6, f / t2, t3 * 1e6,
                  f / t3, t3 / best, bound / best);
      std::fflush(stdout);
    }
  }
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(s);
  return 0;
}
