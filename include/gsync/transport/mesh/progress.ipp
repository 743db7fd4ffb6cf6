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
// for the pending read, when known. What this wait watches besides the links is asked of those
// who own it: failures and the stall monitor (checkpoint), dials of peers not connected yet
// (watch_dialers / serve_dialers, connect.ipp), closes of idle peers (watch_closes).
inline void host_mesh::wait_progress(int in_peer, deadline dl, message_id id, std::size_t expect) {
  checkpoint(in_peer, id, dl);
  // A peer whose data link is not its TCP connection (verbs) closed that connection, and the caller
  // found no data after it: the peer is gone (it writes all its data before it closes).
  if (in_peer >= 0 && peers_[in_peer].tcp().seen_closed() && separate_control(in_peer)) [[unlikely]]
    lost_while_receiving(in_peer, id, link_io::closed);
  if (bell_progress(in_peer)) return;
  const bool in_bell = in_peer >= 0 && peers_[in_peer].by_doorbell();
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
  waiter::poll_set& ps = waiter::thread_set();
  ps.clear();
  // A wait for queued sends only (a flush) that the pumps before the sleep moved on is over: the
  // caller looks again (sleeping instead cost up to the poll's cap with nothing to wait for).
  if (watch_links(ps, in_peer) && in_peer < 0) return;
  watch_dialers(ps, in_peer);
  const auto unl = [this](auto&& f) { shared_.unlocked(f); };
  const auto bell_came = [&] { return bell_wait && bell_progress(in_peer); };
  bool ended = false;
  int r = 0;
  if (opt_.spin_us > 0 || bell_wait)  // short busy poll: a reply often comes within microseconds
    r = waiter_.spin(ps, std::chrono::microseconds(std::max(opt_.spin_us, bell_wait ? 20 : 0)), false, unl, bell_came, ended);
  if (ended) return;
  if (r == 0 && sock_in && opt_.tcp_yield_us > 0 && expect <= opt_.tcp_yield_bytes)  // a small message on its way (see host_options)
    r = waiter_.spin(ps, std::chrono::microseconds(opt_.tcp_yield_us), true, unl, bell_came, ended);
  if (ended) return;
  const std::size_t watch_from = ps.size();
  if (r == 0) {
    watch_closes(ps, in_peer);
    // At most a second at a time, so that the stall monitor looks while an operation hangs; shared
    // mode: 10 ms (another thread may queue sends meanwhile that this poll does not watch).
    const bool shared = shared_.held() != nullptr;
    const int cap_ms = bell_wait ? 1 : shared ? 10 : 1000;
    r = waiter_.block(ps, std::min(cap_ms, detail::ms_left(dl)), shared, unl);
  }
  if (r < 0) {
    if (errno == EINTR) return;
    fail(errc::system, "poll: " + detail::errno_text(errno));
  }
  if (r == 0) {
    serve_dialers(nullptr, dl);  // their time limits
    if (bell_wait) {
      if (bell_progress(in_peer)) return;
      check_bell_peers(in_peer, id);
    }
    if (std::chrono::steady_clock::now() < dl) return;
    timed_out(in_peer, id);
  }
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const int who = ps.idx[i];
    const short ev = ps.fds[i].revents;
    if (who == waiter::wake_slot) {
      if (ev & POLLIN) waiter_.drain();
    } else if (who < 0) {
      continue;  // the dialers' (serve_dialers below)
    } else if (i >= watch_from) {
      if (ev & POLLIN) take_link_events(who);  // only event descriptors are watched for input here
      if (ev & (POLLRDHUP | POLLHUP | POLLERR)) {
        // A peer whose data link is not its TCP connection (verbs) closed that connection while
        // frames for it wait for room in its ring: it takes no more (a TCP peer's closed socket
        // fails the send instead; this wait's descriptor for it, a completion channel, never would).
        if (separate_control(who) && !peers_[who].q().empty()) {
          peers_[who].tcp().mark_closed();
          lost_unless_taken(who, id);
        }
        closed_elsewhere(who, id);
      }
    } else if ((ev & (POLLOUT | POLLERR | POLLHUP | (data_link(who).room_by_read ? POLLIN : 0))) && !peers_[who].q().empty()) {
      pump_peer(who);
    }
  }
  serve_dialers(&ps, dl);
}

// The entry of every wait: a failure meanwhile (an abort, another thread's in shared mode, the
// heartbeat's alarm) ends it; the stall monitor looks at how long it has waited.
inline void host_mesh::checkpoint(int in_peer, message_id id, deadline dl) {
  if (fs_.any()) [[unlikely]] failed_meanwhile();
  const auto v = stall_.look(in_peer, id, dl);
  if (v.withdrawn) [[unlikely]] rare_->erase_stall_record(*this);
  if (v.now) {
    if (v.due) [[unlikely]] rare_->stall_report(*this, in_peer, id, dl, *v.now);
    cross_check(in_peer, id, *v.now);
  }
}

