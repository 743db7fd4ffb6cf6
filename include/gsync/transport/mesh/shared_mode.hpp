#pragma once
/// \file
/// `transport::shared_mode`: one endpoint (transport::host_mesh, transport/mesh/host_mesh.hpp)
/// shared by several communicators, possibly from several threads (`transport::tcp::split`). It
/// owns the switch to shared mode, the endpoint's mutex (every call takes it through `lock`,
/// call_lock.hpp, and lets it go while it waits or a reduction consumes a piece), the condition
/// variable readers wait on, and per peer whether a thread reads its stream and the frames of
/// other communicators read off it and set aside for their owners (its inbox).
///
/// One thread at a time reads a peer's stream (`claim`); a reader that meets a frame of another
/// communicator sets it aside whole (`stash`), and that communicator's reader takes it before
/// reading the stream itself (`take`), so that per peer and communicator the stream's order is
/// kept. Before `share()` nothing is locked and nothing is set aside: `lock` costs one load and
/// one test, and the data path calls nothing else here.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "gsync/transport/frame.hpp"
#include "gsync/transport/mesh/call_lock.hpp"
#include "gsync/transport/mesh/waiter.hpp"

namespace gsync::transport {

/// A frame of another communicator than the reader's, set aside whole for its owner.
struct stashed_frame {
  frame_header h;
  std::vector<std::byte> data;
};

class shared_mode {
 public:
  /// The endpoint's lock for one call: taken in shared mode, unless this thread holds it already.
  struct lock : mesh_call_lock {
    explicit lock(shared_mode& s) : mesh_call_lock(&s, s.on_, s.mu_) {}
  };
  /// A thread's claim on reading one peer's stream (`claim`); let go when destroyed.
  class read_claim {
   public:
    read_claim() = default;
    read_claim(const read_claim&) = delete;
    read_claim& operator=(const read_claim&) = delete;
    ~read_claim() {
      if (s_) s_->release(peer_);
    }

   private:
    friend class shared_mode;
    shared_mode* s_ = nullptr;
    int peer_ = -1;
  };

  shared_mode() = default;
  shared_mode(const shared_mode&) = delete;
  shared_mode& operator=(const shared_mode&) = delete;

  /// Makes room for the state of `peers` ranks (set-up, before any call).
  void place(int peers) { peers_.resize(static_cast<std::size_t>(peers)); }
  /// From now on every call takes the endpoint's lock.
  void share() noexcept { on_.store(true, std::memory_order_release); }
  /// The lock this thread holds on the endpoint (shared mode), else null.
  std::unique_lock<std::mutex>* held() const noexcept { return mesh_call_lock::held_on(this); }
  /// Runs f with this thread's lock on the endpoint released (if it holds it).
  template <class F>
  void unlocked(F&& f) {
    std::unique_lock<std::mutex>* l = held();
    if (!l) {
      f();
      return;
    }
    l->unlock();
    struct relock {
      std::unique_lock<std::mutex>* l;
      ~relock() { l->lock(); }
    } again{l};
    f();
  }
  /// One pause of a spin, the lock released meanwhile in shared mode.
  void relax() noexcept {
    if (std::unique_lock<std::mutex>* l = held()) {
      l->unlock();
      waiter::cpu_relax();
      l->lock();
    } else {
      waiter::cpu_relax();
    }
  }
  /// Wakes every thread waiting for a stream or a frame set aside (a failure ended the endpoint).
  void wake_all() noexcept { cv_.notify_all(); }

  // What follows is called with this thread's lock held (shared mode).

  /// Waits until this thread may read `peer`'s stream: returns the index in the peer's inbox of a
  /// frame of communicator `comm` set aside by another reader (to be taken first), or -1 after
  /// handing the stream to `claim`. `go_on()` runs before each wait (at most 50 ms); it throws to
  /// end the wait (a failure, the deadline).
  template <class GoOn>
  long claim(int peer, std::uint64_t comm, read_claim& claim, GoOn&& go_on) {
    peer_state& c = peers_[static_cast<std::size_t>(peer)];
    for (;;) {
      for (std::size_t i = 0; i < c.inbox.size(); ++i)
        if (c.inbox[i].h.fp.comm == comm) return static_cast<long>(i);
      if (!c.reading) {
        c.reading = true;
        claim.s_ = this, claim.peer_ = peer;
        return -1;
      }
      // Another thread reads this peer's stream; it sets a frame of ours aside if it meets one.
      go_on();
      cv_.wait_for(*held(), std::chrono::milliseconds(50));
    }
  }
  /// The header of the first frame of communicator `comm` set aside in `peer`'s inbox, else null.
  const frame_header* first_of(int peer, std::uint64_t comm) const noexcept {
    for (const stashed_frame& f : peers_[static_cast<std::size_t>(peer)].inbox)
      if (f.h.fp.comm == comm) return &f.h;
    return nullptr;
  }
  /// True while a thread reads `peer`'s stream (always false before `share()`).
  bool reading(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].reading; }
  /// Removes the frame at `at` in `peer`'s inbox (an index from `claim`) and returns it.
  stashed_frame take(int peer, long at) {
    auto& box = peers_[static_cast<std::size_t>(peer)].inbox;
    stashed_frame s = std::move(box[static_cast<std::size_t>(at)]);
    box.erase(box.begin() + at);
    return s;
  }
  /// Sets `f`, read whole off `peer`'s stream, aside for its communicator's reader.
  void stash(int peer, stashed_frame f) {
    peers_[static_cast<std::size_t>(peer)].inbox.push_back(std::move(f));
    cv_.notify_all();
  }
  /// Drops the frames set aside for communicator `comm` (it was destroyed).
  void forget(std::uint64_t comm) {
    for (auto& c : peers_) std::erase_if(c.inbox, [&](const stashed_frame& s) { return s.h.fp.comm == comm; });
  }

 private:
  struct peer_state {
    std::deque<stashed_frame> inbox;  // whole frames of other communicators read off the stream
    bool reading = false;             // a thread reads a frame off the stream
  };
  void release(int peer) noexcept {
    peers_[static_cast<std::size_t>(peer)].reading = false;
    cv_.notify_all();
  }

  std::atomic<bool> on_{false};  // shared mode (share())
  std::mutex mu_;                // the endpoint's state
  std::condition_variable cv_;   // a stream's reader let go, or a frame was set aside
  std::vector<peer_state> peers_;
};

}  // namespace gsync::transport
