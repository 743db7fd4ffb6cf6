#pragma once
/// \file
/// Receiving from any source: `probe_any` waits until one of several peers has sent the message
/// wanted from it and names that peer, leaving the message in its link for `recv`. It looks at
/// each candidate's next frame without taking it (`peek_header`), so a candidate whose next frame
/// is something else (another tag, a collective) is passed over, not disturbed.
/// Waiting: the candidates' sockets are polled for data; when every candidate is a doorbell link,
/// this rank sleeps on its doorbell (a same-host peer rings it when it writes); when both kinds
/// are candidates, the poll wakes every millisecond to look at the rings.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include <algorithm>

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Returns the index in `t` of the first candidate whose next message is the one wanted from it,
// once there is one (see the file comment).
inline std::size_t host_mesh::probe_any(std::span<const probe_target> t, deadline dl) {
  call_lock g(shared_);
  check_usable();
  // A lower rank not connected yet holds its frames for this rank until this rank dials it
  // (connect.ipp); a higher one dials this rank when it sends, which the waits below admit.
  for (const probe_target& x : t)
    if (unconnected(x.peer) && x.peer < rank_) dial(x.peer, dl);
  for (;;) {
    for (std::size_t i = 0; i < t.size(); ++i)
      if (next_is(t[i], dl)) return i;
    any_wait(t, dl);
  }
}

// True when `x.peer`'s next frame of x's communicator is x's message. A failure notice in front
// of it is taken and fails this rank, as in a recv; in shared mode, a frame of another
// communicator in front that no thread is reading is set aside for its owner, as a recv would.
inline bool host_mesh::next_is(const probe_target& x, deadline dl) {
  const int p = x.peer;
  if (unconnected(p)) return false;
  if (shared_.held()) {  // shared mode: a frame set aside by another reader comes first
    if (const frame_header* s = shared_.first_of(p, x.id.fp.comm)) return s->tag == x.id.tag && s->seq == x.id.seq;
    if (shared_.reading(p)) return false;
  }
  frame_header h;
  if (!data_link(p).peek_header(h)) return false;
  if (h.magic == notice_magic) {
    take_header(p, data_link(p), h, nullptr, 0, std::chrono::steady_clock::now() + std::chrono::seconds(1), x.id);
    on_notice(p, h, nullptr, 0, x.id);
  }
  if (h.magic == frame_magic && h.fp.comm != x.id.fp.comm && shared_.held()) {
    {
      shared_mode::read_claim claim;
      if (shared_.claim(p, x.id.fp.comm, claim, [] {}) >= 0) return next_is(x, dl);  // (none of ours: looked above)
      link_port& l = data_link(p);
      if (!l.try_header(h, nullptr, 0).done) return false;  // the header was whole: cannot happen
      set_aside(p, l, h, nullptr, 0, dl, x.id);
    }
    return next_is(x, dl);
  }
  return h.magic == frame_magic && h.fp.comm == x.id.fp.comm && h.tag == x.id.tag && h.seq == x.id.seq;
}

