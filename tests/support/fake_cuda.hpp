#pragma once
// A host stand-in for the CUDA runtime (gsync::cuda::runtime_api), so the staged path of device
// buffers is tested on machines without a GPU. "Device memory" is host memory; each stream is a
// FIFO of tasks run in order by its own thread, so work on a stream really is asynchronous to the
// caller and ordered only as CUDA would order it (events, waits); an event completes when the
// stream's task recorded for it has run. Tests queue their own "kernels" with `launch` and wait
// with `synchronize`. Counters and fault injection let tests check bounds and failure paths.
//
// As on a GPU, the calls that allocate or free device or pinned memory or register host memory
// synchronise the device: they return only once every stream has run the work queued on it
// before the call. A stream that waits for gsync (a closed gate, a peer's counter) while gsync's
// own thread makes such a call would wait forever on a GPU; here the call gives up after
// `sync_limit`, counts a `sync_stall`, and throws (or, for a free, goes on), so the test fails.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gsync/core/ops.hpp>
#include <gsync/cuda/api.hpp>
#include <gsync/grad/device_api.hpp>
#include <gsync/cuda/ipc_api.hpp>
#include <gsync/cuda/ipc_reduce.hpp>
#include <gsync/grad/clip.hpp>
#include <gsync/grad/nonfinite.hpp>

