#pragma once
/// \file
/// `cuda::runtime_api`: the CUDA runtime calls the host-staged path makes (streams, events,
/// asynchronous copies, pinned memory, a stream waiting for a host word), as one interface.
///
/// Why an interface: the staging logic (segments, windows, event order, releasing the user's
/// stream on failure) must be tested on machines without a GPU. The real implementation
/// (cuda/cuda_runtime_api.hpp) is compiled where CUDA's headers are (nvcc, or GSYNC_WITH_CUDA)
/// and registers itself when its header is included; tests install a host fake
/// (tests/support/fake_cuda.hpp) where "device memory" is host memory and a stream is a FIFO run
/// by a thread. NCCL reaches CUDA through function tables for the same reason (cudawrap).
///
/// Every method throws `gsync::error` with `errc::cuda` and CUDA's error string on failure.
/// This header includes no CUDA header.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "gsync/core/error.hpp"
#include "gsync/device_span.hpp"

namespace gsync::cuda {

/// An event (`cudaEvent_t`) as an opaque handle.
using event_handle = void*;

/// Direction of an asynchronous copy.
enum class copy_kind : std::uint8_t {
  device_to_host,    ///< device (or managed) memory to pinned host memory
  host_to_device,    ///< pinned host memory to device memory
  device_to_device,  ///< within device memory
};

/// What identifies a device to peers deciding whether they can map its memory (cuda/ipc_peer.hpp).
struct device_identity {
  std::array<unsigned char, 16> uuid{};  ///< the GPU's UUID (equal for ranks sharing one GPU)
  char pci_bus[32] = {};                 ///< PCI bus id, "0000:17:00.0" (for messages)
  int ordinal = 0;                       ///< device number in this process
  /// cudaComputeMode: 0 default, 2 prohibited, 3 exclusive-process (one context per device).
  int compute_mode = 0;
};

/// A legacy CUDA IPC memory handle (cudaIpcMemHandle_t: 64 opaque bytes).
using ipc_handle = std::array<std::byte, 64>;

/// The CUDA runtime calls of the staged path and of the CUDA IPC path (cuda/ipc_group.hpp). Streams made here never synchronise with the
/// legacy default stream; ordering with the caller's stream is always explicit (events, waits).
class runtime_api {
 public:
  virtual ~runtime_api() = default;
  /// Name for messages ("cuda", "fake").
  virtual const char* name() const noexcept = 0;
  /// The calling thread's current device.
  virtual int current_device() = 0;
  /// Makes `device` current on the calling thread.
  virtual void set_device(int device) = 0;
  /// A new stream on the current device.
  virtual cuda_stream create_stream() = 0;
  /// Destroys a stream made by create_stream (pending work completes first, as in CUDA).
  virtual void destroy_stream(cuda_stream s) noexcept = 0;
  /// A new event without timing.
  virtual event_handle create_event() = 0;
  /// Destroys an event.
  virtual void destroy_event(event_handle e) noexcept = 0;
  /// Records `e` on `s`: it completes when the work queued on `s` before it has.
  virtual void record(event_handle e, cuda_stream s) = 0;
  /// True when `e` has completed (or was never recorded); throws if the device reported an error.
  virtual bool query(event_handle e) = 0;
  /// Makes later work on `s` wait until `e`, as recorded now, has completed.
  virtual void stream_wait_event(cuda_stream s, event_handle e) = 0;
  /// Queues a copy of `bytes` bytes on `s`.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, cuda_stream s) = 0;
  /// Device memory on the current device (the device synchronizer's buckets).
  virtual void* alloc_device(std::size_t bytes) = 0;
  /// Frees memory from alloc_device.
  virtual void free_device(void* p) noexcept = 0;
  /// Queues setting `bytes` bytes of device memory at `p` to zero on `s`.
  virtual void zero_async(void* p, std::size_t bytes, cuda_stream s) = 0;
  /// Page-locked host memory that every device can copy from and to (and read as mapped memory).
  virtual void* alloc_pinned(std::size_t bytes) = 0;
  /// Frees memory from alloc_pinned.
  virtual void free_pinned(void* p) noexcept = 0;
  /// Makes later work on `s` wait until `*word - value`, as a signed 64-bit number, is >= 0.
  /// `word` lies in memory from alloc_pinned; the host stores to it. `limit` bounds the wait where
  /// the implementation cannot wait without a host thread (the stream then goes on and the
  /// operation reports its own error), so a stream never waits forever.
  virtual void wait_word(cuda_stream s, std::uint64_t* word, std::uint64_t value, std::chrono::milliseconds limit) = 0;
  /// True while `s` is being captured into a CUDA graph (the staged path cannot be captured).
  virtual bool capturing(cuda_stream s) = 0;

