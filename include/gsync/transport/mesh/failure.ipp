#pragma once
/// \file
/// The failure protocol: abort, failure notices to the peers, failure records in the store, lost
/// peers (naming the rank lost first) and the poisoning of the endpoint after an error.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {


/// Aborts this endpoint; thread-safe, callable while another thread waits in it. Records
/// `why` in the store for the peers (through a connection of its own, at most ~1 s), then shuts
/// every connection down and rings the doorbells: the waiting thread wakes and fails with
/// `errc::aborted`, and so does every later call; peers blocked on this rank fail at once,
/// reporting the abort. Idempotent.
inline void host_mesh::do_abort(const std::string& why) noexcept {
  if (!fs_.start_abort(why)) return;
  try {
    // The reason goes to the store before the peers are woken below, so that they report it:
    // 3 s for a fresh connection (1 s was too short on a loaded machine under a sanitizer: the
    // peers then reported a lost rank without the reason).
    const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    bootstrap::store_client sc(master_addr_, master_port_, d, key_);
    sc.set(failed_key(rank_), failure_record(errc::aborted, why), d);
  } catch (...) {
    // best effort: the peers will see the connections close and report a lost rank instead
  }
  fs_.abort_recorded();
  for (auto& p : peers_) p.tcp().shutdown();
  if (doorbell_owner* own = bell_owner()) own->mark_failed(static_cast<std::uint32_t>(rank_ + 1));
  wake_waits();
}

// Wakes this rank's thread waiting in poll(2) (the wake-up eventfd) or on its doorbell.
// Thread-safe: abort() and the heartbeat's thread call it.
inline void host_mesh::wake_waits() noexcept {
  waiter_.wake();
  if (doorbell_owner* own = bell_owner()) {
    own->bell().sleepers.fetch_add(1, std::memory_order_relaxed);  // force the wake-up of our own sleepers
    shm::notify(own->bell());
    own->bell().sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

// The heartbeat's news (on its thread, transport/mesh/heartbeat.hpp). A peer that stopped
// answering fails this rank's running wait at once and every later call (the alarm); one that
// left without a goodbye is only remembered: an operation that needs it meets the closed
// connection, and health() reports it meanwhile.
inline void host_mesh::on_heartbeat(const heartbeat::news& n) noexcept {
  bool silent = n.silent;
  try {
    silent = fs_.heard(n);
    if (silent) log_.warn("rank " + std::to_string(rank_) + ": " + n.why);
  } catch (...) {
  }
  if (silent) wake_waits();
}

// A wait or a call met the heartbeat's alarm: fail as a lost peer, naming it.
[[noreturn]] inline void host_mesh::heartbeat_lost() {
  const auto [who, why] = fs_.first_silent();
  fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": " + why + (cur_op_ ? " (this rank was in " + gsync::detail::op_label(cur_op_) + ")" : std::string()), who);
}

inline void host_mesh::do_bad_frame(const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got) {
  if (h.magic == notice_magic) on_notice(peer, h, have, got, id);
  try {
    check_header(h, id, n, rank_, peer);
  } catch (const error& e) {
    fail(e.kind(), e.what());
  }
}

// `peer` failed and said why in a notice frame (see send_notices): fail with its kind if it is
// a mismatch or an abort (so every rank reports what actually went wrong), else peer_lost.
[[noreturn]] inline void host_mesh::do_on_notice(int peer, const frame_header& h, const std::byte* have, std::size_t got, message_id id) {
  const records::notice nt = records::decode_notice(h, size_);
  const std::size_t len = nt.text_bytes;
  std::string why(len, '\0');
  std::size_t at = std::min(got, len);
  if (at) std::memcpy(why.data(), have, at);
  try {
    const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    take_payload(peer, data_link(peer), reinterpret_cast<std::byte*>(why.data()) + at, len - at, 1, nullptr, d, id);
  } catch (const error&) {
    if (fs_.broken()) throw;
    why += " [cut short]";
  }
  why = gsync::detail::unrelayed(peer, std::move(why));
  const errc k = nt.kind;
  if (k == errc::mismatch || k == errc::aborted || k == errc::corrupted)
    fail(k, "rank " + std::to_string(rank_) + ": " + gsync::detail::relayed(peer, why));
  // The rank the notifier lost first, when it knew one (the notifier itself is alive: it wrote).
  const int first = nt.first;
  fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " failed" +
                            (first >= 0 && first != peer ? " after losing rank " + std::to_string(first) : std::string()) +
                            (id.seq ? " during " + gsync::detail::op_label(id.seq) : std::string()) + ": " + why, first);
}