namespace gsync_test {

/// Delay of every device-to-device copy and IPC reduction the calling thread enqueues (a rank made
/// slow on purpose).
inline thread_local int slow_stream_us = 0;

class fake_cuda final : public gsync::cuda::runtime_api {
 public:
  struct stream_impl {
    std::mutex m;
    std::condition_variable cv, idle_cv;
    std::deque<std::function<void()>> q;
    bool stop = false, busy = false;
    int device = 0;  // the device current when it was made
    std::thread t;
    stream_impl() {
      t = std::thread([this] {
        std::unique_lock lk(m);
        for (;;) {
          cv.wait(lk, [&] { return stop || !q.empty(); });
          if (q.empty()) return;
          auto f = std::move(q.front());
          q.pop_front();
          busy = true;
          lk.unlock();
          f();
          lk.lock();
          busy = false;
          idle_cv.notify_all();
        }
      });
    }
    ~stream_impl() {
      {
        std::lock_guard lk(m);
        stop = true;
      }
      cv.notify_all();
      t.join();
    }
    void push(std::function<void()> f) {
      {
        std::lock_guard lk(m);
        q.push_back(std::move(f));
      }
      cv.notify_all();
    }
    void drain() {
      std::unique_lock lk(m);
      idle_cv.wait(lk, [&] { return q.empty() && !busy; });
    }
  };
  struct event_impl {
    std::atomic<std::uint64_t> recorded{0}, completed{0};
    std::atomic<int> refs{1};  // the owner and each queued record
  };
  static void unref(event_impl* ev) noexcept {
    if (ev->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete ev;
  }

  fake_cuda() = default;
  ~fake_cuda() override {
    default_.reset();
  }

  // --- test controls ---
  /// Queues host work on `s` (a stand-in for a kernel).
  void launch(gsync::cuda_stream s, std::function<void()> f) { impl(s).push(std::move(f)); }
  /// Blocks until everything queued on `s` has run.
  void synchronize(gsync::cuda_stream s) { impl(s).drain(); }
  /// Copies failing from the n-th on (0: never), as a CUDA error would.
  std::atomic<long> fail_copy_from{0};
  std::atomic<long> copies{0};              // copy_async calls
  std::atomic<long> d2h_bytes{0}, h2d_bytes{0};
  std::atomic<long> pinned_bytes{0};        // currently allocated
  std::atomic<long> pinned_peak{0};
  std::atomic<long> streams_alive{0};
  std::atomic<long> device_allocations{0};  // alloc_device minus free_device
  std::atomic<bool> capture{false};         // what capturing() answers
  std::atomic<long> ipc_opens{0}, ipc_open_now{0};  // ipc_open calls; mappings open now
  std::atomic<long> exportable_now{0};      // alloc_exportable minus free_exportable
  std::atomic<long> registered_now{0};      // register_host minus unregister_host
  std::atomic<bool> fail_ipc_open{false};   // ipc_open fails as in another PID namespace
  std::atomic<int> compute_mode{0};         // what identity() reports
  // A read of a peer's arena (ipc_open) whose exporting process is gone, later than
  // `dead_read_grace` after such a read was first seen: on a GPU the mapping of a dead process's
  // memory is invalid, and the fault is sticky: it kills this process's context. `poisoned` then
  // makes every later call and query fail, as cudaErrorIllegalAddress does.
  std::atomic<bool> poisoned{false};
  std::atomic<long> dead_reads{0};          // reads of a dead exporter's arena (within the grace or not)
  std::chrono::milliseconds dead_read_grace{250};
  std::atomic<long> sync_stalls{0};         // device-synchronising calls that found a stream that did not drain
  std::atomic<long> device_syncs{0};        // device-synchronising calls
  std::chrono::milliseconds sync_limit{2000};
  std::atomic<bool> memops{true};           // stream waits as cuStreamWaitValue64 (no limit); false: host-function fallback
  std::atomic<long> overdue_waits{0};       // stream waits still unmet at their limit (see wait_word)
  std::chrono::milliseconds memop_cap{30000};
  std::string last_stall;                   // what the last stalled call was (under m_)
  unsigned char uuid_byte = 0x11;           // device d's UUID: this byte plus d, 16 times
  std::atomic<bool> peer_access_possible{true};  // what enable_peer_access answers for another device
  std::atomic<long> peer_enables{0};             // enable_peer_access calls for another device
  std::atomic<long> peer_faults{0};              // reads of another device's memory without peer access

  // --- runtime_api ---
  const char* name() const noexcept override { return "fake"; }
  int current_device() override { return current_device_of_thread(); }
  void set_device(int d) override { current_device_of_thread() = d; }
  /// The calling thread's current device (as CUDA's: per thread, 0 at first).
  static int& current_device_of_thread() {
    thread_local int d = 0;
    return d;
  }
  gsync::cuda_stream create_stream() override {
    ++streams_alive;
    auto* impl = new stream_impl;
    impl->device = current_device();
    std::lock_guard lk(m_);
    live_.insert(impl);
    return reinterpret_cast<gsync::cuda_stream>(impl);
  }
  void destroy_stream(gsync::cuda_stream s) noexcept override {
    --streams_alive;
    {
      std::lock_guard lk(m_);
      live_.erase(reinterpret_cast<stream_impl*>(s));
    }
    delete reinterpret_cast<stream_impl*>(s);
  }
  gsync::cuda::event_handle create_event() override { return new event_impl; }
  // As in CUDA, an event may be destroyed while a record of it is still queued: the last of the
  // owner and the queued records frees it.
  void destroy_event(gsync::cuda::event_handle e) noexcept override { unref(static_cast<event_impl*>(e)); }
  void record(gsync::cuda::event_handle e, gsync::cuda_stream s) override {
    auto* ev = static_cast<event_impl*>(e);
    const std::uint64_t gen = ++ev->recorded;
    ++ev->refs;
    impl(s).push([ev, gen] {
      std::uint64_t c = ev->completed.load();
      while (c < gen && !ev->completed.compare_exchange_weak(c, gen)) {
      }
      unref(ev);
    });
  }
  bool query(gsync::cuda::event_handle e) override {
    if (poisoned) throw gsync::error(gsync::errc::cuda, "cudaEventQuery failed: cudaErrorIllegalAddress (fake: a dead peer's memory was read)");
    auto* ev = static_cast<event_impl*>(e);
    return ev->completed.load() >= ev->recorded.load();
  }
  void stream_wait_event(gsync::cuda_stream s, gsync::cuda::event_handle e) override {
    auto* ev = static_cast<event_impl*>(e);
    const std::uint64_t target = ev->recorded.load();
    impl(s).push([ev, target] {
      while (ev->completed.load() < target) std::this_thread::yield();
    });
  }
  void copy_async(void* dst, const void* src, std::size_t bytes, gsync::cuda::copy_kind kind, gsync::cuda_stream s) override {
    const long n = ++copies;
    if (poisoned) throw gsync::error(gsync::errc::cuda, "cudaMemcpyAsync failed: cudaErrorIllegalAddress (fake: a dead peer's memory was read)");
    if (fail_copy_from && n >= fail_copy_from)
      throw gsync::error(gsync::errc::cuda, "cudaMemcpyAsync failed: cudaErrorIllegalAddress (fake: injected)");
    if (kind == gsync::cuda::copy_kind::device_to_host) d2h_bytes += static_cast<long>(bytes);
    if (kind == gsync::cuda::copy_kind::host_to_device) h2d_bytes += static_cast<long>(bytes);
    const int delay_us = kind == gsync::cuda::copy_kind::device_to_device ? slow_stream_us : 0;
    impl(s).push([=, this] {
      if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      note_read(src, s);
      std::memcpy(dst, src, bytes);
    });
  }
  void* alloc_device(std::size_t bytes) override {
    sync_device("cudaMalloc", true);
    void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
    if (!p) throw gsync::error(gsync::errc::cuda, "cudaMalloc failed (fake)");
    ++device_allocations;
    return p;
  }
  void free_device(void* p) noexcept override {
    if (p) sync_device("cudaFree", false);
    if (p) --device_allocations;
    std::free(p);
  }
  void zero_async(void* p, std::size_t bytes, gsync::cuda_stream s) override {
    impl(s).push([=] { std::memset(p, 0, bytes); });
  }
  void* alloc_pinned(std::size_t bytes) override {
    sync_device("cudaHostAlloc", true);
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) throw gsync::error(gsync::errc::cuda, "cudaHostAlloc failed (fake)");
    {
      std::lock_guard lk(m_);
      sizes_[p] = bytes;
    }
    const long now = pinned_bytes += static_cast<long>(bytes);
    long peak = pinned_peak.load();
    while (now > peak && !pinned_peak.compare_exchange_weak(peak, now)) {
    }
    return p;
  }
  void free_pinned(void* p) noexcept override {
    sync_device("cudaFreeHost", false);
    {
      std::lock_guard lk(m_);
      pinned_bytes -= static_cast<long>(sizes_[p]);
      sizes_.erase(p);
    }
    std::free(p);
  }
  // With `memops` (the default, as cuStreamWaitValue64 on a GPU) the wait ignores `limit`: only the
  // host writing the word lets the stream go on. A wait still unmet at its limit counts in
  // `overdue_waits` (gsync relied on a bound the real path does not have); it gives up after
  // `memop_cap` so that the test ends. Without `memops` (the host-function fallback) it honours
  // `limit`.
  void wait_word(gsync::cuda_stream s, std::uint64_t* word, std::uint64_t value, std::chrono::milliseconds limit) override {
    const auto until = std::chrono::steady_clock::now() + limit;
    const bool device_wait = memops.load();
    const auto cap = until + memop_cap;
    impl(s).push([this, word, value, until, device_wait, cap] {
      std::atomic_ref<std::uint64_t> a(*word);
      bool overdue = false;
      for (unsigned spins = 0; static_cast<std::int64_t>(a.load(std::memory_order_acquire) - value) < 0; ++spins) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= until) {
          if (!device_wait) break;
          if (!overdue) {
            overdue = true;
            ++overdue_waits;
          }
          if (now >= cap) break;
        }
        if (spins < 1000) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  }
  bool capturing(gsync::cuda_stream) override { return capture.load(); }

  // CUDA IPC: exportable "device memory" is POSIX shared memory, so that ranks in other
  // processes (multi-process tests) can map it by the name carried in the handle.
  gsync::cuda::device_identity identity() override {
    gsync::cuda::device_identity id;
    id.ordinal = current_device();
    id.uuid.fill(static_cast<unsigned char>(uuid_byte + id.ordinal));  // one GPU per ordinal
    std::snprintf(id.pci_bus, sizeof id.pci_bus, "0000:fa:%02x.0", static_cast<unsigned>(id.ordinal) & 0xffu);
    id.compute_mode = compute_mode.load();
    return id;
  }
  bool enable_peer_access(int peer) override {
    if (peer == current_device()) return true;
    ++peer_enables;
    if (!peer_access_possible.load()) return false;
    std::lock_guard lk(m_);
    peer_enabled_.insert({current_device(), peer});
    return true;
  }
  void* alloc_exportable(std::size_t bytes) override {
    sync_device("cudaMalloc", true);
    char name[64];
    static std::atomic<unsigned> n{0};
    std::snprintf(name, sizeof name, "/gsync-%d-fakedev-%u", static_cast<int>(::getpid()), n++);
    int fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw gsync::error(gsync::errc::cuda, "cudaMalloc failed (fake: shm_open)");
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      ::close(fd);
      ::shm_unlink(name);
      throw gsync::error(gsync::errc::cuda, "cudaMalloc failed (fake: ftruncate)");
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      ::shm_unlink(name);
      throw gsync::error(gsync::errc::cuda, "cudaMalloc failed (fake: mmap)");
    }
    std::lock_guard lk(m_);
    exports_[p] = {name, bytes};
    export_device_[p] = current_device();
    ++exportable_now;
    return p;
  }
  void free_exportable(void* p) noexcept override {
    sync_device("cudaFree", false);
    std::lock_guard lk(m_);
    auto it = exports_.find(p);
    if (it == exports_.end()) return;
    ::shm_unlink(it->second.first.c_str());
    ::munmap(p, it->second.second);
    exports_.erase(it);
    export_device_.erase(p);
    --exportable_now;
  }
  gsync::cuda::ipc_handle ipc_export(void* base) override {
    std::lock_guard lk(m_);
    auto it = exports_.find(base);
    if (it == exports_.end()) throw gsync::error(gsync::errc::cuda, "cudaIpcGetMemHandle failed: cudaErrorInvalidValue (fake)");
    gsync::cuda::ipc_handle h{};
    const std::string& name = it->second.first;
    std::memcpy(h.data(), name.data(), std::min(name.size(), h.size() - 9));
    std::uint64_t bytes = it->second.second;
    std::memcpy(h.data() + h.size() - 8, &bytes, 8);
    return h;
  }
  void* ipc_open(const gsync::cuda::ipc_handle& h) override {
    ++ipc_opens;
    if (fail_ipc_open) throw gsync::error(gsync::errc::cuda, "cudaIpcOpenMemHandle failed: cudaErrorInvalidValue (fake: injected)");
    const std::string name(reinterpret_cast<const char*>(h.data()), strnlen(reinterpret_cast<const char*>(h.data()), h.size() - 9));
    std::uint64_t bytes = 0;
    std::memcpy(&bytes, h.data() + h.size() - 8, 8);
    {
      std::lock_guard lk(m_);
      for (auto& [p, e] : exports_)
        if (e.first == name)  // CUDA cannot open a handle in the process that exported it
          throw gsync::error(gsync::errc::cuda, "cudaIpcOpenMemHandle failed: cudaErrorDeviceUninitialized (fake: own handle)");
    }
    int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) throw gsync::error(gsync::errc::cuda, "cudaIpcOpenMemHandle failed: cudaErrorInvalidResourceHandle (fake)");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw gsync::error(gsync::errc::cuda, "cudaIpcOpenMemHandle failed (fake: mmap)");
    std::lock_guard lk(m_);
    opened_[p] = bytes;
    opened_pid_[p] = std::atoi(name.c_str() + std::strlen("/gsync-"));  // "/gsync-PID-fakedev-N"
    ++ipc_open_now;
    return p;
  }
  void ipc_close(void* p) noexcept override {
    std::lock_guard lk(m_);
    auto it = opened_.find(p);
    if (it == opened_.end()) return;
    ::munmap(p, it->second);
    opened_.erase(it);
    --ipc_open_now;
  }
  void register_host(void*, std::size_t) override {
    sync_device("cudaHostRegister", true);
    ++registered_now;
  }
  void unregister_host(void*) noexcept override {
    sync_device("cudaHostUnregister", false);
    --registered_now;
  }
  const std::uint64_t* device_view(std::uint64_t* word) override { return word; }
  void write_word(gsync::cuda_stream s, std::uint64_t* word, std::uint64_t value) override {
    impl(s).push([word, value] { std::atomic_ref<std::uint64_t>(*word).store(value, std::memory_order_release); });
  }