  // --- CUDA IPC (cuda/ipc_group.hpp) ---
  /// The current device's identity.
  virtual device_identity identity() = 0;
  /// Device memory whose handle (`ipc_export`) other processes can open: a whole cudaMalloc
  /// allocation (not pool or managed memory).
  virtual void* alloc_exportable(std::size_t bytes) = 0;
  /// Frees memory from alloc_exportable (after every importer closed it).
  virtual void free_exportable(void* p) noexcept = 0;
  /// The IPC handle of an allocation from alloc_exportable (its base pointer).
  virtual ipc_handle ipc_export(void* base) = 0;
  /// Lets the current device read and write device `peer`'s memory directly
  /// (cudaDeviceEnablePeerAccess): ranks of one process on two GPUs use each other's arenas by
  /// pointer. False when the two GPUs have no peer path (cudaDeviceCanAccessPeer); enabled
  /// before counts as done. The default (a runtime that cannot) answers false: such ranks keep
  /// to host staging.
  virtual bool enable_peer_access(int peer) { return peer == current_device(); }
  /// Maps a peer process's allocation into this process (cudaIpcOpenMemHandle with lazy peer
  /// access); throws `errc::cuda` with CUDA's reason when it cannot.
  virtual void* ipc_open(const ipc_handle& h) = 0;
  /// Unmaps what ipc_open returned.
  virtual void ipc_close(void* p) noexcept = 0;
  /// Page-locks host memory this process did not allocate through CUDA (a shared-memory page),
  /// mapped for every device, so that streams can wait on and write words in it.
  virtual void register_host(void* p, std::size_t bytes) = 0;
  /// Undoes register_host.
  virtual void unregister_host(void* p) noexcept = 0;
  /// Makes `s` store `value` to `*word` once the work queued before has completed. `word` lies in
  /// memory from alloc_pinned or register_host.
  virtual void write_word(cuda_stream s, std::uint64_t* word, std::uint64_t value) = 0;
  /// The address through which a kernel reads `word` (in memory from alloc_pinned or register_host).
  virtual const std::uint64_t* device_view(std::uint64_t* word) = 0;
};

/// Makes `device` current on the calling thread for its lifetime, then puts back the caller's
/// current device (a device call of gsync's must not change the user's, review R14).
class device_guard {
 public:
  device_guard(runtime_api& api, int device) : api_(api), device_(device), was_(api.current_device()) {
    if (was_ != device_) api_.set_device(device_);
  }
  ~device_guard() {
    if (was_ != device_) try {
        api_.set_device(was_);
      } catch (...) {
        // the caller keeps gsync's device: nothing better to do in a destructor
      }
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  runtime_api& api_;
  int device_, was_;
};

namespace detail {
/// The process's runtime: set by the real implementation's header, or by a test.
inline std::atomic<runtime_api*>& api_slot() noexcept {
  static std::atomic<runtime_api*> slot{nullptr};
  return slot;
}
}  // namespace detail

/// Installs `api` as the runtime of every later device operation (the real CUDA runtime installs
/// itself; tests install a fake). Returns the previous one. Communicators keep the runtime they
/// started their first device operation with.
inline runtime_api* set_runtime_api(runtime_api* api) noexcept { return detail::api_slot().exchange(api); }

/// The installed runtime; throws `errc::cuda` when there is none: the program's
/// translation units were all compiled without CUDA (neither nvcc nor GSYNC_WITH_CUDA).
inline runtime_api& current_runtime_api() {
  if (runtime_api* a = detail::api_slot().load(std::memory_order_acquire)) return *a;
  throw error(errc::cuda,
              "device memory: this program has no CUDA runtime: compile at least one file that includes gsync with nvcc, "
              "or define GSYNC_WITH_CUDA=1 (the gsync::cuda CMake target does) with CUDA's headers on the include path");
}

}  // namespace gsync::cuda
