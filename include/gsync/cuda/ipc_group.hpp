#pragma once
/// \file
/// `cuda::ipc::group`: the ranks of a communicator that read each other's GPU memory directly, as
/// one rank holds them: its exported arena (cuda/ipc_plan.hpp), its peers' arenas (their pointers
/// when they run in this process, mapped through their IPC handles otherwise), every rank's control
/// page (cuda/ipc_counters.hpp), and the watchdog that turns a dead, stuck or mismatched peer into
/// `gsync::error` on every survivor. Set-up and teardown code: nothing here touches elements.
///
/// Set-up, collective over the communicator (dispatch/ipc_collective.hpp drives it):
/// 1. `group(...)` makes the arena and the page and fills this rank's `peer_record` (a resource it
///    cannot make is recorded with its reason, never thrown);
/// 2. the records are exchanged; `group_refusal` of them is the same on every rank: empty, or
///    the reason the communicator keeps to host staging;
/// 3. `connect(all)` maps the peers' pages and arenas; the ranks exchange how that went, and if
///    any rank failed every rank `disconnect`s, then all pass a barrier before freeing anything;
/// 4. `finish()` removes the page's name.
/// Teardown (`~group`): wait for this rank's last step, close the peers' arenas, say so in the
/// page, and free the arena once every live peer has said so (an importer must close a handle
/// before its exporter frees the memory).

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/ipc_counters.hpp"
#include "gsync/cuda/ipc_peer.hpp"
#include "gsync/cuda/ipc_plan.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/detail/function_ref.hpp"

namespace gsync::cuda::ipc {

/// Settings of the CUDA IPC path (core/config.hpp reads them from GSYNC_CUDA_IPC_*).
using settings = cuda_ipc_settings;

/// Steps [first, last] one operation enqueued (empty when last < first).
struct step_range {
  std::uint64_t first = 1;  ///< first step
  std::uint64_t last = 0;   ///< last step
};

/// One rank's view of its IPC group.
class group {
 public:
  /// Step 1 of set-up: this rank's arena, page and record. \param kernels whether IPC kernels are
  /// installed (without them the record says so and the group does not form).
  /// `limit` bounds the wait of its allocations for streams held on the device (cuda/stream_holds.hpp).
  group(runtime_api& api, int rank, int size, const settings& s, bool kernels, logger log,
        std::chrono::milliseconds limit = std::chrono::seconds(60))
      : api_(api), rank_(rank), size_(size), log_(std::move(log)), limit_(limit) {
    rec_.rank = rank;
    rec_.enabled = s.enabled ? 1 : 0;
    layout_.slot_bytes = s.slot_bytes;
    rec_.slot_bytes = s.slot_bytes;
    fill_process(rec_);
    if (!s.enabled) {
      rec_.refuse("GSYNC_CUDA_IPC_DISABLE=1");
      return;
    }
    if (!kernels) {
      rec_.refuse("no CUDA IPC kernels in this program (compile a file that includes gsync's collectives with nvcc)");
      return;
    }
    try {
      rec_.device = api_.identity();
      device_ = rec_.device.ordinal;
      own_page_ = shared_page::create();
      set_field(rec_.page, own_page_->name());
      exclusive("CUDA IPC set-up", [&] { arena_ = static_cast<std::byte*>(api_.alloc_exportable(layout_.bytes())); });
      rec_.handle = api_.ipc_export(arena_);
      rec_.address = reinterpret_cast<std::uint64_t>(arena_);
      rec_.ready = 1;
    } catch (const std::exception& e) {
      rec_.refuse(e.what());
    }
  }
  group(const group&) = delete;
  group& operator=(const group&) = delete;
  ~group() { teardown(); }

  /// This rank's record (to exchange).
  const peer_record& record() const noexcept { return rec_; }

