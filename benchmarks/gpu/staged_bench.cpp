// Staged allreduce of device buffers (host staging over shared memory / TCP) against the same
// allreduce on host buffers, in one run: `gsyncrun -n N -- gsync-gpu-staged-bench [max MiB]`.
// Every rank uses GPU local_rank % devices. Sizes 8 B .. max (x4 steps), float32 sum; time per
// operation is the median over 5 batches of (wall time of k back-to-back operations on one stream,
// then a stream synchronisation) / k. busbw as nccl-tests: algbw x 2 (N-1) / N. Rank 0 prints a
// markdown table. Exit 77 without a device.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include <gsync/gsync.hpp>
#include <gsync/transport/tcp.hpp>

#include "timing.hpp"

using gsync_bench::ok;
using gsync_bench::per_op_s;

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  const std::size_t max_bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  auto comm = gsync::tcp_communicator::from_env();
  ok(cudaSetDevice(comm.local_rank() % devices), "cudaSetDevice");
  cudaStream_t s = nullptr;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  float* dev = nullptr;
  ok(cudaMalloc(reinterpret_cast<void**>(&dev), max_bytes), "cudaMalloc");
  ok(cudaMemset(dev, 0, max_bytes), "cudaMemset");
  std::vector<float> host(max_bytes / 4, 0.0f);
  const double n = comm.size();
  if (comm.rank() == 0)
    std::printf("| bytes | device staged us | busbw GB/s | host us | busbw GB/s | staged / host time |\n|---|---|---|---|---|---|\n");
  for (std::size_t bytes = 8; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / 4;
    const int k = bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 3;
    gsync::barrier(comm);
    const double td = per_op_s(
        [&](int reps) {
          for (int i = 0; i < reps; ++i) gsync::allreduce(comm, gsync::device_span<float>{dev, count}, gsync::op::sum{}, s);
          ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        },
        k);
    gsync::barrier(comm);
    const double th = per_op_s(
        [&](int reps) {
          for (int i = 0; i < reps; ++i) gsync::allreduce(comm, std::span<float>(host.data(), count), gsync::op::sum{});
        },
        k);
    if (comm.rank() == 0) {
      const double f = 2 * (n - 1) / n * static_cast<double>(bytes) / 1e9;
      std::printf("| %zu | %.1f | %.2f | %.1f | %.2f | %.2f |\n", bytes, td * 1e6, f / td, th * 1e6, f / th, td / th);
    }
  }
  cudaFree(dev);
  cudaStreamDestroy(s);
  return 0;
}
