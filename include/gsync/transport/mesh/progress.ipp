#pragma once
/// \file
/// Waiting: the progress loop that blocks a call until its peer has data, pumping queued sends
/// meanwhile (busy spin, then yield, then poll(2) on the links waited for by descriptor, or this
/// rank's futex doorbell for the links waited for by doorbell: `link_traits<L>::wait`).
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Blocks until `in_peer` (if >= 0) has data, pumping every queue that can move. Descriptors
// (sockets) are polled; doorbell links (shared-memory rings) are checked between polls. May return early
// (the caller re-checks and calls again). `expect`: payload bytes still to come from in_peer
// for the pending read, when known.
inline void host_mesh::wait_progress(int in_peer, deadline dl, message_id id, std::size_t expect) {
  if (aborted_.load(std::memory_order_acquire)) fail(errc::aborted, "");
  if (broken_.load(std::memory_order_acquire)) [[unlikely]] unusable();  // another thread's call failed (shared mode)
  if (hb_alarm_.load(std::memory_order_acquire)) [[unlikely]] heartbeat_lost();  // a peer stopped answering (heartbeat.hpp)
  if (const auto v = stall_.look(in_peer, id, dl); v.now) {
    if (v.mismatch) fail(errc::mismatch, *v.mismatch);
    cross_check(in_peer, id, *v.now);
  }
  const bool in_bell = in_peer >= 0 && peers_[in_peer].by_doorbell();
  if (bell_progress(in_peer)) return;
  // Peers not connected yet may dial this rank at any time (connect.ipp): the listener is watched
  // by every wait; one that depends on such a dial also asks the store whether a rank was lost.
  const bool listening = may_be_dialed();
  bool awaiting = in_peer >= 0 && unconnected(in_peer);
  const bool sock_in = in_peer >= 0 && !in_bell;
  const bool sock_out = queued_ > bell_queued_;
  const bool bell_wait = in_bell || bell_queued_ > 0;
  if (!sock_in && !sock_out) {
    if (bell_wait) bell_block(in_peer, dl, id);
    return;
  }
  if (!sock_in && bell_wait) {
    // Waiting for a same-host peer while sends to other hosts are queued (a hierarchical
    // schedule overlapping its levels, or a host's last rank in a flat ring): wait as for
    // shared memory alone, which a same-host message ends at once, handing the sockets what
    // they take between polls and sleeping on the doorbell at most a millisecond at a time. A
    // poll on the sockets instead would only wake on them and leave the same-host data waiting.
    pump_descriptors();
    bell_block(in_peer, dl, id, /*max_sleep_ms=*/1, /*sockets=*/true);
    return;
  }
  poll_set& ps = polls();  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& pfds_ = ps.fds;
  auto& pidx_ = ps.idx;
  pfds_.clear();
  pidx_.clear();
  if (sock_in) {
    pfds_.push_back({data_fd(in_peer), POLLIN, 0});
    pidx_.push_back(in_peer);
  }
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].by_doorbell() && !peers_[p].q().empty()) {
      if (unconnected(p)) awaiting = true;  // its frames wait for it to dial
      else if (p == in_peer) pfds_[0].events |= POLLOUT;
      else {
        pfds_.push_back({data_fd(p), POLLOUT, 0});
        pidx_.push_back(p);
      }
    }
  if (awaiting) check_lost_while_unconnected();
  if (listening) {
    if (acc_.is_open()) {
      pfds_.push_back({acc_.native_handle(), POLLIN, 0});
      pidx_.push_back(listener_slot);
    }
    for (auto& a : admitting_) {  // connections being admitted (connect.ipp)
      pfds_.push_back({a.s->native_handle(), POLLIN, 0});
      pidx_.push_back(admit_slot);
    }
  }
  int r = 0;
  if (opt_.spin_us > 0 || bell_wait) {  // short busy poll: a reply often comes within microseconds
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(std::max(opt_.spin_us, bell_wait ? 20 : 0));
    do {
      unlocked([&] { r = ::poll(pfds_.data(), pfds_.size(), 0); });
      if (r == 0 && bell_wait && bell_progress(in_peer)) return;
    } while (r == 0 && std::chrono::steady_clock::now() < until);
  }
  if (r == 0 && sock_in && opt_.tcp_yield_us > 0 && expect <= opt_.tcp_yield_bytes) {
    // A small message on its way: stay awake, giving the core to whoever runs (see host_options).
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(opt_.tcp_yield_us);
    do {
      unlocked([&] {
        ::sched_yield();
        r = ::poll(pfds_.data(), pfds_.size(), 0);
      });
      if (r == 0 && bell_wait && bell_progress(in_peer)) return;
    } while (r == 0 && std::chrono::steady_clock::now() < until);
  }
  // While blocked, also watch every other TCP peer for a close: one that failed (a mismatch it
  // detected, an abort, a timeout) left a record in the store, and this rank fails at once
  // instead of waiting for a message that will never come. A peer that left normally has no
  // record and is not watched again.
  const std::size_t watch_from = pfds_.size();
  if (r == 0)
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && p != in_peer && watchable(p)) {
        pfds_.push_back({peers_[p].tcp().fd(), POLLRDHUP, 0});
        pidx_.push_back(p);
      }
  // Block at most a second at a time, so that the stall monitor looks while an operation hangs.
  // Shared mode: at most 10 ms at a time (another thread may queue sends meanwhile that this
  // poll does not watch).
  const bool shared = my_lock() != nullptr;
  const int cap_ms = bell_wait ? 1 : shared ? 10 : 1000;
  if (wake_fd_ >= 0) {  // shared mode: another thread queued sends; always: the heartbeat's alarm
    pfds_.push_back({wake_fd_, POLLIN, 0});
    pidx_.push_back(-1);
  }
  if (r == 0) {
    if (shared) ++pollers_;
    unlocked([&] { r = ::poll(pfds_.data(), pfds_.size(), std::min(cap_ms, detail::ms_left(dl))); });
    if (shared) --pollers_;
  }
  if (r < 0) {
    if (errno == EINTR) return;
    fail(errc::system, "poll: " + detail::errno_text(errno));
  }
  if (r == 0) {
    if (!admitting_.empty()) admit_some();  // time limits
    if (bell_wait) {
      if (bell_progress(in_peer)) return;
      check_bell_peers(in_peer, id);
    }
    if (std::chrono::steady_clock::now() < dl) return;
    timed_out(in_peer, id);
  }
  bool admit = false;
  for (std::size_t i = 0; i < pfds_.size(); ++i) {
    if (pidx_[i] == listener_slot) {  // a peer dials
      if (pfds_[i].revents & POLLIN) accept_ready(dl);
      admit = true;
      continue;
    }
    if (pidx_[i] == admit_slot) {
      admit |= pfds_[i].revents != 0;
      continue;
    }
    if (pidx_[i] < 0) {  // the wake-up eventfd: drain it
      std::uint64_t v;
      if (pfds_[i].revents & POLLIN) [[maybe_unused]] const auto rd = ::read(wake_fd_, &v, sizeof v);
      continue;
    }
    if (i >= watch_from) {
      if (pfds_[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) closed_elsewhere(pidx_[i], id);
      continue;
    }
    if ((pfds_[i].revents & (POLLOUT | POLLERR | POLLHUP)) && !peers_[pidx_[i]].q().empty()) pump_peer(pidx_[i]);
  }
  if (admit && !admitting_.empty()) admit_some();
}

