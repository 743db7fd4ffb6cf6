#pragma once
/// \file
/// `cuda::detail::stream_holds`: the streams gsync holds on each device of this process (a gate
/// closed by the staged path, an operation queued by the CUDA IPC path), and the one door through
/// which gsync's own device-synchronising calls pass.
///
/// Why: cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost, cudaHostRegister and the like wait
/// until every stream of the device has drained. A stream that waits for gsync (a gate, a peer's
/// counter) drains only once gsync's host side lets it go, so such a call made while a stream is
/// held can wait for itself: a device-level deadlock that no deadline can break. gsync therefore
/// allocates its pools up front, bounded, and makes every such call through `exclusive`, which
/// runs it only while no stream is held on the device (waiting, bounded, for the holds to end)
/// and keeps new holds out meanwhile.

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "gsync/core/error.hpp"
#include "gsync/detail/function_ref.hpp"

namespace gsync::cuda::detail {

/// The holds of this process, per device.
class stream_holds {
 public:
  /// The process's registry.
  static stream_holds& instance() noexcept {
    static stream_holds h;
    return h;
  }

  /// Counts a stream held on `device`; waits while a device-synchronising call runs there.
  void hold(int device) {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return !devices_[device].busy; });
    ++devices_[device].held;
  }
  /// Ends one hold on `device` (the stream was let go).
  void unhold(int device) noexcept {
    {
      std::lock_guard lk(m_);
      --devices_[device].held;
    }
    cv_.notify_all();
  }
  /// Streams held on `device` now.
  long held(int device) {
    std::lock_guard lk(m_);
    return devices_[device].held;
  }

  /// Runs `fn` (gsync's device-synchronising calls on `device`) once no stream is held there, with
  /// new holds kept out until it returns. Throws `errc::timeout` naming `what` when streams are
  /// still held at `until`: the device operations in flight in this process wait for something
  /// (another rank of this process, a peer) that does not come.
  void exclusive(int device, std::chrono::steady_clock::time_point until, const char* what, gsync::detail::function_ref<void()> fn) {
    {
      std::unique_lock lk(m_);
      if (!cv_.wait_until(lk, until, [&] { return devices_[device].held == 0 && !devices_[device].busy; }))
        throw error(errc::timeout, std::string(what) + ": allocating device or pinned memory synchronises device " + std::to_string(device) +
                                       ", and " + std::to_string(devices_[device].held) +
                                       " stream(s) held by gsync's device operations in flight did not drain before the deadline "
                                       "(ranks of one process that share a device: call gsync::prepare_device(comm) on each "
                                       "before their first device operation)");
      devices_[device].busy = true;
    }
    struct done {
      stream_holds& h;
      int d;
      ~done() {
        {
          std::lock_guard lk(h.m_);
          h.devices_[d].busy = false;
        }
        h.cv_.notify_all();
      }
    } guard{*this, device};
    fn();
  }

 private:
  struct state {
    long held = 0;
    bool busy = false;
  };
  std::mutex m_;
  std::condition_variable cv_;
  std::map<int, state> devices_;
};

/// One hold of a stream on a device, ended once (by `end` or destruction).
class stream_hold {
 public:
  stream_hold() = default;
  /// Holds a stream on `device` (see stream_holds::hold).
  explicit stream_hold(int device) : device_(device) { stream_holds::instance().hold(device); }
  stream_hold(stream_hold&& o) noexcept : device_(std::exchange(o.device_, -1)) {}
  stream_hold& operator=(stream_hold&& o) noexcept {
    if (this != &o) {
      end();
      device_ = std::exchange(o.device_, -1);
    }
    return *this;
  }
  ~stream_hold() { end(); }
  /// Ends the hold (idempotent).
  void end() noexcept {
    if (device_ >= 0) stream_holds::instance().unhold(std::exchange(device_, -1));
  }

 private:
  int device_ = -1;
};

}  // namespace gsync::cuda::detail
