#pragma once
/// \file
/// The host-staged path of device buffers: how a collective on device memory runs over links
/// that move host memory only (shared memory, TCP). Non-templated: nothing here touches elements.
///
/// How one operation moves, for a call `allreduce(comm, device_span, op, stream)`:
///   caller thread   numbers the operation; on the user's stream records a start event, then
///                   queues a wait for the communicator's gate word to reach this operation's
///                   value (`runtime_api::wait_word`); queues the job on the progress engine and
///                   returns. Work the user queues later on the stream waits behind the gate.
///   engine thread   per window of the buffers (below): copies the window device -> pinned host
///                   mirror on the copy-in stream, one event per piece (<= copy_piece_bytes), after
///                   the start event; runs the host schedule of the collective on the mirror,
///                   which waits for the events of the pieces it touches before touching them
///                   (`readiness`), so the first sends overlap the rest of the copy-in; then copies
///                   the window's results mirror -> device on the copy-out stream. While window w
///                   runs, window w+1 is already being copied in (two mirrors), and window w-1's
///                   results are being copied out. When the last copy-out has completed, the
///                   engine stores the operation's value into the gate word: the user's stream
///                   goes on, and sees the results.
///   on failure      (a lost peer, a timeout, a CUDA error) the engine waits for its own copies to
///                   stop, then releases the gate all the same (the stream never hangs; the output
///                   is unspecified), and the communicator is broken: the next call throws the error.
///
/// Windows: the mirror of one operation holds at most `staging_bytes` (GSYNC_CUDA_STAGING_BYTES,
/// config.hpp). A message that fits runs as one collective, exactly the host schedule for its
/// size, so its result equals the host path's bit for bit; a larger one runs as consecutive
/// collectives on slices (for block-structured collectives, the same slice of every block), each
/// numbered at issue. Memory: the mirrors (at most two windows) and the events, per communicator,
/// reused; nothing proportional to the message.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_registration.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/gate_watchdog.hpp"
#include "gsync/cuda/staged_plan.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/detail/function_ref.hpp"

