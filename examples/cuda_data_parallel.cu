// Data-parallel training of the MLP of examples/data_parallel_mlp.cpp on GPUs: the same model,
// initialization, data and SGD, with forward and backward as CUDA kernels and the gradients
// averaged over the ranks on the GPU by gsync::allreduce on device memory.
//
// Overlap: backward runs on the compute stream; as soon as a layer's gradients are written, the
// communication stream waits for them (an event) and queues that layer's allreduce, so the
// averaging of layer l runs while backward computes layer l-1. The SGD update waits for the
// communication stream. Each rank uses GPU local_rank % devices.
//
//   gsyncrun -n 2 -- data_parallel_mlp --steps 30 --json host.json
//   gsyncrun -n 2 -- cuda_data_parallel --steps 30 --compare host.json --tol 1e-4
//
// The losses agree with the host example's to rounding (the kernels sum in the host loops' order;
// the GPU fuses multiply-adds). Options: --steps S --batch B --seed X --dim D --classes C
// --hidden H --layers L --lr LR --json FILE --compare REF.json --tol T (exit 3 when a step's loss
// differs from REF's by more than T, relative). Exit 77 without a CUDA device.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gsync/gsync.hpp>
#include <gsync/transport/tcp.hpp>

#include "common/dense.hpp"

namespace {

struct options {
  int steps = 50;
  std::size_t batch = 16, dim = 32, classes = 10, hidden = 64, layers = 2;
  std::uint64_t seed = 1;
  float lr = 0.05f;
  std::string json, compare;
  double tol = 1e-4;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "cuda_data_parallel: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--steps") o.steps = std::atoi(v);
    else if (a == "--batch") o.batch = std::strtoull(v, nullptr, 10);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--dim") o.dim = std::strtoull(v, nullptr, 10);
    else if (a == "--classes") o.classes = std::strtoull(v, nullptr, 10);
    else if (a == "--hidden") o.hidden = std::strtoull(v, nullptr, 10);
    else if (a == "--layers") o.layers = std::strtoull(v, nullptr, 10);
    else if (a == "--lr") o.lr = std::strtof(v, nullptr);
    else if (a == "--json") o.json = v;
    else if (a == "--compare") o.compare = v;
    else if (a == "--tol") o.tol = std::strtod(v, nullptr);
    else {
      std::fprintf(stderr, "cuda_data_parallel: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw gsync::error(gsync::errc::cuda, std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
T* device_alloc(std::size_t n) {
  T* p = nullptr;
  ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return p;
}

constexpr unsigned threads = 256;
unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + threads - 1) / threads); }

// y = x w + b (m x k times k x n), then ReLU unless last; the sum runs over p in order, as dense::matmul.
__global__ void forward_layer(const float* x, const float* w, const float* b, float* y, std::size_t m, std::size_t k,
                              std::size_t n, bool relu) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t >= m * n) return;
  const std::size_t i = t / n, j = t % n;
  float acc = 0;
  for (std::size_t p = 0; p < k; ++p) acc += x[i * k + p] * w[p * n + j];
  acc += b[j];
  y[t] = relu && acc <= 0 ? 0.0f : acc;
}

// Softmax cross-entropy per row: loss summed into *loss (double), dz = (softmax - onehot) / rows.
__global__ void softmax_xent(const float* z, const int* labels, float* dz, std::size_t rows, std::size_t cols, double* loss) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i >= rows) return;
  const float* zi = z + i * cols;
  float zmax = zi[0];
  for (std::size_t j = 1; j < cols; ++j) zmax = fmaxf(zmax, zi[j]);
  float sum = 0;
  for (std::size_t j = 0; j < cols; ++j) sum += expf(zi[j] - zmax);
  atomicAdd(loss, static_cast<double>(logf(sum) - (zi[labels[i]] - zmax)));
  const float inv = 1.0f / static_cast<float>(rows), scale = inv / sum;
  for (std::size_t j = 0; j < cols; ++j) dz[i * cols + j] = expf(zi[j] - zmax) * scale;
  dz[i * cols + labels[i]] -= inv;
}