  /// Step 3 of set-up: maps every peer's page and arena (`all`: every rank's record, by rank; the
  /// group formed, `group_refusal(all)` empty). Empty on success, else why not (this rank's part).
  std::string connect(std::span<const peer_record> all) {
    layout_.slot_bytes = group_slot_bytes(all);
    peers_.clear();
    peers_.resize(static_cast<std::size_t>(size_));
    try {
      for (int p = 0; p < size_; ++p) {
        auto& pr = peers_[static_cast<std::size_t>(p)];
        const auto& r = all[static_cast<std::size_t>(p)];
        pr.pid = r.pid;
        pr.page_ref = p == rank_ ? own_page_ : shared_page::open(field(r.page));
        exclusive("CUDA IPC set-up", [&] { pr.page_ref->register_with(api_, device_); });
        pr.page = pr.page_ref->base();
        if (p == rank_) {
          pr.arena = arena_;
          pr.access = peer_access::same_process;
        } else {
          const auto d = decide(rec_, r);
          pr.access = d.how;
          if (d.how == peer_access::ipc) {
            const auto t0 = std::chrono::steady_clock::now();
            pr.arena = static_cast<std::byte*>(api_.ipc_open(r.handle));
            pr.opened = true;
            open_us_ = std::max(open_us_, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
          } else {
            enable_peer_access(api_, device_, rec_, r, who(p));  // same process: its pointer (it cannot open its own handles)
            pr.arena = reinterpret_cast<std::byte*>(r.address);
          }
        }
      }
    } catch (const std::exception& e) {
      disconnect();
      return who(rank_) + ": " + e.what();
    }
    try {
      exclusive("CUDA IPC set-up", [&] { local_done_ = static_cast<std::uint64_t*>(api_.alloc_pinned(sizeof(std::uint64_t))); });
      *local_done_ = 0;
      cancel_ = api_.device_view(&page(rank_).abort_by);
    } catch (const std::exception& e) {
      disconnect();
      return who(rank_) + ": " + e.what();
    }
    connected_ = true;
    return {};
  }

  /// Undoes connect (a failed set-up; the caller then passes a barrier before destroying).
  void disconnect() noexcept {
    if (local_done_) {
      try {
        exclusive("CUDA IPC teardown", [&] { api_.free_pinned(local_done_); });
      } catch (...) {
        // streams of other communicators stay held: the word is leaked rather than a device wait risked
      }
    }
    local_done_ = nullptr;
    for (auto& pr : peers_) {
      if (pr.opened) api_.ipc_close(pr.arena);
      pr = peer{};
    }
    peers_.clear();
    connected_ = false;
  }

  /// Step 4 of set-up: every peer mapped this rank's page; its name can go.
  void finish() noexcept { own_page_->unlink(); }

  // --- what the schedules (cuda/ipc_schedule.hpp) use ---
  runtime_api& api() const noexcept { return api_; }                  ///< the runtime
  int device() const noexcept { return device_; }                     ///< this rank's device
  /// Names the members by their communicator ranks in messages (`ranks[i]`: group rank i), where
  /// the group is part of its communicator (the ranks of one host).
  void name_members(std::vector<int> ranks) { names_ = std::move(ranks); }
  /// "rank R": member `p` as messages name it (its communicator rank).
  std::string who(int p) const {
    return "rank " + std::to_string(static_cast<std::size_t>(p) < names_.size() ? names_[static_cast<std::size_t>(p)] : p);
  }
  int rank() const noexcept { return rank_; }                         ///< this rank
  int size() const noexcept { return size_; }                         ///< ranks in the group
  const arena_layout& layout() const noexcept { return layout_; }     ///< arena geometry
  /// Rank `r`'s arena, as this rank addresses it.
  std::byte* arena(int r) const noexcept { return peers_[static_cast<std::size_t>(r)].arena; }
  /// Rank `r`'s control page.
  control_page& page(int r) const noexcept { return *static_cast<control_page*>(peers_[static_cast<std::size_t>(r)].page); }
  /// The next step number (the caller's thread; steps number chunks, consecutively on all ranks).
  std::uint64_t next_step() noexcept { return ++step_; }
  /// Records that this rank's stream will have written `done = step` once its work so far ran, and
  /// what it enqueued at `step` (checked against the peers' by the watchdog).
  void enqueued(std::uint64_t step, std::uint64_t signature) noexcept {
    auto& e = page(rank_).sigs[step % signature_slots];  // a sequence lock: step 0 while the entry changes
    word(e.step).store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    word(e.sig).store(signature, std::memory_order_relaxed);
    word(e.step).store(step, std::memory_order_release);
    enqueued_.store(step, std::memory_order_release);
  }
  /// What this rank's kernels read before touching a peer's memory (cuda/ipc_api.hpp): its abort
  /// word, set on every rank's page before a failure lets streams go on past their waits.
  const std::uint64_t* cancel_word() const noexcept { return cancel_; }
  /// The word this rank's stream sets to the last step of each operation it finishes (pinned host
  /// memory private to this rank).
  std::uint64_t* local_done_word() const noexcept { return local_done_; }
  /// The last step at which this rank's stream waited for every peer's `arrive`.
  std::uint64_t all_arrived_step() const noexcept { return all_arrived_; }
  /// Records that the stream waits for every peer's `arrive` at `step`.
  void set_all_arrived_step(std::uint64_t step) noexcept { all_arrived_ = step; }
  /// Longest cudaIpcOpenMemHandle of set-up, in microseconds.
  double open_us() const noexcept { return open_us_; }

  /// Waits until the work of `steps`, ended by event `done` on this rank's stream, has run; checks
  /// meanwhile that every peer enqueued the same operations, that none reported a failure or died,
  /// that the steps move within `limit`, and that this rank was not aborted. On a failure: reports it to every rank, releases every
  /// stream (peers' counters written forward) and throws it (`what` names the operation).
  /// `aborted` says, when asked, whether the communicator failed otherwise (the application
  /// aborted it, its heartbeat lost a peer): the kind and the words of that failure.
  void watch(event_handle done, step_range steps, const char* what, std::chrono::milliseconds limit,
             gsync::detail::function_ref<std::optional<std::pair<errc, std::string>>()> aborted) {
    using clock = std::chrono::steady_clock;
    auto last_move = clock::now();
    auto next_pid_check = last_move;
    std::uint64_t seen = progress_sum();
    watched_last_.store(steps.last, std::memory_order_relaxed);
    std::uint64_t verified = steps.first;  // first step whose signatures are not yet compared
    for (unsigned spins = 0;; ++spins) {
      bool complete = false;
      try {
        complete = api_.query(done);
      } catch (const error& e) {
        fail(e.kind(), std::string(what) + " over CUDA IPC: " + e.what(), what);
      }
      check_abort(what);
      if (auto reason = aborted()) fail(reason->first, reason->second, what);
      verified = check_signatures(verified, steps.last, what);
      if (complete && verified > steps.last) return;
      if (complete && verified <= steps.last) {  // peers' entries were overwritten: too far ahead to compare
        bool stale = true;
        for (int p = 0; p < size_ && stale; ++p)
          if (p != rank_) stale = word(page(p).sigs[verified % signature_slots].step).load(std::memory_order_acquire) > verified;
        if (stale) return;
      }
      const auto now = clock::now();
      if (const std::uint64_t s = progress_sum(); s != seen) {
        seen = s;
        last_move = now;
      }
      if (now >= next_pid_check) {
        next_pid_check = now + std::chrono::milliseconds(50);
        for (int p = 0; p < size_; ++p)
          if (peers_[static_cast<std::size_t>(p)].access == peer_access::ipc && process_gone(peers_[static_cast<std::size_t>(p)].pid))
            fail(errc::peer_lost, std::string(what) + " over CUDA IPC: " + who(p) + " (pid " +
                                      std::to_string(peers_[static_cast<std::size_t>(p)].pid) + ") exited", what);
      }
      if (now - last_move > limit) fail(errc::timeout, std::string(what) + " over CUDA IPC: " + stall_report(steps, limit), what);
      if (spins < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spins < 1024 ? 20 : 200));
    }
  }