namespace gsync::cuda::detail {

/// Waits, polling with a deadline, until event `e` has completed. \param what names the wait.
inline void wait_event(runtime_api& api, event_handle e, deadline dl, const char* what) {
  for (unsigned spins = 0; !api.query(e); ++spins) {
    if (std::chrono::steady_clock::now() >= dl)
      throw error(errc::timeout, std::string("device staging: ") + what + " did not complete before the deadline");
    if (spins < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

/// Which bytes of the mirror's input part have arrived: the copy-in pieces of the running window
/// in mirror order with their events. Pieces complete in order (one stream), so waiting for the
/// last piece a range touches covers the range.
class readiness {
 public:
  /// Pieces `pieces` (mirror order) of the mirror at `mirror`, completed by `events`.
  readiness(runtime_api& api, const std::byte* mirror, const std::vector<piece>& pieces, const std::vector<event_handle>& events,
            deadline dl) noexcept
      : api_(api), mirror_(mirror), pieces_(pieces), events_(events), dl_(dl) {}

  /// Waits until the bytes [p, p + n) of the mirror have arrived (no wait outside the pieces).
  void ensure(const void* p, std::size_t n) {
    if (n == 0 || pieces_.empty()) return;
    const auto* b = static_cast<const std::byte*>(p);
    const std::byte* lo = mirror_ + pieces_.front().mirror_off;
    const std::byte* hi = mirror_ + pieces_.back().mirror_off + pieces_.back().bytes;
    if (b + n <= lo || b >= hi) return;
    const std::size_t end = static_cast<std::size_t>(std::min(b + n, hi) - mirror_);
    // the last piece starting before `end`
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), end, [](std::size_t v, const piece& x) { return v <= x.mirror_off; });
    const std::size_t last = static_cast<std::size_t>(it - pieces_.begin());  // pieces [0, last) touch or precede the range
    while (done_ < last) {
      wait_event(api_, events_[last - 1], dl_, "copying a device buffer to host memory");
      done_ = last;
    }
  }
  /// Waits until every piece has arrived.
  void ensure_all() {
    if (!pieces_.empty() && done_ < pieces_.size()) {
      wait_event(api_, events_[pieces_.size() - 1], dl_, "copying a device buffer to host memory");
      done_ = pieces_.size();
    }
  }

 private:
  runtime_api& api_;
  const std::byte* mirror_;
  const std::vector<piece>& pieces_;
  const std::vector<event_handle>& events_;
  deadline dl_;
  std::size_t done_ = 0;
};

/// The readiness of the window the engine thread is running (null outside staged operations).
/// Staged primitives read it when they are made: the schedule's primitives are built deep in the
/// collective's run function, which takes no extra argument for it.
inline thread_local readiness* current_readiness = nullptr;

/// Per-communicator resources of the staged path, created by its first device operation and
/// destroyed after the communicator's engine has stopped (every job holds a reference).
class device_state final : public gate_owner {
 public:
  /// Resources on the caller's current device, through `api`: the streams, the gate word and both
  /// mirrors, sized up front for `staging_bytes` (mirror_capacity), so that no operation ever
  /// allocates or frees pinned memory (calls that synchronise the device) while a stream waits
  /// for gsync. The allocation waits, until `until`, for the streams held on the device to drain
  /// (cuda/stream_holds.hpp).
  device_state(runtime_api& api, std::size_t staging_bytes, std::chrono::steady_clock::time_point until)
      : api_(api), device_(api.current_device()) {
    d2h_ = api_.create_stream();
    try {
      h2d_ = api_.create_stream();
      stream_holds::instance().exclusive(device_, until, "device staging", [&] {
        gate_ = static_cast<std::uint64_t*>(api_.alloc_pinned(64));
        *gate_ = 0;
        for (auto& m : mirror_) {
          m.p = static_cast<std::byte*>(api_.alloc_pinned(mirror_capacity(staging_bytes)));
          m.bytes = mirror_capacity(staging_bytes);
        }
      });
    } catch (...) {
      release_resources();
      throw;
    }
  }
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;
  /// Releases every gate still closed, waits (bounded) until the user streams have passed their
  /// gates, then frees streams, events and pinned memory. Pinned memory a stream might still read
  /// after the bound, or that cannot be freed without waiting for streams held by other
  /// communicators, is leaked rather than freed under them.
  ~device_state() override {
    release_all();
    bool passed = true;
    try {
      api_.set_device(device_);
      const deadline dl = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      std::lock_guard lk(m_);
      for (auto& [stream, ev] : after_) {
        (void)stream;
        wait_event(api_, ev, dl, "a user stream passing its gate");
      }
    } catch (...) {
      passed = false;
    }
    if (!passed || !after_ok_) gate_ = nullptr;  // leak it: a stream may still poll it
    release_resources();
  }

  /// Bytes of each mirror made for `staging_bytes`: a window of any plan cut for it fits.
  static constexpr std::size_t mirror_capacity(std::size_t staging_bytes) noexcept { return staging_bytes + 2 * mirror_align; }

  /// Makes the mirrors hold `bytes` (a plan whose single elements exceed the staging size, as an
  /// alltoall of many ranks with a tiny GSYNC_CUDA_STAGING_BYTES): caller thread, before its gate
  /// closes; waits, until `until`, for the streams held on the device to drain.
  void ensure_capacity(std::size_t bytes, std::chrono::steady_clock::time_point until) {
    if (mirror_[0].bytes >= bytes) return;
    stream_holds::instance().exclusive(device_, until, "device staging (growing the mirrors)", [&] {
      mirror_regs_.clear();  // before the memory goes
      registered_for_ = nullptr;
      for (auto& m : mirror_) {
        if (m.p) api_.free_pinned(m.p);
        m = {};
        m.p = static_cast<std::byte*>(api_.alloc_pinned(bytes));
        m.bytes = bytes;
      }
    });
  }

  /// Registers both mirrors with the transport's RDMA adapters through `reg(p, bytes)` (the
  /// communicator's register_memory), unless they are registered at their present addresses
  /// (caller thread, no operation of this state running): sends of a window to RDMA peers then
  /// read the mirror without a copy. The registrations end before the mirrors are freed.
  template <class R>
  void register_mirrors(R&& reg) {
    if (registered_for_ == mirror_[0].p) return;
    mirror_regs_.clear();
    registered_for_ = mirror_[0].p;  // tried once per allocation, whatever the outcome
    for (auto& m : mirror_) mirror_regs_.push_back(reg(m.p, m.bytes));
  }
  /// Adapters the mirrors are registered with (0: none, or no RDMA link), and the writes that read
  /// them without a copy so far.
  std::size_t mirror_adapters() const noexcept { return mirror_regs_.empty() ? 0 : mirror_regs_.front().adapters(); }
  std::uint64_t mirror_zero_copy_writes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& r : mirror_regs_) n += r.zero_copy_writes();
    return n;
  }

  /// Set once the communicator's ranks passed the barrier after making these resources (caller
  /// thread; dispatch/device_collective.hpp).
  bool collectively_prepared = false;

  runtime_api& api() noexcept { return api_; }  ///< the runtime
  int device() const noexcept { return device_; }  ///< the device the communicator's work runs on