// The last words of a failing rank: to every peer whose outgoing stream is at a message
// boundary (nothing queued, or the first queued message not started), a notice frame with the
// error's kind and text, so that a peer waiting for data from this rank learns why it stops
// (sockets: written without blocking; rings: as far as there is room). Best effort.
inline void host_mesh::send_notices(errc kind, const std::string& msg, int lost) {
  notice_text_ = msg.substr(0, max_notice_bytes);
  const std::uint64_t first = lost >= 0 ? static_cast<std::uint64_t>(lost) + 1 : 0;  // the rank lost first, if any
  const frame_header nh{notice_magic, static_cast<std::uint32_t>(kind), first, notice_text_.size(), fingerprint{}};
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || unconnected(p)) continue;  // a peer never connected hears of it through the store
    auto& c = peers_[p];
    link_port& l = data_link(p);
    const std::size_t u = l.unsent();
    if (u && c.q()[c.q().size() - u].done != 0) continue;  // mid-message: the stream cannot carry it
    // The notice replaces what is queued (fail() drops it anyway) and goes as far as the link
    // takes it now; errors are ignored (this rank is failing already).
    const bool bell = l.by_doorbell();
    const std::size_t dropped = l.drop_unsent();
    queued_ -= dropped;
    if (bell) bell_queued_ -= dropped;
    l.post(nh, reinterpret_cast<const std::byte*>(notice_text_.data()), notice_text_.size());
    std::size_t done = 0;
    l.pump(done);
    queued_ += 1 - done;
    if (bell) bell_queued_ += 1 - done;
  }
}

// Fails with peer_lost if a doorbell peer (same host, shared memory) this wait depends on has
// failed or exited, naming the rank that was lost first when the peer's failure was itself
// caused by a loss.
inline void host_mesh::check_bell_peers(int in_peer, message_id id) {
  int culprit = -1;
  auto gone = [&](int p) -> std::string {  // empty while p is alive
    auto& c = peers_[p];
    if (const std::uint32_t v = bell_failed(p)) {
      if (v & shm_left) return culprit = p, "left (its communicator was destroyed)";
      culprit = static_cast<int>(v & ~shm_left) - 1;
      if (culprit == p || culprit < 0 || culprit >= size_) return culprit = p, "failed";
      return "failed after losing rank " + std::to_string(culprit);
    }
    const int closed = c.tcp().closed_by_peer();
    if (closed == 2)
      fail(errc::mismatch, "rank " + std::to_string(rank_) + ": unexpected bytes on the control connection of same-host rank " +
                               std::to_string(p));
    if (closed == 0) return {};
    return culprit = p, "exited or crashed";
  };
  if (in_peer >= 0 && peers_[in_peer].by_doorbell() && !bell_ready(in_peer))
    if (auto why = gone(in_peer); !why.empty())
      lost(in_peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(in_peer) + " (same host) " + why +
                        " during " + gsync::detail::op_label(id.seq) + " while this rank waited for its data", culprit);
  for (int p : bell_peers_)  // a same-host peer that failed (not one that left normally) fails this wait too
    if (const std::uint32_t v = bell_failed(p); v && !(v & shm_left) && p != in_peer) {
      const int first = static_cast<int>(v) - 1;
      const bool chain = first != p && first >= 0 && first < size_;
      lost(p, "rank " + std::to_string(rank_) + ": rank " + std::to_string(p) + " (same host) failed" +
                  (chain ? " after losing rank " + std::to_string(first) : std::string()) +
                  (id.seq ? " during " + gsync::detail::op_label(id.seq) : std::string(" while this rank's sends were pending")),
           chain ? first : p);
    }
  for (int p : bell_peers_)
    if (!peers_[p].q().empty())
      if (auto why = gone(p); !why.empty())
        lost(p, "rank " + std::to_string(rank_) + ": rank " + std::to_string(p) + " (same host) " + why +
                       " during " + gsync::detail::op_label(id.seq) + " before taking the data sent to it", culprit);
}