  /// Reports a failure of this rank (`code`, `msg`) to every rank of the group, unless one was
  /// reported already, and releases this rank's stream (see `watch`).
  void report(errc code, const std::string& msg) noexcept {
    if (!connected_) return;
    const bool grace = code != errc::timeout && code != errc::peer_lost;
    if (reported_.exchange(true)) return release(grace);  // this rank's report is written once (peers may be reading it)
    auto& mine = page(rank_);
    set_field(mine.why, msg);
    const std::uint64_t v = (static_cast<std::uint64_t>(code) << 32) | static_cast<std::uint64_t>(rank_ + 1);
    for (int p = 0; p < size_; ++p) {
      std::uint64_t zero = 0;
      word(page(p).abort_by).compare_exchange_strong(zero, v, std::memory_order_acq_rel);
    }
    release(grace);
  }

  /// True once this rank or a peer reported a failure.
  bool failed() const noexcept { return word(page(rank_).abort_by).load(std::memory_order_acquire) != 0; }

 private:
  struct peer {
    peer_access access = peer_access::none;
    std::int32_t pid = 0;
    std::byte* arena = nullptr;
    void* page = nullptr;
    std::shared_ptr<shared_page> page_ref;  // this process's mapping of its page
    bool opened = false;
  };

  /// True once this rank's stream finished the operation that ends at `step`.
  bool stream_passed(std::uint64_t step) const noexcept { return reached(word(*local_done_).load(std::memory_order_acquire), step); }