  /// Called as a kernel or copy reads `p` (on the stream's thread): counts and judges a read of
  /// a dead process's arena (see `poisoned`).
  void note_read(const void* p, gsync::cuda_stream s) {
    int pid = 0;
    const int reader = impl(s).device;
    {
      std::lock_guard lk(m_);
      // A kernel on one device reading this process's memory of another: only with peer access (else it faults).
      for (auto& [base, dev] : export_device_)
        if (p >= base && static_cast<const char*>(p) < static_cast<const char*>(base) + exports_[base].second && dev != reader &&
            !peer_enabled_.count({reader, dev}))
          ++peer_faults;
      for (auto& [base, bytes] : opened_)
        if (p >= base && static_cast<const char*>(p) < static_cast<const char*>(base) + bytes) pid = opened_pid_[base];
    }
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) return;
    ++dead_reads;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lk(m_);
    auto [it, first] = first_dead_read_.emplace(pid, now);
    if (!first && now - it->second > dead_read_grace) poisoned = true;
  }

 private:
  // What CUDA does in the calls above: wait until every stream ran what was queued before. Bounded
  // here (a GPU would wait forever), and counted.
  void sync_device(const char* call, bool may_throw) {
    ++device_syncs;
    auto flags = std::make_shared<std::atomic<long>>(0);
    long n = 0;
    {
      std::lock_guard lk(m_);
      for (stream_impl* st : live_) {
        st->push([flags] { ++*flags; });
        ++n;
      }
      if (default_) {
        default_->push([flags] { ++*flags; });
        ++n;
      }
    }
    const auto until = std::chrono::steady_clock::now() + sync_limit;
    while (flags->load() < n) {
      if (std::chrono::steady_clock::now() >= until) {
        ++sync_stalls;
        {
          std::lock_guard lk(m_);
          last_stall = call;
        }
        if (may_throw)
          throw gsync::error(gsync::errc::cuda, std::string(call) +
                                                    " (fake): synchronises the device, but a stream did not drain: it waits for "
                                                    "gsync, which would never let it go on a GPU (a device-level deadlock)");
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  stream_impl& impl(gsync::cuda_stream s) {
    if (s) return *reinterpret_cast<stream_impl*>(s);
    std::lock_guard lk(m_);
    if (!default_) default_ = std::make_unique<stream_impl>();
    return *default_;
  }
  std::mutex m_;
  std::unique_ptr<stream_impl> default_;
  std::set<stream_impl*> live_;
  std::map<void*, std::size_t> sizes_;
  std::map<void*, std::pair<std::string, std::size_t>> exports_;
  std::map<void*, std::size_t> opened_;
  std::map<void*, int> export_device_;         // the device of each exportable allocation
  std::set<std::pair<int, int>> peer_enabled_;  // (device, peer) pairs with peer access
  std::map<void*, int> opened_pid_;                                       // exporter of each mapping
  std::map<int, std::chrono::steady_clock::time_point> first_dead_read_;  // by exporter
};


/// The IPC reduction on fake streams: the CUDA kernel's element engine (cuda/ipc_reduce.hpp) run by
/// one worker as a task of the stream.
class fake_ipc_kernels final : public gsync::cuda::ipc_kernels {
 public:
  explicit fake_ipc_kernels(fake_cuda& api) : api_(api) {}
  void reduce(const gsync::cuda::ipc_sources& src, void* dst, std::size_t count, gsync::dtype t, gsync::cuda::ipc_op op,
              gsync::cuda_stream s, const std::uint64_t* cancel) override {
    ++calls;
    if (api_.poisoned) throw gsync::error(gsync::errc::cuda, "IPC reduce kernel launch: cudaErrorIllegalAddress (fake: sticky)");
    const int delay_us = slow_stream_us;
    gsync::cuda::visit_dtype(t, [&](auto v) {
      using T = decltype(v);
      api_.launch(s, [=, this] {
        if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));  // a slow reader
        if (cancelled(cancel)) return;
        for (int i = 0; i < src.n; ++i) api_.note_read(src.p[i], s);
        T* d = static_cast<T*>(dst);
        gsync::cuda::ipc_reduce_any(src, d, count, gsync::cuda::ipc_split(src, d, count), op, 0, 1);
      });
    });
  }
  /// What cuda/ipc_kernels.cuh's kernel of a user operator does (`gsync::cuda::ipc_user_reduction`),
  /// on a fake stream: tests give their operators this reduction with `fake_user_reduction`.
  template <class T, class Op>
  void reduce_user(const gsync::cuda::ipc_sources& src, void* dst, std::size_t count, const Op& op, bool finalize, gsync::cuda_stream s,
                   const std::uint64_t* cancel) {
    ++calls;
    ++user_calls;
    if (api_.poisoned) throw gsync::error(gsync::errc::cuda, "IPC reduce kernel launch (user operator): cudaErrorIllegalAddress (fake: sticky)");
    if (count == 0) return;
    api_.launch(s, [=, this] {
      if (cancelled(cancel)) return;
      for (int i = 0; i < src.n; ++i) api_.note_read(src.p[i], s);
      T* d = static_cast<T*>(dst);
      const auto sp = gsync::cuda::ipc_split(src, d, count);
      if (finalize) gsync::cuda::ipc_reduce_share<T>(src, d, count, sp, op, 0, 1);
      else gsync::cuda::ipc_reduce_share<T>(src, d, count, sp, gsync::cuda::combine_only<Op>{op}, 0, 1);
    });
  }
  void copy(void* dst, const void* src, std::size_t bytes, gsync::cuda_stream s, const std::uint64_t* cancel) override {
    ++copies;
    if (api_.poisoned) throw gsync::error(gsync::errc::cuda, "IPC copy kernel launch: cudaErrorIllegalAddress (fake: sticky)");
    const int delay_us = slow_stream_us;
    api_.launch(s, [=, this] {
      if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      if (cancelled(cancel)) return;
      api_.note_read(src, s);
      std::memcpy(dst, src, bytes);
    });
  }
  std::atomic<long> copies{0};
  std::atomic<long> skipped{0};  // kernels that found their cancel word set
  std::atomic<long> calls{0};
  std::atomic<long> user_calls{0};  // reductions of user operators (reduce_user)

 private:
  bool cancelled(const std::uint64_t* cancel) {
    if (!cancel || std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(cancel)).load(std::memory_order_acquire) == 0) return false;
    ++skipped;
    return true;
  }
  fake_cuda& api_;
};