  /// A closed gate: its value, the operation's start event and the hold of the user's stream.
  struct closed_gate {
    std::uint64_t value = 0;
    event_handle start = nullptr;
    stream_hold hold;
  };
  /// Closes a gate on stream `s` for a new operation (caller thread): records the start event
  /// (the input is ready when it completes), makes `s` wait for the gate, and returns the gate's
  /// value, the start event and the hold of `s`. `limit` bounds a host-polled wait (see
  /// runtime_api::wait_word).
  closed_gate close_gate(cuda_stream s, std::chrono::milliseconds limit) {
    const device_guard on_device(api_, device_);  // the caller's thread: its current device is put back
    closed_gate g{0, nullptr, stream_hold(device_)};
    g.value = ++issued_;
    g.start = take_event();
    try {
      api_.record(g.start, s);
      api_.wait_word(s, gate_, g.value, limit);
    } catch (...) {
      give_event(g.start);
      release(g.value);
      throw;
    }
    try {  // an event after the gate, so destruction can wait until the stream has passed it
      std::lock_guard lk(m_);
      event_handle& after = after_for(s);
      api_.record(after, s);
    } catch (...) {
      // only destruction needs it; it then leaks the gate word rather than wait
      after_ok_ = false;
    }
    return g;
  }
  /// Opens gates up to `value` (any thread): streams waiting for them go on.
  void release(std::uint64_t value) noexcept {
    std::atomic_ref<std::uint64_t> g(*gate_);
    std::uint64_t cur = g.load(std::memory_order_relaxed);
    while (static_cast<std::int64_t>(cur - value) < 0 && !g.compare_exchange_weak(cur, value, std::memory_order_release)) {
    }
  }
  /// Opens every gate ever closed, and gates closed later up to a huge margin.
  void release_all() noexcept {
    if (gate_) release(issued_.load() + (std::uint64_t{1} << 62));
  }
  /// True once gate `value` is open (any thread).
  bool opened(std::uint64_t value) const noexcept override {
    std::atomic_ref<std::uint64_t> g(*gate_);
    return static_cast<std::int64_t>(g.load(std::memory_order_acquire) - value) >= 0;
  }
  /// The watchdog's last resort (cuda/gate_watchdog.hpp; any thread): no window copies results
  /// into device memory from now on, and every gate opens.
  void abandon() noexcept override {
    abandoned_.store(true, std::memory_order_release);
    release_all();
  }

