// A user's CUDA kernel and gsync in one translation unit, compiled by nvcc:
//
//   cmake: target_link_libraries(app PRIVATE gsync::cuda)     (C++20 for .cu files included)
//   run:   gsyncrun -n 4 -- ./cuda_allreduce
//
// Each rank fills a gradient on its GPU with a kernel, averages it across ranks with
// gsync::allreduce on the same stream (the call returns at once; the stream orders the work),
// scales it with a second kernel, and checks the result on the host. Ranks of one machine share
// its GPUs round-robin by local rank. Without a CUDA device it says so and exits 77.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include <gsync/allreduce.hpp>
#include <gsync/transport/tcp.hpp>

namespace {

__global__ void fill_gradient(float* g, std::size_t n, int rank) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    g[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 7);
}

__global__ void apply_lr(float* g, std::size_t n, float lr) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) g[i] *= lr;
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  try {
    auto comm = gsync::tcp_communicator::from_env();
    if (!ok(cudaSetDevice(comm.local_rank() % devices), "cudaSetDevice")) return 1;
    const std::size_t n = std::size_t{1} << 24;  // 64 MiB of float gradients
    float* grad = nullptr;
    cudaStream_t stream = nullptr;
    if (!ok(cudaMalloc(&grad, n * sizeof(float)), "cudaMalloc") || !ok(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;

    fill_gradient<<<256, 256, 0, stream>>>(grad, n, comm.rank());
    gsync::allreduce(comm, gsync::device_span<float>{grad, n}, gsync::op::avg{}, stream);  // ordered on `stream`
    apply_lr<<<256, 256, 0, stream>>>(grad, n, 0.1f);

    std::vector<float> host(n);
    if (!ok(cudaMemcpyAsync(host.data(), grad, n * sizeof(float), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync") ||
        !ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"))
      return 1;
    const float mean_rank = (comm.size() + 1) * 0.5f * 0.5f;  // average of (r + 1) / 2 over ranks
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += std::fabs(host[i] - 0.1f * (mean_rank + static_cast<float>(i % 7))) > 1e-5f;
    if (comm.rank() == 0) std::printf("cuda_allreduce: %d ranks, %zu floats averaged on the GPU, %zu wrong\n", comm.size(), n, wrong);
    cudaFree(grad);
    cudaStreamDestroy(stream);
    return wrong == 0 ? 0 : 1;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "gsync error: %s\n", e.what());
    return 1;
  }
}
