#pragma once
/// \file
/// The real `cuda::runtime_api` (cuda/api.hpp) over the CUDA runtime, installed when this header
/// is included (by gsync's collective headers under nvcc or GSYNC_WITH_CUDA). Needs CUDA's headers
/// and libcudart; the driver calls it uses (cuStreamWaitValue64, cuStreamWriteValue64) are looked up
/// through the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
///
/// A stream waits for a host word with cuStreamWaitValue64 on the mapped pinned word: the GPU
/// polls it, no host thread is held. Where the driver refuses stream memory operations, a host
/// function queued on the stream polls the word instead (bounded by the wait's limit); it holds
/// CUDA's callback thread meanwhile, which delays other host functions of the process.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "gsync/cuda/api.hpp"
#include "gsync/cuda/runtime.hpp"

namespace gsync::cuda {

/// The CUDA runtime behind `runtime_api`.
class cuda_runtime final : public runtime_api {
 public:
  /// The process's instance.
  static cuda_runtime& instance() noexcept {
    static cuda_runtime r;
    return r;
  }
  const char* name() const noexcept override { return "cuda"; }
  int current_device() override {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
  void set_device(int device) override { check(cudaSetDevice(device), "cudaSetDevice"); }
  cuda_stream create_stream() override {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void destroy_stream(cuda_stream s) noexcept override { (void)cudaStreamDestroy(s); }
  event_handle create_event() override {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void destroy_event(event_handle e) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  void record(event_handle e, cuda_stream s) override { check(cudaEventRecord(static_cast<cudaEvent_t>(e), s), "cudaEventRecord"); }
  bool query(event_handle e) override {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: clear it so later checks do not see it
      return false;
    }
    check(r, "cudaEventQuery");
    return true;
  }
  void stream_wait_event(cuda_stream s, event_handle e) override {
    check(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
  }
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, cuda_stream s) override {
    const cudaMemcpyKind k = kind == copy_kind::device_to_host   ? cudaMemcpyDeviceToHost
                             : kind == copy_kind::host_to_device ? cudaMemcpyHostToDevice
                                                                 : cudaMemcpyDeviceToDevice;
    check(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync");
  }
  void* alloc_device(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void free_device(void* p) noexcept override { (void)cudaFree(p); }
  void zero_async(void* p, std::size_t bytes, cuda_stream s) override { check(cudaMemsetAsync(p, 0, bytes, s), "cudaMemsetAsync"); }
  void* alloc_pinned(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
    return p;
  }
  void free_pinned(void* p) noexcept override { (void)cudaFreeHost(p); }
  void wait_word(cuda_stream s, std::uint64_t* word, std::uint64_t value, std::chrono::milliseconds limit) override {
    if (auto fn = wait_value_fn()) {
      void* dev = nullptr;
      check(cudaHostGetDevicePointer(&dev, word, 0), "cudaHostGetDevicePointer");
      if (fn(s, reinterpret_cast<CUdeviceptr>(dev), value, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS) return;
      memops_refused_.store(true, std::memory_order_relaxed);  // e.g. not supported: poll from the host from now on
    }
    auto* w = new host_waiter{word, value, std::chrono::steady_clock::now() + limit};
    const cudaError_t r = cudaLaunchHostFunc(s, &host_waiter::run, w);
    if (r != cudaSuccess) delete w;
    check(r, "cudaLaunchHostFunc");
  }
  bool capturing(cuda_stream s) override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(s, &st), "cudaStreamIsCapturing");
    return st != cudaStreamCaptureStatusNone;
  }
  device_identity identity() override {
    device_identity id;
    id.ordinal = current_device();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, id.ordinal), "cudaGetDeviceProperties");
    std::memcpy(id.uuid.data(), prop.uuid.bytes, id.uuid.size());
    check(cudaDeviceGetPCIBusId(id.pci_bus, sizeof id.pci_bus, id.ordinal), "cudaDeviceGetPCIBusId");
    check(cudaDeviceGetAttribute(&id.compute_mode, cudaDevAttrComputeMode, id.ordinal), "cudaDeviceGetAttribute");
    return id;
  }
  void* alloc_exportable(std::size_t bytes) override { return alloc_device(bytes); }
  void free_exportable(void* p) noexcept override { free_device(p); }
  ipc_handle ipc_export(void* base) override {
    cudaIpcMemHandle_t h{};
    check(cudaIpcGetMemHandle(&h, base), "cudaIpcGetMemHandle");
    ipc_handle out{};
    static_assert(sizeof h == sizeof out);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }
  bool enable_peer_access(int peer) override {
    const int me = current_device();
    if (peer == me) return true;
    int can = 0;
    check(cudaDeviceCanAccessPeer(&can, me, peer), "cudaDeviceCanAccessPeer");
    if (!can) return false;
    const bool pending = cudaPeekAtLastError() != cudaSuccess;  // an error of the user's: left for the user
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      if (!pending) (void)cudaGetLastError();  // clears only our own, expected error
      return true;
    }
    check(e, "cudaDeviceEnablePeerAccess");
    return true;
  }
  void* ipc_open(const ipc_handle& in) override {
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, in.data(), sizeof h);
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    return p;
  }
  void ipc_close(void* p) noexcept override { (void)cudaIpcCloseMemHandle(p); }
  void register_host(void* p, std::size_t bytes) override {
    check(cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped), "cudaHostRegister");
  }
  void unregister_host(void* p) noexcept override { (void)cudaHostUnregister(p); }
  void write_word(cuda_stream s, std::uint64_t* word, std::uint64_t value) override {
    if (auto fn = write_value_fn()) {
      void* dev = nullptr;
      check(cudaHostGetDevicePointer(&dev, word, 0), "cudaHostGetDevicePointer");
      if (fn(s, reinterpret_cast<CUdeviceptr>(dev), value, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS) return;
      memops_refused_.store(true, std::memory_order_relaxed);
    }
    auto* w = new host_writer{word, value};
    const cudaError_t r = cudaLaunchHostFunc(s, &host_writer::run, w);
    if (r != cudaSuccess) delete w;
    check(r, "cudaLaunchHostFunc");
  }
  const std::uint64_t* device_view(std::uint64_t* word) override {
    void* dev = nullptr;
    check(cudaHostGetDevicePointer(&dev, word, 0), "cudaHostGetDevicePointer");
    return static_cast<const std::uint64_t*>(dev);
  }

 private:
  using wait_value_t = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  struct host_waiter {
    std::uint64_t* word;
    std::uint64_t value;
    std::chrono::steady_clock::time_point until;
    static void run(void* p) noexcept {  // CUDA's callback thread; no CUDA call allowed here
      auto* w = static_cast<host_waiter*>(p);
      std::atomic_ref<std::uint64_t> a(*w->word);
      for (unsigned spins = 0; static_cast<std::int64_t>(a.load(std::memory_order_acquire) - w->value) < 0; ++spins) {
        if (std::chrono::steady_clock::now() >= w->until) break;  // the operation reports its own timeout
        if (spins < 1000) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      delete w;
    }
  };
  struct host_writer {
    std::uint64_t* word;
    std::uint64_t value;
    static void run(void* p) noexcept {
      auto* w = static_cast<host_writer*>(p);
      std::atomic_ref<std::uint64_t>(*w->word).store(w->value, std::memory_order_release);
      delete w;
    }
  };
  wait_value_t write_value_fn() {
    if (memops_refused_.load(std::memory_order_relaxed)) return nullptr;
    static const wait_value_t fn = [] {
      void* f = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return wait_value_t{nullptr};
      }
      return reinterpret_cast<wait_value_t>(f);
    }();
    return fn;
  }
  wait_value_t wait_value_fn() {
    if (memops_refused_.load(std::memory_order_relaxed)) return nullptr;
    static const wait_value_t fn = [] {
      void* f = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return wait_value_t{nullptr};
      }
      return reinterpret_cast<wait_value_t>(f);
    }();
    return fn;
  }
  std::atomic<bool> memops_refused_{false};
};

namespace detail {
/// Installs the real runtime once per program, unless a runtime is installed already.
inline const bool cuda_runtime_installed = [] {
  runtime_api* none = nullptr;
  api_slot().compare_exchange_strong(none, &cuda_runtime::instance());
  return true;
}();
}  // namespace detail

}  // namespace gsync::cuda