// The links a wait on descriptors watches: in_peer's for its data, and every descriptor link with
// queued sends for room. True when pumping a link on the way moved bytes.
inline bool host_mesh::watch_links(waiter::poll_set& ps, int in_peer) {
  if (in_peer >= 0) ps.add(data_fd(in_peer), POLLIN, in_peer);
  bool moved = false;
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].by_doorbell() && !peers_[p].q().empty() && !unconnected(p)) {  // unconnected: its frames wait for it to dial
      // A completion channel signals only completions that come after the link asked for one:
      // room that another call took meanwhile is used, and the channel armed, before the sleep.
      if (data_link(p).room_by_read && ((moved = pump_peer(p) || moved), peers_[p].q().empty())) continue;
      // Its TCP connection closed before (seen while idle): the frames left will never be taken.
      if (separate_control(p) && peers_[p].tcp().seen_closed()) [[unlikely]] {
        lost_unless_taken(p, message_id{});
        if (peers_[p].q().empty()) {
          moved = true;
          continue;
        }
      }
      const short room = data_link(p).room_by_read ? POLLIN : POLLOUT;  // a completion channel: room comes as a completion
      if (p == in_peer) ps.fds[0].events |= room;
      else ps.add(data_fd(p), room, p);
    }
  return moved;
}

// A peer whose data link is not its TCP connection (verbs) closed that connection: frames for it
// not wholly written after one more pump were not taken, and it takes no more (a TCP peer's
// closed socket fails the send instead; a completion channel never would). Frames written and
// waiting for their completions are left to them (the peer had them before it left).
inline void host_mesh::lost_unless_taken(int peer, message_id id) {
  if (data_link(peer).unsent()) pump_peer(peer);
  if (data_link(peer).unsent() == 0) return;
  lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " closed its connection (it exited, crashed or failed)" +
                 (id.seq ? " during " + gsync::detail::op_label(id.seq) : std::string()) + " before taking the data sent to it",
       peer);
}

// While blocked, also watch every other TCP peer for a close: one that failed (a mismatch it
// detected, an abort, a timeout) left a record in the store, and this rank fails at once
// instead of waiting for a message that will never come. A peer that left normally has no
// record and is not watched again.
inline void host_mesh::watch_closes(waiter::poll_set& ps, int in_peer) {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && p != in_peer && (watchable(p) || (separate_control(p) && !peers_[p].tcp().seen_closed() && !peers_[p].q().empty())))
      ps.add(peers_[p].tcp().fd(), POLLRDHUP, p);  // (one with queued sends: see wait_progress)
  if (in_peer >= 0 && separate_control(in_peer) && !peers_[in_peer].tcp().seen_closed())
    ps.add(peers_[in_peer].tcp().fd(), POLLRDHUP, in_peer);  // its data comes another way
  // Events from outside the links' data paths (an RDMA device's: a port or the device failed),
  // each descriptor once (the links on a device share it; a few devices are remembered).
  int seen[4];
  int n_seen = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !peers_[p].data) continue;
    const int fd = peers_[p].data->event_fd();
    if (fd < 0 || std::find(seen, seen + n_seen, fd) != seen + n_seen) continue;
    if (n_seen < 4) seen[n_seen++] = fd;
    ps.add(fd, POLLIN, p);
  }
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
        shared_.relax();
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
      shared_.unlocked([] { ::sched_yield(); });
      if (bell_progress(in_peer)) return;
      if (sockets) pump_descriptors();
    } while (std::chrono::steady_clock::now() < until);
  }
  doorbell_owner& own = *bell_owner();  // a doorbell peer implies this rank's segment
  auto& bell = own.bell();
  const std::uint32_t seen = shm::arm(bell, own.light());
  if (bell_progress(in_peer) || fs_.any())
    return shm::disarm(bell);
  // A peer that fails or leaves rings this bell; one killed outright is noticed by the liveness
  // check after the timed sleep. Shared mode: at most 10 ms (another thread may queue sends).
  const int ms = std::min(shared_.held() ? std::min(max_sleep_ms, 10) : max_sleep_ms, detail::ms_left(dl));
  bool rang = false;
  shared_.unlocked([&] { rang = !shm::sleep(bell, seen, ms); });
  if (bell_progress(in_peer)) {
    // Progress after a full sleep during which nobody rang: a wake-up was lost (see shm.hpp),
    // or the data came in the few nanoseconds between the sleep's end and this check.
    if (!rang && bell.bell.load(std::memory_order_relaxed) == seen) waiter_.late_wakeup();
    return;
  }
  check_bell_peers(in_peer, id);
  if (sockets) watch_idle_sockets(id);
  // A peer on another host may be dialing this rank (connect.ipp): taken after each sleep.
  if (may_be_dialed()) {
    accept_ready(dl);
    serve_dialers(nullptr, dl);
  }
  if (std::chrono::steady_clock::now() >= dl) timed_out(in_peer, id);
}

// Checks, without waiting, whether a TCP peer with nothing queued has closed its connection (a
// wait on the sockets watches them the same way): a wait for a same-host peer with sends to
// other hosts queued calls it after each sleep, so a failed peer on another host is noticed
// within a millisecond or so, not at the timeout.
inline void host_mesh::watch_idle_sockets(message_id id) {
  waiter::poll_set& ps = waiter::thread_set();
  ps.clear();
  watch_closes(ps, -1);
  if (ps.size() == 0 || ::poll(ps.fds.data(), ps.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps.fds[i].revents & POLLIN) take_link_events(ps.idx[i]);
    if (ps.fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) closed_elsewhere(ps.idx[i], id);
  }
}

}  // namespace gsync::transport
