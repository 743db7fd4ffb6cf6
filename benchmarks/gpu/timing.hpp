#pragma once
// What the GPU benchmarks share: a checked CUDA call and the time of one operation.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <gsync/core/error.hpp>

namespace gsync_bench {

/// Throws gsync::error (errc::cuda) naming `what` when `e` is an error.
inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw gsync::error(gsync::errc::cuda, std::string(what) + ": " + cudaGetErrorString(e));
}

/// Seconds per operation: the median over 5 batches of (wall time of `one(k)`, which runs k
/// operations and waits for them) / k.
template <class F>
double per_op_s(F&& one, int k) {
  std::vector<double> t;
  for (int batch = 0; batch < 5; ++batch) {
    const auto a = std::chrono::steady_clock::now();
    one(k);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count() / k);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

}  // namespace gsync_bench