// `peer`, which this rank is not waiting for, closed its connection: fail with its failure
// record if it left one, else (it left normally, or died: the peers it was talking to will
// report that) stop watching it.
// Only a failure during this collective or an earlier one ends the current operation: a peer
// that has finished its part and failed in a later collective, or one this point-to-point
// message does not involve, is met (as a closed stream) when it is next needed.
inline void host_mesh::do_closed_elsewhere(int peer, message_id id) {
  peers_[peer].tcp().mark_closed();
  // Operation numbers of other communicators than the world cannot be compared with the
  // record's: such a wait meets the peer's loss when it next needs the peer.
  if (is_p2p_tag(id.tag) || id.seq == 0 || id.fp.comm != 0) return;
  if (fs_.alarm()) heartbeat_lost();  // the root cause, and the store may be frozen with it
  try {
    const deadline d = failure_lookup_deadline();
    if (!store_->check(failed_key(peer), d)) return;
    const std::string at = store_->check(failed_key(peer) + "/op", d) ? store_->get(failed_key(peer) + "/op", d) : "0";
    const std::uint64_t op = std::strtoull(at.c_str(), nullptr, 10);
    if (op > id.seq) return;
  } catch (const error&) {
    return;
  }
  lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " failed during " + gsync::detail::op_label(id.seq));
}

// A peer's connection closed or its `failed` flag rose: if it left a failure record (a mismatch
// it detected, an abort), fail with that kind and its words; otherwise peer_lost with `msg`.
[[noreturn]] inline void host_mesh::do_lost(int peer, const std::string& msg, int culprit) {
  // A peer the heartbeat found silent is the root cause of what follows (and when it is rank 0,
  // the store is frozen with it: no lookups).
  if (!fs_.broken() && !fs_.aborted() && fs_.alarm()) heartbeat_lost();
  if (!fs_.broken() && !fs_.aborted()) {
    try {
      const deadline d = failure_lookup_deadline();
      if (store_->check(failed_key(peer), d)) {
        const std::string rec = store_->get(failed_key(peer), d);
        const auto parsed = records::parse_failure_record(rec);
        const errc k = parsed ? parsed->kind : errc::system;
        const std::string why = gsync::detail::unrelayed(peer, parsed ? parsed->why : rec);
        if (k == errc::mismatch || k == errc::aborted || k == errc::corrupted)
          fail(k, "rank " + std::to_string(rank_) + ": " + gsync::detail::relayed(peer, why));
        fail(errc::peer_lost, msg + "; it had failed: " + why, culprit);
      }
      // No failure record: the peer did not fail (a failing rank records why before its
      // connections close), it vanished: it is the rank lost, unless the caller knows an earlier one.
      if (culprit < 0) culprit = peer;
    } catch (const error&) {
      if (fs_.broken()) throw;  // the fail() above
      if (peer == 0 && culprit < 0) culprit = 0;  // it served the store, which is gone with it
      if (rank_ != 0 && peer != 0)  // the store, served by rank 0, is gone too: say so, it is likely the cause
        fail(errc::peer_lost, msg + "; the store (served by rank 0) cannot be reached either: rank 0 has probably died first", 0);
    }
  }
  fail(errc::peer_lost, msg, culprit);
}