// A wait that involves only doorbell peers: spin, then sleep on this rank's doorbell (at most
// max_sleep_ms at a time, checking that the peers it waits for are still alive).
// With `sockets`, also hands queued sends on descriptor links to the kernel between polls.
inline void host_mesh::bell_block(int in_peer, deadline dl, message_id id, int max_sleep_ms, bool sockets) {
  if (opt_.spin_us > 0) {
    // Look at the ring after every pause: one pause takes 5-150 cycles depending on the CPU, and a
    // message is often ready within tens of nanoseconds; checking only every 64 pauses delayed every
    // message (benchmarks/results/from_code_comments.md).
    // The clock and the sockets are looked at every 32 checks (the clock first after them: a
    // read is not free, and most waits end sooner).
    std::chrono::steady_clock::time_point until{};
    for (;;) {
      for (int i = 0; i < 32; ++i) {
        if (bell_progress(in_peer)) return;
        relax();
      }
      if (sockets) pump_descriptors();
      const auto now = std::chrono::steady_clock::now();
      if (until == std::chrono::steady_clock::time_point{}) until = now + std::chrono::microseconds(opt_.spin_us);
      else if (now >= until) break;
    }
  }
  if (opt_.yield_us > 0) {  // give the core to whoever runs (often the rank waited for), stay awake
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(opt_.yield_us);
    do {
      unlocked([] { ::sched_yield(); });
      if (bell_progress(in_peer)) return;
      if (sockets) pump_descriptors();
    } while (std::chrono::steady_clock::now() < until);
  }
  doorbell_owner& own = *bell_owner();  // a doorbell peer implies this rank's segment
  auto& bell = own.bell();
  const std::uint32_t seen = shm::arm(bell, own.light());
  if (bell_progress(in_peer) || aborted_.load(std::memory_order_acquire) || broken_.load(std::memory_order_acquire) ||
      hb_alarm_.load(std::memory_order_acquire))
    return shm::disarm(bell);
  // A peer that fails or leaves rings this bell; one killed outright is noticed by the liveness
  // check after the timed sleep. Shared mode: at most 10 ms (another thread may queue sends).
  const int ms = std::min(my_lock() ? std::min(max_sleep_ms, 10) : max_sleep_ms, detail::ms_left(dl));
  bool rang = false;
  unlocked([&] { rang = !shm::sleep(bell, seen, ms); });
  if (bell_progress(in_peer)) {
    // Progress after a full sleep during which nobody rang: a wake-up was lost (see shm.hpp),
    // or the data came in the few nanoseconds between the sleep's end and this check.
    if (!rang && bell.bell.load(std::memory_order_relaxed) == seen) ++shm_late_wakeups_;
    return;
  }
  check_bell_peers(in_peer, id);
  if (sockets) watch_idle_sockets(id);
  // A peer on another host may be dialing this rank (connect.ipp): taken after each sleep.
  if (may_be_dialed()) {
    accept_ready(dl);
    if (!admitting_.empty()) admit_some();
  }
  if (std::chrono::steady_clock::now() >= dl) timed_out(in_peer, id);
}

// Checks, without waiting, whether a TCP peer with nothing queued has closed its connection (a
// wait on the sockets watches them the same way): a wait for a same-host peer with sends to
// other hosts queued calls it after each sleep, so a failed peer on another host is noticed
// within a millisecond or so, not at the timeout.
inline void host_mesh::watch_idle_sockets(message_id id) {
  poll_set& ps = polls();  // (no structured binding: clang 14 cannot capture one in a lambda)
  auto& pfds_ = ps.fds;
  auto& pidx_ = ps.idx;
  pfds_.clear();
  pidx_.clear();
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && watchable(p)) {
      pfds_.push_back({peers_[p].tcp().fd(), POLLRDHUP, 0});
      pidx_.push_back(p);
    }
  if (pfds_.empty() || ::poll(pfds_.data(), pfds_.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < pfds_.size(); ++i)
    if (pfds_[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) closed_elsewhere(pidx_[i], id);
}

}  // namespace gsync::transport