  /// True when process `pid` has exited (gone, or a zombie not yet reaped by its parent).
  static bool process_gone(int pid) noexcept {
    if (::kill(pid, 0) != 0) return errno == ESRCH;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    std::FILE* f = std::fopen(path, "r");
    if (!f) return false;
    char buf[512] = {};
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char* paren = std::strrchr(buf, ')');  // "pid (comm) S ...": the state follows the command name
    return n && paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
  }

  std::uint64_t progress_sum() const noexcept {
    std::uint64_t s = 0;
    for (int p = 0; p < size_; ++p) {
      auto& pg = page(p);
      s += word(pg.arrive).load(std::memory_order_relaxed) + word(pg.reduced).load(std::memory_order_relaxed) +
           word(pg.done).load(std::memory_order_relaxed);
    }
    return s;
  }

  /// Reads a signature entry consistently: its step (0 while being written) and signature.
  static std::uint64_t read_entry(control_page::signature_entry& e, std::uint64_t& sig) noexcept {
    const std::uint64_t s1 = word(e.step).load(std::memory_order_acquire);
    sig = word(e.sig).load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t s2 = word(e.step).load(std::memory_order_relaxed);
    return s1 == s2 ? s1 : 0;
  }

  /// Compares the signatures of steps from..last with every peer's, as far as the peers have
  /// enqueued them; returns the first step not compared yet.
  std::uint64_t check_signatures(std::uint64_t from, std::uint64_t last, const char* what) {
    for (; from <= last; ++from) {
      std::uint64_t my_sig = 0;
      if (read_entry(page(rank_).sigs[from % signature_slots], my_sig) != from) continue;  // this rank's host is far ahead
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        std::uint64_t sig = 0;
        const std::uint64_t at = read_entry(page(p).sigs[from % signature_slots], sig);
        if (at < from) return from;  // not enqueued there yet (or being written)
        if (at == from && sig != my_sig)
          fail(errc::mismatch, std::string(what) + " over CUDA IPC: " + who(p) +
                                   " enqueued a different operation at step " + std::to_string(from) +
                                   " (collective, element type, operator, count or schedule differ; every rank must call the same "
                                   "device collectives in the same order with the same arguments)",
               what);
      }
    }
    return from;
  }

  void check_abort(const char* what) {
    const std::uint64_t a = word(page(rank_).abort_by).load(std::memory_order_acquire);
    if (a == 0) return;
    const int by = static_cast<int>((a & 0xffffffffu) - 1);
    const auto code = static_cast<errc>(a >> 32);
    std::string why = by == rank_ ? std::string(page(rank_).why, strnlen(page(rank_).why, sizeof page(rank_).why))
                                  : std::string(page(by).why, strnlen(page(by).why, sizeof page(by).why));
    release(code != errc::timeout && code != errc::peer_lost);
    throw error(code, by == rank_ ? why : std::string(what) + " over CUDA IPC: " + who(by) + " reported: " + why);
  }

  [[noreturn]] void fail(errc code, const std::string& msg, const char* what) {
    report(code, msg);
    check_abort(what);  // throws the first report (this one, or a peer's that came first)
    throw error(code, msg);
  }