/// The IPC reduction of a test's user operator `Op` on the installed fake kernels: specialize
/// `gsync::cuda::ipc_user_reduction<T, Op>` with it, as cuda/ipc_kernels.cuh does for every
/// operator in a .cu file.
template <class T, class Op>
struct fake_user_reduction {
  static void queue(const void* op, const gsync::cuda::ipc_sources& src, void* dst, std::size_t count, bool finalize, gsync::cuda_stream s,
                    const std::uint64_t* cancel) {
    auto* k = dynamic_cast<fake_ipc_kernels*>(gsync::cuda::installed_ipc_kernels());
    if (!k) throw gsync::error(gsync::errc::cuda, "fake_user_reduction: no fake IPC kernels installed");
    k->reduce_user<T>(src, dst, count, *static_cast<const Op*>(op), finalize, s, cancel);
  }
};

/// The gradient passes on fake streams: the host passes of grad/nonfinite.hpp and grad/clip.hpp,
/// queued on the stream as its tasks (the sum of squares in the host's sequential order).
class fake_grad_kernels final : public gsync::cuda::grad_kernels {
 public:
  explicit fake_grad_kernels(fake_cuda& api) : api_(api) {}
  void cast(const void* src, gsync::dtype from, void* dst, gsync::dtype to, std::size_t n, gsync::cuda_stream s) override {
    both(from, to, [&](auto f, auto t) {
      using F = decltype(f);
      using T = decltype(t);
      api_.launch(s, [=] { gsync::grad::cast_into(static_cast<const F*>(src), static_cast<T*>(dst), n); });
    });
  }
  void unpack_scan(const void* src, gsync::dtype from, void* dst, gsync::dtype to, std::size_t n, float factor,
                   unsigned long long* counter, gsync::cuda_stream s) override {
    both(from, to, [&](auto f, auto t) {
      using F = decltype(f);
      using T = decltype(t);
      api_.launch(s, [=] { *counter += gsync::grad::unpack_scan(static_cast<const F*>(src), static_cast<T*>(dst), n, factor); });
    });
  }
  void sum_squares(const void* x, gsync::dtype t, std::size_t n, double* out, gsync::cuda_stream s) override {
    gsync::grad::detail::visit_grad_type(t, [&](auto v) {
      using T = decltype(v);
      api_.launch(s, [=] { *out = gsync::grad::detail::sum_squares(static_cast<const T*>(x), n); });
    });
  }
  void scale(void* x, gsync::dtype t, std::size_t n, float factor, gsync::cuda_stream s) override {
    gsync::grad::detail::visit_grad_type(t, [&](auto v) {
      using T = decltype(v);
      api_.launch(s, [=] {
        T* p = static_cast<T*>(x);
        for (std::size_t i = 0; i < n; ++i) p[i] = gsync::grad::detail::from_f<T>(gsync::grad::detail::to_f(p[i]) * factor);
      });
    });
  }
  void int8_encode(const float* g, float* residual, std::size_t count, std::size_t block, bool stochastic, gsync::grad::counter_rng rng,
                   std::uint64_t first, float* scales, std::int8_t* q, gsync::cuda_stream s) override {
    api_.launch(s, [=] {  // block by block, as the host encoder (grad/int8_exchange.hpp)
      const auto mode = stochastic ? gsync::grad::rounding::stochastic : gsync::grad::rounding::nearest;
      for (std::size_t off = 0, b = 0; off < count; off += block, ++b) {
        const std::size_t len = std::min(block, count - off);
        const float* x = g + off;
        if (residual) {
          for (std::size_t i = 0; i < len; ++i) residual[off + i] += g[off + i];
          x = residual + off;
        }
        const gsync::grad::block_scale sc = gsync::grad::scale_of(x, len);
        gsync::grad::quantize_block(x, len, sc, q + off, mode, rng, first + off);
        if (residual) gsync::grad::update_residual(residual + off, q + off, len, sc);
        scales[b] = sc.scale;
      }
    });
  }
  void int8_decode(const float* scales, const std::int8_t* q, std::size_t count, std::size_t block, float* out,
                   gsync::cuda_stream s) override {
    api_.launch(s, [=] {
      for (std::size_t off = 0, b = 0; off < count; off += block, ++b)
        gsync::grad::dequantize_block(q + off, std::min(block, count - off), scales[b], out + off);
    });
  }