// db[j] = sum over rows of dz[i][j]; dw = x^T dz (k x n), both summed over rows in order.
__global__ void weight_grads(const float* x, const float* dz, float* dw, float* db, std::size_t m, std::size_t k, std::size_t n) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t < k * n) {
    const std::size_t p = t / n, j = t % n;
    float acc = 0;
    for (std::size_t i = 0; i < m; ++i) acc += x[i * k + p] * dz[i * n + j];
    dw[t] = acc;
  }
  if (t < n) {
    float acc = 0;
    for (std::size_t i = 0; i < m; ++i) acc += dz[i * n + t];
    db[t] = acc;
  }
}

// dx = (dz w^T) masked by the ReLU of the layer's input x (m x k).
__global__ void input_grad(const float* dz, const float* w, const float* x, float* dx, std::size_t m, std::size_t k, std::size_t n) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t >= m * k) return;
  const std::size_t i = t / k, p = t % k;
  float acc = 0;
  for (std::size_t j = 0; j < n; ++j) acc += dz[i * n + j] * w[p * n + j];
  dx[t] = x[t] > 0 ? acc : 0.0f;
}

__global__ void sgd(float* p, const float* g, std::size_t n, float lr) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t < n) p[t] -= lr * g[t];
}

std::vector<double> read_losses(const std::string& path) {
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto k = text.find("\"loss\": [");
  std::vector<double> v;
  if (k == std::string::npos) return v;
  const char* p = text.c_str() + k + 9;
  for (;;) {
    while (*p == ' ' || *p == ',') ++p;
    char* end = nullptr;
    const double x = std::strtod(p, &end);
    if (end == p) break;
    v.push_back(x);
    p = end;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  const options o = parse(argc, argv);
  try {
    auto comm = gsync::tcp_communicator::from_env();
    ok(cudaSetDevice(comm.local_rank() % devices), "cudaSetDevice");
    const int n = comm.size(), rank = comm.rank();
    const dense::teacher_dataset ds(o.seed, o.dim, o.classes);

    // The model, initialized as the host example's (dense::init_normal from (seed, layer)), on the GPU.
    std::vector<std::size_t> dims = {o.dim};
    for (std::size_t l = 0; l < o.layers; ++l) dims.push_back(o.hidden);
    dims.push_back(o.classes);
    const std::size_t L = dims.size() - 1, B = o.batch;
    const dense::rng g{o.seed};
    std::vector<float*> w(L), b(L), dw(L), db(L), act(L + 1), dact(L + 1);
    for (std::size_t l = 0; l < L; ++l) {
      dense::matrix<float> wl(dims[l], dims[l + 1]);
      dense::init_normal(wl.v(), g, 1000 + l, std::sqrt(2.0 / static_cast<double>(dims[l])));
      w[l] = device_alloc<float>(wl.data.size());
      ok(cudaMemcpy(w[l], wl.data.data(), wl.data.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
      b[l] = device_alloc<float>(dims[l + 1]);
      ok(cudaMemset(b[l], 0, dims[l + 1] * 4), "cudaMemset");
      dw[l] = device_alloc<float>(wl.data.size());
      db[l] = device_alloc<float>(dims[l + 1]);
    }
    for (std::size_t l = 0; l <= L; ++l) act[l] = device_alloc<float>(B * dims[l]), dact[l] = device_alloc<float>(B * dims[l]);
    int* labels_d = device_alloc<int>(B);
    double* loss_d = device_alloc<double>(1);
    cudaStream_t compute, comm_s;
    ok(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
    ok(cudaStreamCreateWithFlags(&comm_s, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaEvent_t grads_ready, synced;
    ok(cudaEventCreateWithFlags(&grads_ready, cudaEventDisableTiming), "cudaEventCreate");
    ok(cudaEventCreateWithFlags(&synced, cudaEventDisableTiming), "cudaEventCreate");

    dense::matrix<float> x(B, o.dim);
    std::vector<int> labels(B);
    std::vector<double> losses;
    for (int s = 0; s < o.steps; ++s) {
      const std::uint64_t first = static_cast<std::uint64_t>(s) * n * B + static_cast<std::uint64_t>(rank) * B;
      ds.batch<float>(first, x.v(), labels);
      ok(cudaMemcpyAsync(act[0], x.data.data(), x.data.size() * 4, cudaMemcpyHostToDevice, compute), "H2D");
      ok(cudaMemcpyAsync(labels_d, labels.data(), B * sizeof(int), cudaMemcpyHostToDevice, compute), "H2D");
      ok(cudaMemsetAsync(loss_d, 0, sizeof(double), compute), "cudaMemsetAsync");
      for (std::size_t l = 0; l < L; ++l)
        forward_layer<<<blocks_for(B * dims[l + 1]), threads, 0, compute>>>(act[l], w[l], b[l], act[l + 1], B, dims[l], dims[l + 1],
                                                                            l + 1 < L);
      softmax_xent<<<blocks_for(B), threads, 0, compute>>>(act[L], labels_d, dact[L], B, o.classes, loss_d);
      for (std::size_t l = L; l-- > 0;) {
        weight_grads<<<blocks_for(dims[l] * dims[l + 1]), threads, 0, compute>>>(act[l], dact[l + 1], dw[l], db[l], B, dims[l], dims[l + 1]);
        ok(cudaEventRecord(grads_ready, compute), "cudaEventRecord");
        ok(cudaStreamWaitEvent(comm_s, grads_ready, 0), "cudaStreamWaitEvent");  // this layer's gradients are written
        gsync::allreduce(comm, gsync::device_span<float>{dw[l], dims[l] * dims[l + 1]}, gsync::op::avg{}, comm_s);
        gsync::allreduce(comm, gsync::device_span<float>{db[l], dims[l + 1]}, gsync::op::avg{}, comm_s);
        if (l > 0)
          input_grad<<<blocks_for(B * dims[l]), threads, 0, compute>>>(dact[l + 1], w[l], act[l], dact[l], B, dims[l], dims[l + 1]);
      }
      ok(cudaEventRecord(synced, comm_s), "cudaEventRecord");
      ok(cudaStreamWaitEvent(compute, synced, 0), "cudaStreamWaitEvent");  // the update uses the averaged gradients
      for (std::size_t l = 0; l < L; ++l) {
        sgd<<<blocks_for(dims[l] * dims[l + 1]), threads, 0, compute>>>(w[l], dw[l], dims[l] * dims[l + 1], o.lr);
        sgd<<<blocks_for(dims[l + 1]), threads, 0, compute>>>(b[l], db[l], dims[l + 1], o.lr);
      }
      double loss = 0;
      ok(cudaMemcpyAsync(&loss, loss_d, sizeof loss, cudaMemcpyDeviceToHost, compute), "D2H");
      ok(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
      ok(cudaGetLastError(), "kernels");
      loss /= static_cast<double>(B);
      gsync::allreduce(comm, std::span<double>{&loss, 1}, gsync::op::avg{});
      losses.push_back(loss);
      if (rank == 0 && (s % 10 == 0 || s + 1 == o.steps)) std::printf("step %4d  loss %.6f\n", s, loss);
    }
    int rc = 0;
    if (rank == 0 && !o.json.empty()) {
      std::ofstream f(o.json);
      f << "{\"world_size\": " << n << ", \"steps\": " << o.steps << ", \"batch\": " << o.batch << ", \"loss\": [";
      char buf[64];
      for (std::size_t i = 0; i < losses.size(); ++i) std::snprintf(buf, sizeof buf, "%s%.17g", i ? ", " : "", losses[i]), f << buf;
      f << "]}\n";
    }
    if (rank == 0 && !o.compare.empty()) {
      const std::vector<double> ref = read_losses(o.compare);
      double worst = ref.size() == losses.size() ? 0 : 1e30;
      for (std::size_t i = 0; i < ref.size() && i < losses.size(); ++i)
        worst = std::max(worst, std::abs(losses[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
      std::printf("compare with %s: largest relative loss difference %.3g (tolerance %.3g)\n", o.compare.c_str(), worst, o.tol);
      if (!(worst <= o.tol)) rc = 3;
    }
    for (std::size_t l = 0; l < L; ++l) cudaFree(w[l]), cudaFree(b[l]), cudaFree(dw[l]), cudaFree(db[l]);
    for (std::size_t l = 0; l <= L; ++l) cudaFree(act[l]), cudaFree(dact[l]);
    cudaFree(labels_d), cudaFree(loss_d);
    return rc;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "cuda_data_parallel: %s\n", e.what());
    return 1;
  }
}