// Poisons the transport and throws. `lost` names the rank whose loss caused this (shared with
// same-host peers through this rank's `failed` word, so that they can name it too). After
// abort() every failure is reported as the abort. A mismatch or an abort is recorded in the
// store before the connections close (see file comment).
[[noreturn]] inline void host_mesh::do_fail(errc kind, const std::string& msg_in, int lost) {
  if (lost >= 0 && lost < size_ && lost != rank_) fs_.saw_dead(lost);  // for a shrink (shrink.ipp)
  std::string msg = msg_in;
  if (fs_.aborted() && kind != errc::aborted) kind = errc::aborted, msg.clear();
  if (kind == errc::aborted && msg.empty()) msg = fs_.abort_reason();
  // Already broken (shared mode: another thread's communicator failed first, and what this
  // thread saw, such as a reset connection, follows from it): report the first cause.
  if (fs_.broken()) throw error(fs_.broken_kind(), fs_.broken_msg());
  {
    // Closing the connections before abort() has recorded its reason in the store (a fresh
    // connection: milliseconds, seconds on a loaded machine; its deadline is 3 s) would let the
    // peers report a lost rank without the reason.
    if (kind == errc::aborted && fs_.aborted()) fs_.wait_abort_recorded(std::chrono::seconds(4));
    fs_.set_broken(kind, msg, lost);
    // abort() recorded its own. The store lives in rank 0's process: when rank 0 is the rank lost
    // (killed, or stopped: then a request would wait its whole deadline), nobody can read a record.
    const bool store_lost = fs_.store_silent() || (kind == errc::peer_lost && lost == 0);
    if ((kind != errc::aborted || !fs_.aborted()) && !store_lost) {
      try {
        const deadline d = failure_lookup_deadline();
        store_->set(failed_key(rank_) + "/op", std::to_string(cur_op_), d);  // before the record: readers see both
        store_->set(failed_key(rank_), failure_record(kind, msg), d);
      } catch (const std::exception&) {
      }
    }
    try {
      send_notices(kind, msg, lost);
    } catch (const std::exception&) {
    }
    for (auto& p : peers_) {
      p.tcp().shutdown();
      p.ctl.q.clear();  // unsent bytes may belong to buffers the caller frees after the error
      if (p.data) p.data->drop_unsent();  // (written frames a link still waits to confirm stay with it)
    }
    queued_ = 0;
    bell_queued_ = 0;
    // No more dials (connect.ipp): a peer that needs this rank later is refused at once and
    // looks up why in the store, rather than waiting for an answer that will not come.
    listener_.close();
    if (doorbell_owner* own = bell_owner()) {
      own->mark_failed(static_cast<std::uint32_t>((lost >= 0 ? lost : rank_) + 1));
      if (shared_.held()) shm::notify(own->bell());  // shared mode: this rank's other threads may sleep on it
    }
    if (shared_.held()) shared_.wake_all();
    log_.warn(msg);
  }
  throw error(kind, msg);
}

// A wait found the endpoint ended meanwhile (an abort, another thread's failure in shared mode,
// the heartbeat's alarm): fail with the cause.
[[noreturn, gnu::cold, gnu::noinline]] inline void host_mesh::failed_meanwhile() {
  if (fs_.aborted()) fail(errc::aborted, "");
  if (fs_.broken()) unusable();
  heartbeat_lost();
}

[[noreturn, gnu::cold, gnu::noinline]] inline void host_mesh::bad_peer(int peer) const {
  throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ": invalid peer rank " + std::to_string(peer));
}

[[noreturn, gnu::cold, gnu::noinline]] inline void host_mesh::unusable() {
  if (!fs_.broken() && !fs_.aborted() && fs_.alarm()) heartbeat_lost();
  if (!fs_.broken()) fail(errc::aborted, "");
  throw error(fs_.broken_kind(), "rank " + std::to_string(rank_) + ": communicator unusable after an earlier error: " + fs_.broken_msg());
}

}  // namespace gsync::transport