// One wait of probe_any: returns when a candidate may have something (or early: the caller looks
// again); fails on a failure, a lost candidate, or at the deadline.
inline void host_mesh::any_wait(std::span<const probe_target> t, deadline dl) {
  const message_id id = t.front().id;  // for reports: the tag and the communicator
  checkpoint(-1, id, dl);
  pump_descriptors();
  pump_doorbells();
  if (std::chrono::steady_clock::now() >= dl) {
    std::string who;
    for (const probe_target& x : t) who += (who.empty() ? "" : ", ") + std::to_string(x.peer);
    fail(errc::timeout, "rank " + std::to_string(rank_) + ": a receive from any rank (tag " + std::to_string(id.tag & ~tag_p2p) + ")" +
                            (id.fp.comm ? " in " + comm_label(id.fp.comm) : std::string()) +
                            " timed out: no rank sent this rank its next message with that tag (ranks waited for: " + who + ")");
  }
  const auto ready = [&] {
    for (const probe_target& x : t)
      if (next_is(x, dl)) return true;
    return false;
  };
  // A message often follows within microseconds: look again while yielding the core first.
  if (opt_.yield_us > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(opt_.yield_us);
    do {
      shared_.unlocked([] { ::sched_yield(); });
      if (ready()) return;
    } while (std::chrono::steady_clock::now() < until);
  }
  // What each candidate may still bring. One whose next frame (whole) is another message keeps it
  // there while this receive waits (nothing else reads this communicator's frames meanwhile), so
  // it is out; so is one that left. A socket with part of a header is not polled (it would be
  // readable at once, again and again): the wait is cut to a millisecond instead.
  waiter::poll_set& ps = waiter::thread_set();
  ps.clear();
  bool bells = false, open = false, partial = false;
  std::string other;  // the candidates out because another message of theirs comes first
  for (const probe_target& x : t) {
    const int p = x.peer;
    if (unconnected(p) || (shared_.held() && (shared_.reading(p) || shared_.first_of(p, x.id.fp.comm)))) {
      open = true;  // it may dial this rank; another thread reads it
      continue;
    }
    frame_header h;
    if (data_link(p).peek_header(h)) {
      if (h.magic != frame_magic || h.fp.comm != x.id.fp.comm) {  // a notice, another communicator's: taken next time
        open = partial = true;
        continue;
      }
      if (h.tag == x.id.tag && h.seq == x.id.seq) return;  // the wanted one, come since `ready` looked
      other += (other.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " + describe_message(h.tag, h.seq, h.fp);
      continue;
    }
    if (peers_[p].by_doorbell()) {
      if (bell_failed(p) & shm_left) continue;  // it left: done sending
      bells = open = true;
      continue;
    }
    if (peers_[p].tcp().seen_closed()) continue;
    const int st = peers_[p].tcp().closed_by_peer();
    if (st == 1) {  // closed, nothing left to read: done sending (a failure reaches this rank otherwise)
      peers_[p].tcp().mark_closed();
      continue;
    }
    open = true;
    if (st == 2) partial = true;
    else ps.add(data_fd(p), POLLIN, p);
  }
  if (!open) {
    const std::string what = "rank " + std::to_string(rank_) + ": a receive from any rank (tag " + std::to_string(id.tag & ~tag_p2p) + ")" +
                             (id.fp.comm ? " in " + comm_label(id.fp.comm) : std::string()) + " cannot end: ";
    if (!other.empty())
      fail(errc::mismatch, what + "every rank still sending to this one has another message first (" + other +
                               "), and messages from one rank are taken in their order");
    lost(t.back().peer, what + "every rank it could receive from has left");
  }
  const std::size_t data_end = ps.size();
  if (data_end == 0 && bells && !partial) {
    // Only rings to watch: sleep on this rank's doorbell, as bell_block does (progress.ipp).
    doorbell_owner& own = *bell_owner();
    auto& bell = own.bell();
    const std::uint32_t seen = shm::arm(bell, own.light());
    if (ready() || fs_.any()) return shm::disarm(bell);
    const int ms = std::min(shared_.held() ? 10 : 100, detail::ms_left(dl));
    shared_.unlocked([&] { shm::sleep(bell, seen, ms); });
    check_bell_peers(-1, id);
    watch_idle_sockets(id);
    if (may_be_dialed()) {
      accept_ready(dl);
      serve_dialers(nullptr, dl);
    }
    return;
  }
  watch_dialers(ps, -1);
  const std::size_t closes_from = ps.size();
  // Other peers' connections, for a close that signals a failure (as in wait_progress): the
  // candidates' own are watched for data above, and a candidate's close with nothing left to
  // read is a rank that is done sending, passed over from then on.
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && watchable(p) && std::none_of(t.begin(), t.end(), [&](const probe_target& x) { return x.peer == p; }))
      ps.add(peers_[p].tcp().fd(), POLLRDHUP, p);
  const int cap_ms = bells || partial ? 1 : shared_.held() ? 10 : 1000;
  const int r = waiter_.block(ps, std::min(cap_ms, detail::ms_left(dl)), shared_.held() != nullptr, [this](auto&& f) { shared_.unlocked(f); });
  if (r < 0) {
    if (errno == EINTR) return;
    fail(errc::system, "poll: " + detail::errno_text(errno));
  }
  for (std::size_t i = 0; r > 0 && i < ps.size(); ++i) {
    const int who = ps.idx[i];
    const short ev = ps.fds[i].revents;
    if (who == waiter::wake_slot) {
      if (ev & POLLIN) waiter_.drain();
    } else if (who < 0) {
      continue;  // the dialers' (serve_dialers below)
    } else if (i >= closes_from) {
      if (ev & (POLLRDHUP | POLLHUP | POLLERR)) closed_elsewhere(who, id);
    }  // a candidate's data or close: looked at again by the caller and the next wait
  }
  serve_dialers(r > 0 ? &ps : nullptr, dl);
  if (bells) check_bell_peers(-1, id);
}

}  // namespace gsync::transport