 private:
  template <class F>
  static void both(gsync::dtype a, gsync::dtype b, F&& f) {
    gsync::grad::detail::visit_grad_type(a, [&](auto x) { gsync::grad::detail::visit_grad_type(b, [&](auto y) { f(x, y); }); });
  }
  fake_cuda& api_;
};

/// Installs a fake runtime and fake gradient kernels for the scope of a test (restores the previous
/// ones after).
struct fake_cuda_scope {
  fake_cuda api;
  fake_grad_kernels kernels{api};
  fake_ipc_kernels ipc{api};
  gsync::cuda::runtime_api* prev;
  gsync::cuda::grad_kernels* prev_kernels;
  gsync::cuda::ipc_kernels* prev_ipc;
  /// \param with_ipc also install the IPC kernels (device collectives may then run over CUDA IPC).
  explicit fake_cuda_scope(bool with_ipc = false)
      : prev(gsync::cuda::set_runtime_api(&api)),
        prev_kernels(gsync::cuda::set_grad_kernels(&kernels)),
        prev_ipc(gsync::cuda::set_ipc_kernels(with_ipc ? &ipc : nullptr)) {}
  ~fake_cuda_scope() {
#if defined(DOCTEST_LIBRARY_INCLUDED)
    if (api.overdue_waits.load() != 0)
      FAIL_CHECK(api.overdue_waits.load() << " stream wait(s) outlived their limit: on a GPU (stream memory operations) "
                                                "nothing but gsync's host side would have let the stream go on");
    if (api.peer_faults.load() != 0)
      FAIL_CHECK(api.peer_faults.load() << " kernel read(s) of another GPU's memory without peer access: a GPU would fault");
    if (api.sync_stalls.load() != 0)
      FAIL_CHECK(api.sync_stalls.load() << " device-synchronising call(s) waited for a stream held by gsync, the last: " << api.last_stall);
#endif
    gsync::cuda::set_ipc_kernels(prev_ipc);
    gsync::cuda::set_grad_kernels(prev_kernels);
    gsync::cuda::set_runtime_api(prev);
  }
  fake_cuda_scope(const fake_cuda_scope&) = delete;
  fake_cuda_scope& operator=(const fake_cuda_scope&) = delete;
};

}  // namespace gsync_test
