// Every collective on device memory with the real CUDA runtime, against a double-precision CPU
// reference, compiled by the host compiler with GSYNC_WITH_CUDA (the gsync::cuda target): the
// path a .cpp file of a CUDA program takes. Ranks share the machine's first GPU: as threads of
// this process over the in-process transport (world sizes 1-4), or, under gsyncrun, as processes
// over shared memory / TCP. Counts 0, 1, N-1, a prime and a large one (several staging windows
// with GSYNC_CUDA_STAGING_BYTES small); every dtype x op for allreduce.
//
// Without a CUDA device it prints "skipped: no CUDA device" and exits 77 (a ctest skip).

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gsync/gsync.hpp>
#include <gsync/transport/inproc.hpp>
#include <gsync/transport/tcp.hpp>

#include "support/reference.hpp"

namespace {

std::atomic<int> failures{0};

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    if (failures < 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device buffer of n elements of T.
template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) { cuda_ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(count, 1) * sizeof(T)), "cudaMalloc"); }
  ~dbuf() { cudaFree(p); }
  dbuf(const dbuf&) = delete;
  void put(const std::vector<T>& h, cudaStream_t s) { cuda_ok(cudaMemcpyAsync(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice, s), "H2D"); }
  std::vector<T> get(cudaStream_t s) {
    std::vector<T> h(n);
    cuda_ok(cudaMemcpyAsync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, s), "D2H");
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return h;
  }
  gsync::device_span<T> span() { return {p, n}; }
};

template <class Comm>
void allreduce_sweep(Comm& comm, cudaStream_t s, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  gsync_test::for_each_device_dtype([&]<class T>() {
    gsync_test::for_each_op([&]<class Op>() {
      std::vector<T> in(count), host(count);
      for (std::size_t i = 0; i < count; ++i) host[i] = in[i] = gsync_test::input<T, Op>(r, i);
      gsync::allreduce(comm, std::span<T>(host), Op{});
      dbuf<T> d(count);
      d.put(in, s);
      gsync::allreduce(comm, d.span(), Op{}, s);
      const std::vector<T> got = d.get(s);
      std::size_t off = 0;
      for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<T, Op>(got[i], n, i);
      const std::string what = "allreduce " + std::string(gsync::name(gsync::dtype_of<T>)) + " " +
                               std::string(gsync::detail::op_name<Op>()) + " count " + std::to_string(count);
      expect(off == 0, what + ": elements off the reference");
      expect(count == 0 || std::memcmp(got.data(), host.data(), count * sizeof(T)) == 0, what + ": differs from the host path");
    });
  });
}

template <class Comm>
void block_collectives(Comm& comm, cudaStream_t s, std::size_t c) {
  const int n = comm.size(), r = comm.rank(), root = n - 1;
  const std::size_t nc = static_cast<std::size_t>(n) * c;
  auto v = [](int q, std::size_t i) { return static_cast<float>((static_cast<std::size_t>(q) * 7 + i * 3) % 61); };
  std::vector<float> big(nc), small(c);
  for (std::size_t i = 0; i < nc; ++i) big[i] = v(r, i);
  for (std::size_t i = 0; i < c; ++i) small[i] = v(r, i);
  dbuf<float> rs_in(nc), rs_out(c), ag_in(c), ag_out(nc), a2a_in(nc), a2a_out(nc), bc(c), rd_in(c), rd_out(c);
  rs_in.put(big, s);
  ag_in.put(small, s);
  a2a_in.put(big, s);
  bc.put(small, s);
  rd_in.put(small, s);
  gsync::reduce_scatter(comm, gsync::device_span<const float>(rs_in.span()), rs_out.span(), gsync::op::sum{}, s);
  gsync::allgather(comm, gsync::device_span<const float>(ag_in.span()), ag_out.span(), s);
  gsync::alltoall(comm, gsync::device_span<const float>(a2a_in.span()), a2a_out.span(), s);
  gsync::broadcast(comm, bc.span(), root, s);
  gsync::reduce(comm, gsync::device_span<const float>(rd_in.span()), rd_out.span(), gsync::op::max{}, root, s);
  const auto rs = rs_out.get(s), ag = ag_out.get(s), a2a = a2a_out.get(s), b = bc.get(s), rd = rd_out.get(s);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < c; ++i) {
    float sum = 0, mx = v(0, i);
    for (int q = 0; q < n; ++q) sum += v(q, static_cast<std::size_t>(r) * c + i), mx = std::max(mx, v(q, i));
    bad += rs[i] != sum;
    bad += b[i] != v(root, i);
    if (r == root) bad += rd[i] != mx;
    for (int q = 0; q < n; ++q) {
      bad += ag[static_cast<std::size_t>(q) * c + i] != v(q, i);
      bad += a2a[static_cast<std::size_t>(q) * c + i] != v(q, static_cast<std::size_t>(r) * c + i);
    }
  }
  expect(bad == 0, "block collectives, count " + std::to_string(c));
  if (n > 1) {  // a ring shift with sendrecv
    dbuf<float> a(c), got(c);
    a.put(small, s);
    gsync::sendrecv(comm, a.span(), (r + 1) % n, 1, got.span(), (r + n - 1) % n, 1, s);
    const auto g = got.get(s);
    std::size_t off = 0;
    for (std::size_t i = 0; i < c; ++i) off += g[i] != v((r + n - 1) % n, i);
    expect(off == 0, "sendrecv shift, count " + std::to_string(c));
  }
}

template <class Comm>
void run_rank(Comm& comm) {
  cudaStream_t s = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::size_t n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n > 1 ? n - 1 : 2, std::size_t{1021}}) allreduce_sweep(comm, s, count);
  for (std::size_t c : {std::size_t{0}, std::size_t{1}, std::size_t{1021}, std::size_t{700001}}) block_collectives(comm, s, c);
  {  // large float allreduce over several windows (the staging size is small here)
    const std::size_t count = 3'000'017;
    std::vector<float> in(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<float, gsync::op::sum>(comm.rank(), i);
    dbuf<float> d(count);
    d.put(in, s);
    gsync::allreduce(comm, d.span(), gsync::op::sum{}, s);
    const auto got = d.get(s);
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<float, gsync::op::sum>(got[i], comm.size(), i);
    expect(off == 0, "large windowed allreduce");
  }
  cudaStreamDestroy(s);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  try {
    if (std::getenv("GSYNC_RANK")) {  // one process of a gsyncrun job
      gsync::config cfg = gsync::config::from_env();
      auto comm = gsync::tcp_communicator::join(gsync::bootstrap::launch_info::from_env(), cfg);
      run_rank(comm);
    } else {
      for (int n = 1; n <= 4; ++n) {
        gsync::config cfg;
        cfg.cuda_staging_bytes = 1 << 20;
        auto comms = gsync::make_inproc_world(n, cfg);
        std::vector<std::thread> th;
        for (int r = 0; r < n; ++r)
          th.emplace_back([&, r] {
            try {
              cuda_ok(cudaSetDevice(0), "cudaSetDevice");
              run_rank(comms[static_cast<std::size_t>(r)]);
            } catch (const std::exception& e) {
              expect(false, "rank " + std::to_string(r) + " of " + std::to_string(n) + ": " + e.what());
            }
          });
        for (auto& t : th) t.join();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  if (failures) {
    std::fprintf(stderr, "%d failures\n", failures.load());
    return 1;
  }
  std::puts("device collectives: all passed");
  return 0;
}