  /// An event from the pool (any thread).
  event_handle take_event() {
    {
      std::lock_guard lk(m_);
      if (!free_events_.empty()) {
        event_handle e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    event_handle e = api_.create_event();
    std::lock_guard lk(m_);
    all_events_.push_back(e);
    return e;
  }
  /// Returns an event to the pool (its last record must no longer matter).
  void give_event(event_handle e) noexcept {
    std::lock_guard lk(m_);
    free_events_.push_back(e);
  }

  /// Runs one staged operation on the engine thread: copy-in, `run_window(w, in_mirror,
  /// out_mirror)` per window, copy-out, as the file comment says. `start` is the operation's
  /// start event (returned to the pool here); each window's waits end `limit` after it starts.
  void run(const staged_plan& plan, event_handle start, std::chrono::milliseconds limit,
           gsync::detail::function_ref<void(std::size_t, std::byte*, std::byte*)> run_window) {
    deadline dl = std::chrono::steady_clock::now() + limit;  // renewed per window
    api_.set_device(device_);
    try {
      api_.stream_wait_event(d2h_, start);  // copy-in starts after the work queued before the call
    } catch (...) {
      give_event(start);
      throw;
    }
    give_event(start);  // the wait captured its record; a new operation may record it again
    if (plan.mirror_bytes() > mirror_[0].bytes)  // staged_launch made room before closing the gate
      throw error(errc::invalid_argument, "device staging: a window of " + std::to_string(plan.mirror_bytes()) + " bytes exceeds the mirrors");
    std::size_t last = 0;
    try {
      copy_in(plan, 0);
      for (std::size_t w = 0; w < plan.windows; ++w) {
        const std::size_t b = w % 2;
        dl = std::chrono::steady_clock::now() + limit;
        if (w + 1 < plan.windows) {
          if (w + 1 >= 2) api_.stream_wait_event(d2h_, out_done_[(w + 1) % 2]);  // its mirror's copy-out first
          copy_in(plan, w + 1);
        }
        // The schedule writes this mirror from the host (receives into the output part, which no
        // copy-in covers): the copy-out of the window that used it before must have finished.
        if (w >= 2) wait_event(api_, out_done_[b], dl, "copying results to device memory");
        readiness r(api_, mirror_[b].p, in_pieces_[b], in_events_[b], dl);
        current_readiness = &r;
        struct reset {
          ~reset() { current_readiness = nullptr; }
        } guard;
        run_window(w, mirror_[b].p, mirror_[b].p + plan.out_offset());
        r.ensure_all();  // its mirror is refilled two windows on: no copy-in may still be landing
        copy_out(plan, w, b);
        last = b;
      }
      if (plan.windows) wait_event(api_, out_done_[last], dl, "copying results to device memory");
    } catch (...) {
      drain();
      throw;
    }
  }

 private:
  struct mirror {
    std::byte* p = nullptr;
    std::size_t bytes = 0;
  };
  void copy_in(const staged_plan& plan, std::size_t w) {
    const std::size_t b = w % 2;
    auto& pcs = in_pieces_[b];
    pcs.clear();
    if (plan.in.copy_in) pieces_of(plan.in, 0, w, copy_piece_bytes, pcs);
    if (plan.out.copy_in && !plan.alias) pieces_of(plan.out, plan.out_offset(), w, copy_piece_bytes, pcs);
    auto& evs = in_events_[b];
    while (evs.size() < pcs.size()) evs.push_back(take_event());
    for (std::size_t i = 0; i < pcs.size(); ++i) {
      api_.copy_async(mirror_[b].p + pcs[i].mirror_off, pcs[i].dev, pcs[i].bytes, copy_kind::device_to_host, d2h_);
      api_.record(evs[i], d2h_);
    }
  }
  void copy_out(const staged_plan& plan, std::size_t w, std::size_t b) {
    if (abandoned_.load(std::memory_order_acquire))  // the stream went on without these results
      throw error(errc::timeout, "device staging: the operation's stream was released by the watchdog (cuda/gate_watchdog.hpp)");
    out_pieces_.clear();
    if (plan.out.copy_out) pieces_of(plan.out, plan.out_offset(), w, std::size_t{1} << 62, out_pieces_);
    if (plan.in.copy_out && !plan.alias) pieces_of(plan.in, 0, w, std::size_t{1} << 62, out_pieces_);
    for (const piece& x : out_pieces_)
      api_.copy_async(x.dev, mirror_[b].p + x.mirror_off, x.bytes, copy_kind::host_to_device, h2d_);
    if (!out_done_[b]) out_done_[b] = take_event();
    api_.record(out_done_[b], h2d_);
  }
  // After a failure: waits (bounded) until the copy streams have stopped touching the mirrors and
  // the user's buffers, so a released stream never races a copy of ours.
  void drain() noexcept {
    try {
      const deadline dl = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (cuda_stream s : {d2h_, h2d_}) {
        event_handle e = take_event();
        api_.record(e, s);
        wait_event(api_, e, dl, "draining the copy streams");
        give_event(e);
      }
    } catch (...) {
      // a device error: the operation's own error says so
    }
  }
  event_handle& after_for(cuda_stream s) {
    for (auto& [stream, ev] : after_)
      if (stream == s) return ev;
    after_.emplace_back(s, api_.create_event());
    return after_.back().second;
  }
  // Streams first: their queued waits and records refer to the events and the mirrors. Pinned
  // memory is freed only while no stream is held on the device (freeing synchronises it).
  void release_resources() noexcept {
    mirror_regs_.clear();  // before the memory goes (a write still reading it holds its own)
    if (d2h_) api_.destroy_stream(d2h_);
    if (h2d_) api_.destroy_stream(h2d_);
    for (event_handle e : all_events_) api_.destroy_event(e);
    for (auto& [s, e] : after_) {
      (void)s;
      api_.destroy_event(e);
    }
    try {
      stream_holds::instance().exclusive(device_, std::chrono::steady_clock::now() + std::chrono::seconds(30), "device staging teardown",
                                         [&] {
                                           for (auto& m : mirror_)
                                             if (m.p) api_.free_pinned(m.p);
                                           if (gate_) api_.free_pinned(gate_);
                                         });
    } catch (...) {
      // streams of other communicators stayed held: the memory is leaked rather than a device wait risked
    }
  }

  runtime_api& api_;
  int device_;
  cuda_stream d2h_ = nullptr;  // copy-in
  cuda_stream h2d_ = nullptr;  // copy-out
  std::uint64_t* gate_ = nullptr;
  std::atomic<std::uint64_t> issued_{0};
  std::atomic<bool> abandoned_{false};
  bool after_ok_ = true;
  std::mutex m_;  // the event pool and after_
  std::vector<event_handle> free_events_, all_events_;
  std::vector<std::pair<cuda_stream, event_handle>> after_;
  // engine thread only:
  mirror mirror_[2];
  // caller thread, between operations:
  std::vector<memory_registration> mirror_regs_;
  const std::byte* registered_for_ = nullptr;  // mirror_[0].p when mirror_regs_ was made
  std::vector<piece> in_pieces_[2];
  std::vector<event_handle> in_events_[2];
  event_handle out_done_[2] = {nullptr, nullptr};
  std::vector<piece> out_pieces_;
};

}  // namespace gsync::cuda::detail