  /// Lets this rank's stream finish: if it has not passed its last step after a grace period (a
  /// peer that mismatched or is merely slow may still be writing what it waits for; forcing it on
  /// at once would read that mid-write), writes every peer's counters forward, past every step
  /// enqueued, until it has passed the operation being watched (a live but slow peer may still
  /// write smaller values), bounded.
  /// \param grace wait first (a mismatch or an abort: peers may be mid-write); not for a stall or
  /// a dead peer, where nothing will come.
  void release(bool grace) noexcept {
    if (released_.exchange(true)) return;
    // Waits for the stream to pass the operation being watched, not everything enqueued: a later
    // part of the stream may wait for a job queued behind this one (the staged level of the
    // hierarchical allreduce), which runs, or is dropped, only after this returns.
    const std::uint64_t enq = enqueued_.load(std::memory_order_acquire), watched = watched_last_.load(std::memory_order_relaxed);
    const std::uint64_t last = watched ? std::min(watched, enq) : enq;
    const std::uint64_t forward = enq + (std::uint64_t{1} << 40);  // also frees the steps enqueued after `last`
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + std::chrono::seconds(10);
    for (bool forced = false;;) {
      if (stream_passed(enq) || (forced && stream_passed(last))) return;
      const auto now = std::chrono::steady_clock::now();
      if (now > until) return;
      if (!grace || now - start >= std::chrono::milliseconds(200)) {
        for (int p = 0; p < size_; ++p) {
          if (p == rank_) continue;
          auto& pg = page(p);
          for (std::uint64_t* w : {&pg.arrive, &pg.reduced, &pg.done}) word(*w).store(forward, std::memory_order_release);
        }
        forced = true;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::string stall_report(step_range steps, std::chrono::milliseconds limit) const {
    std::string r = "no step moved for " + std::to_string(limit.count()) + " ms while waiting for steps " +
                    std::to_string(steps.first) + ".." + std::to_string(steps.last) + ";";
    for (int p = 0; p < size_; ++p) {
      const auto& pg = page(p);
      r += " " + who(p) + (p == rank_ ? " (this)" : "") + " arrived " +
           std::to_string(word(const_cast<std::uint64_t&>(pg.arrive)).load()) + ", done " +
           std::to_string(word(const_cast<std::uint64_t&>(pg.done)).load()) + ";";
    }
    return r + " a rank behind has not called the operation, or its stream is blocked by other work";
  }

  void teardown() noexcept {
    if (connected_) {
      // Own stream first: it reads the peers' arenas until its last step.
      const std::uint64_t last = enqueued_.load(std::memory_order_acquire);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stream_passed(last) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (!stream_passed(last)) {
        // Still waiting for peers: cancel (its kernels then read nothing) and let it go; if even
        // that does not get it past its last step, nothing it may still touch is unmapped or freed.
        report(errc::aborted, who(rank_) + ": its communicator was destroyed while device operations were still queued");
        if (!stream_passed(last)) {
          log_.warn("CUDA IPC teardown: this rank's stream did not pass its last step; the peers' arenas stay mapped and its "
                    "own memory allocated rather than unmapped or freed under it");
          arena_ = nullptr;
          local_done_ = nullptr;
          (void)new std::vector<peer>(std::move(peers_));  // leaked on purpose: mappings and pages the stream may touch
          connected_ = false;
          return;
        }
      }
      auto& me = page(rank_);
      for (auto& pr : peers_)
        if (pr.opened) {
          api_.ipc_close(pr.arena);
          pr.opened = false;
        }
      word(me.closed).store(1, std::memory_order_release);
      bool all_closed = false;
      while (!all_closed) {
        all_closed = true;
        for (int p = 0; p < size_; ++p) {
          if (p == rank_ || word(page(p).closed).load(std::memory_order_acquire) != 0) continue;
          const auto& pr = peers_[static_cast<std::size_t>(p)];
          if (pr.access == peer_access::ipc && process_gone(pr.pid)) continue;  // its mappings died with it
          all_closed = false;
        }
        if (all_closed) break;
        if (std::chrono::steady_clock::now() >= until) {
          log_.warn("CUDA IPC teardown: a peer did not release this rank's arena within 30 s; the arena is left allocated "
                    "rather than freed under it");
          arena_ = nullptr;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      disconnect();
    }
    if (arena_) {
      try {
        exclusive("CUDA IPC teardown", [&] { api_.free_exportable(arena_); });
      } catch (...) {
        log_.warn("CUDA IPC teardown: streams of other communicators stayed held; the arena is left allocated rather than freed "
                  "(freeing synchronises the device)");
      }
    }
    arena_ = nullptr;
  }

  // Runs `fn` (calls that synchronise the device) while no stream is held on this rank's device.
  void exclusive(const char* what, gsync::detail::function_ref<void()> fn) {
    gsync::cuda::detail::stream_holds::instance().exclusive(device_, std::chrono::steady_clock::now() + limit_, what, fn);
  }

  runtime_api& api_;
  int rank_ = 0, size_ = 1;
  std::vector<int> names_;  // communicator rank of each member (empty: the same as the group rank)
  logger log_;
  std::chrono::milliseconds limit_;
  int device_ = 0;
  arena_layout layout_;
  peer_record rec_;
  std::shared_ptr<shared_page> own_page_;
  std::byte* arena_ = nullptr;
  std::vector<peer> peers_;
  bool connected_ = false;
  std::atomic<bool> released_{false};  // a failure released the streams (once)
  std::atomic<bool> reported_{false};  // this rank wrote its failure report
  std::uint64_t step_ = 0;
  std::uint64_t all_arrived_ = 0;  // see all_arrived_step()
  std::uint64_t* local_done_ = nullptr;  // see local_done_word()
  const std::uint64_t* cancel_ = nullptr;  // see cancel_word()
  std::atomic<std::uint64_t> enqueued_{0};
  std::atomic<std::uint64_t> watched_last_{0};  // last step of the operation `watch` observes now (0: none)
  double open_us_ = 0;
};

}  // namespace gsync::cuda::ipc
