// The device gradient synchronizer on a GPU against the host synchronizer, bit for bit: ranks as
// threads sharing the GPU (world sizes 1-3), float32 and bfloat16 gradients, native and bfloat16
// wires, loss scaling with an overflow on one rank, clipping, int8 (encoded on the GPU) and top-k
// compression. The gradients are written by a
// kernel on the compute stream just before each is marked ready. Without a CUDA device it prints
// "skipped: no CUDA device" and exits 77 (a ctest skip).

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gsync/grad/device_kernels.cuh>
#include <gsync/grad.hpp>
#include <gsync/grad/compressed_reducer.hpp>
#include <gsync/grad/device_synchronizer.hpp>
#include <gsync/transport/inproc.hpp>

#include "../support/reference.hpp"

namespace {

namespace gg = gsync::grad;
std::atomic<int> failures{0};

__host__ __device__ float value(unsigned i, unsigned k, int r, int s, bool inf) {
  if (inf && r == 1 && s == 1 && k == 0 && i == 3) return gsync::detail::bit_cast<float>(0x7f800000u);
  unsigned h = i * 2654435761u + k * 40503u + static_cast<unsigned>(r) * 977u + static_cast<unsigned>(s) * 7919u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(static_cast<int>(h % 40001u) - 20000) / 997.0f;
}

template <class T>
__global__ void write_grad(T* g, std::size_t n, unsigned k, int r, int s, bool inf) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    g[i] = gsync::grad::detail::from_f<T>(value(static_cast<unsigned>(i), k, r, s, inf));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct case_def {
  gg::wire_dtype wire;
  bool scaling;
  double clip;
  int compression = 0;  // 0: none, 1: int8 (stochastic rounding, error feedback), 2: top-k
};

using X = gsync::transport::inproc;
template <class P>
struct sync_types {  // the host and device synchronizers with compression policy P
  using host = gg::synchronizer<X, gg::compressed_reducer<P>>;
  using device = gg::device_synchronizer<X, gg::device_compressed_reducer<P>>;
  static std::unique_ptr<host> make_host(gsync::communicator<X>& c, const gg::synchronizer_options& o, const P& p) {
    return std::make_unique<host>(c, o, gg::compressed_reducer<P>{p});
  }
  static std::unique_ptr<device> make_device(gsync::communicator<X>& c, const gg::synchronizer_options& o, const P& p, cudaStream_t s) {
    return std::make_unique<device>(c, o, gg::device_compressed_reducer<P>{p}, s);
  }
};
template <>
struct sync_types<void> {
  static std::unique_ptr<gg::synchronizer<X>> make_host(gsync::communicator<X>& c, const gg::synchronizer_options& o, int) {
    return std::make_unique<gg::synchronizer<X>>(c, o);
  }
  static std::unique_ptr<gg::device_synchronizer<X>> make_device(gsync::communicator<X>& c, const gg::synchronizer_options& o, int,
                                                                 cudaStream_t s) {
    return std::make_unique<gg::device_synchronizer<X>>(c, o, s);
  }
};

template <class P, class Arg>
void rank_body(gsync::communicator<gsync::transport::inproc>& comm, const case_def& c, const Arg& policy) {
  const int r = comm.rank();
  const std::vector<std::size_t> counts = {1000, 17, 300001, 5000};
  const std::vector<bool> is_bf16 = {false, false, false, !c.compression};  // compression takes float32 buckets
  gg::synchronizer_options opt;
  opt.bucket_bytes = 256 << 10;
  opt.wire = c.wire;
  if (c.scaling) {
    opt.on_nonfinite = gg::nonfinite_action::report;
    opt.loss_scaling = gg::loss_scaler_options{};
  }
  cudaStream_t compute;
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<void*> dev(counts.size());
  std::vector<std::vector<std::byte>> host(counts.size());
  {
    auto hs_ptr = sync_types<P>::make_host(comm, opt, policy);
    auto ds_ptr = sync_types<P>::make_device(comm, opt, policy, compute);
    auto& hs = *hs_ptr;
    auto& ds = *ds_ptr;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      const std::size_t bytes = counts[k] * (is_bf16[k] ? 2 : 4);
      check(cudaMalloc(&dev[k], bytes), "cudaMalloc");
      host[k].resize(bytes);
      if (is_bf16[k]) {
        hs.add(std::span<gsync::bfloat16>(reinterpret_cast<gsync::bfloat16*>(host[k].data()), counts[k]), "t" + std::to_string(k));
        ds.add(gsync::device_span<gsync::bfloat16>(static_cast<gsync::bfloat16*>(dev[k]), counts[k]), "t" + std::to_string(k));
      } else {
        hs.add(std::span<float>(reinterpret_cast<float*>(host[k].data()), counts[k]), "t" + std::to_string(k));
        ds.add(gsync::device_span<float>(static_cast<float*>(dev[k]), counts[k]), "t" + std::to_string(k));
      }
    }
    for (int s = 0; s < 3; ++s) {
      for (std::size_t k = counts.size(); k-- > 0;) {
        for (std::size_t i = 0; i < counts[k]; ++i) {
          const float v = value(static_cast<unsigned>(i), static_cast<unsigned>(k), r, s, c.scaling);
          if (is_bf16[k]) reinterpret_cast<gsync::bfloat16*>(host[k].data())[i] = gsync::grad::detail::from_f<gsync::bfloat16>(v);
          else reinterpret_cast<float*>(host[k].data())[i] = v;
        }
        hs.mark_ready(k);
        if (is_bf16[k]) write_grad<<<64, 256, 0, compute>>>(static_cast<gsync::bfloat16*>(dev[k]), counts[k], static_cast<unsigned>(k), r, s, c.scaling);
        else write_grad<<<64, 256, 0, compute>>>(static_cast<float*>(dev[k]), counts[k], static_cast<unsigned>(k), r, s, c.scaling);
        ds.mark_ready(k);
      }
      const auto hr = hs.finish();
      const auto dr = ds.finish();
      double hn = 0, dn = 0;
      if (c.clip > 0 && hr.apply) hn = gg::clip_grad_norm(hs.tensors(), c.clip), dn = ds.clip_grad_norm(c.clip);
      check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
      if (hr.apply != dr.apply || hr.nonfinite.size() != dr.nonfinite.size()) ++failures, std::printf("FAIL: verdicts differ (step %d)\n", s);
      if (c.compression && hr.stats.bytes_on_wire != dr.stats.bytes_on_wire) ++failures, std::printf("FAIL: bytes sent differ (step %d)\n", s);
      if (std::abs(hn - dn) > 1e-9 * std::max(1.0, hn)) ++failures, std::printf("FAIL: norms %.17g and %.17g\n", hn, dn);
      for (std::size_t k = 0; k < counts.size() && hr.apply; ++k) {
        std::vector<std::byte> got(host[k].size());
        check(cudaMemcpy(got.data(), dev[k], got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
        // clipping's scale factor comes from norms summed in different orders: compare before clipping only
        if (c.clip == 0 && std::memcmp(got.data(), host[k].data(), got.size()) != 0)
          ++failures, std::printf("FAIL: tensor %zu differs from the host synchronizer's (step %d)\n", k, s);
      }
    }
  }
  for (void* p : dev) cudaFree(p);
  cudaStreamDestroy(compute);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  for (int n = 1; n <= 3; ++n)
    for (case_def c : {case_def{gg::wire_dtype::native, false, 0}, case_def{gg::wire_dtype::bfloat16, false, 0},
                       case_def{gg::wire_dtype::bfloat16, true, 0}, case_def{gg::wire_dtype::native, false, 1.0},
                       case_def{gg::wire_dtype::native, false, 0, 1}, case_def{gg::wire_dtype::native, false, 0, 2}}) {
      auto comms = gsync::make_inproc_world(n);
      std::vector<std::thread> th;
      for (int r = 0; r < n; ++r)
        th.emplace_back([&, r] {
          try {
            check(cudaSetDevice(0), "cudaSetDevice");
            auto& comm = comms[static_cast<std::size_t>(r)];
            if (c.compression == 1) {
              gg::compress::int8 p;
              p.round = gg::rounding::stochastic;
              p.seed = 11;
              rank_body<gg::compress::int8>(comm, c, p);
            } else if (c.compression == 2) {
              rank_body<gg::compress::topk>(comm, c, gg::compress::topk{0.01, true});
            } else {
              rank_body<void>(comm, c, 0);
            }
          } catch (const std::exception& e) {
            ++failures;
            std::printf("FAIL: rank %d of %d: %s\n", r, n, e.what());
          }
        });
      for (auto& t : th) t.join();
    }
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures.load());
  return failures ? 1 : 0;
}
