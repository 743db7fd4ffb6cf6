#pragma once
/// \file
/// In-process transport: ranks are threads of one process sharing an `inproc_world`.
///
/// A send enqueues a descriptor (header + pointer) in the mailbox of the (sender, receiver) pair;
/// the receiver copies or reduces straight from the sender's memory, then releases the sender's
/// pending count. No bytes are staged. Used by the fast unit tests and by anyone who wants
/// gsync collectives between threads. A rank whose transport is destroyed, or that failed, is
/// marked gone, and peers waiting on it get `errc::peer_lost` instead of waiting forever. A rank
/// whose operation fails withdraws its queued messages and waits until no peer is still copying
/// from its buffers before the error reaches the caller, so the caller may free them at once.
/// A peer that failed with a mismatch or was aborted passes that kind and its message on to the
/// ranks waiting for it (so every rank of a mismatched call reports the mismatch). `abort` may be
/// called from any thread.
///
/// `split` makes views over a subset of the ranks (for `communicator::split`): their messages
/// travel in the same mailboxes, stamped with the view's identity, and a receiver takes the first
/// message of its own view; a rank that fails is gone for every view.

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/op_numbering.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync::transport {

/// Shared state of an in-process world of `size` ranks.
class inproc_world {
 public:
  /// A world of `size` ranks (>= 1).
  /// `topo` places the ranks on (pretend) hosts, for testing hierarchical schedules; by default
  /// all ranks are on one host.
  explicit inproc_world(int size, topology topo = {})
      : size_(size), boxes_(static_cast<std::size_t>(size) * size), ranks_(size),
        topo_(topo.world() == size ? std::move(topo) : topology::single_host(size)) {
    if (size < 1) throw error(errc::invalid_argument, "inproc_world: size must be >= 1");
  }
  int size() const noexcept { return size_; }  ///< number of ranks
  const topology& topo() const noexcept { return topo_; }  ///< placement of the ranks

 private:
  friend class inproc;
  struct message {
    frame_header h;
    const std::byte* p;
  };
  // One mutex for the world keeps the logic obviously right; contention is irrelevant at test sizes
  // compared to the copies, and each rank waits on its own condition variable.
  struct rank_state {
    std::condition_variable cv;  // signalled when a message arrives for this rank or its sends complete
    // per view (communicator id): messages not yet taken; few views, so a vector searched in order
    std::vector<std::pair<std::uint64_t, std::size_t>> pending_sends;
    std::size_t& pending(std::uint64_t comm) {
      for (auto& e : pending_sends)
        if (e.first == comm) return e.second;
      return pending_sends.emplace_back(comm, 0).second;
    }
    int readers = 0;             // receivers copying from this rank's memory right now
    bool gone = false;
    errc kind = errc::peer_lost;  // how it went: peer_lost (left or lost), mismatch or aborted
    std::string why;             // first error of this rank, for later calls
  };
  std::mutex m_;
  int size_;
  std::vector<std::deque<message>> boxes_;  // index src * size + dst
  std::vector<rank_state> ranks_;
  topology topo_;
  std::deque<message>& box(int src, int dst) { return boxes_[static_cast<std::size_t>(src) * size_ + dst]; }
};

/// Transport endpoint of one rank in an `inproc_world` (or a view of it made by `split`).
class inproc {
 public:
  /// Endpoint of `rank` in `world`.
  inproc(std::shared_ptr<inproc_world> world, int rank)
      : w_(std::move(world)), me_(rank), rank_(rank), size_(w_->size()), life_(std::make_shared<char>()) {}
  inproc(const inproc&) = delete;
  inproc& operator=(const inproc&) = delete;
  /// The rank leaves (see `leave`) with the last of its views.
  ~inproc() {
    if (life_.use_count() == 1) leave();
  }

  /// A view over `members` (ranks of this view, this rank among them): rank i of the new view is
  /// `members[i]` here; `comm` (not 0) stamps its messages. Leaving the world view leaves them too.
  std::unique_ptr<inproc> split(const std::vector<int>& members, std::uint64_t comm) const {
    if (comm == 0) throw error(errc::invalid_argument, "inproc::split: communicator id 0 is the world's");
    std::unique_ptr<inproc> v(new inproc(w_, me_));
    v->life_ = life_;
    v->comm_ = comm;
    v->rank_ = -1;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i] < 0 || members[i] >= size_) throw error(errc::invalid_argument, "inproc::split: rank out of range");
      if (members[i] == rank_) v->rank_ = static_cast<int>(i);
      v->world_.push_back(job_rank(members[i]));
    }
    if (v->rank_ < 0) throw error(errc::invalid_argument, "inproc::split: this rank is not among the members");
    v->size_ = static_cast<int>(members.size());
    v->topo_ = std::make_shared<const topology>(w_->topo().subset(v->world_));
    return v;
  }
  /// The view's identity on the wire (0: the world).
  std::uint64_t comm_id() const noexcept { return comm_; }
  /// Rank of this view's rank `r` in the world (used in messages).
  int job_rank(int r) const noexcept { return world_.empty() ? r : world_[static_cast<std::size_t>(r)]; }

  int rank() const noexcept { return rank_; }          ///< this rank
  int size() const noexcept { return size_; }          ///< ranks of this view
  std::string_view name() const noexcept { return "inproc"; }  ///< transport name for logs
  /// What a message between two ranks costs (`costed_transport`): the ranks are threads of one
  /// process and a receiver reads the sender's memory, so the shared-memory model applies.
  link_costs local_costs() const noexcept { return {"inproc", cost_model::shared_memory(), /*shared_memory=*/true}; }
  const topology& topo() const noexcept { return topo_ ? *topo_ : w_->topo(); }  ///< placement of the ranks

  /// Marks this rank gone: peers waiting on it fail with peer_lost. Messages it queued are
  /// withdrawn, and the call returns only once no peer is still copying from its memory.
  void leave() {
    if (!w_) return;
    std::unique_lock lk(w_->m_);
    withdraw(lk, errc::peer_lost, "it left");
  }

  /// Aborts this endpoint from any thread: its queued messages are withdrawn, a wait in it fails
  /// with `errc::aborted` (`why`), and so do peers waiting for it and every later call (of every
  /// view of this rank).
  void abort(const std::string& why) noexcept {
    if (!w_) return;
    try {
      std::unique_lock lk(w_->m_);
      withdraw(lk, errc::aborted, why);
    } catch (...) {
    }
  }

  /// Payload bytes handed to post_send so far (`counting_transport`).
  std::uint64_t payload_bytes_posted() const noexcept { return posted_bytes_; }

  /// Queues a descriptor of [src, src+n) for `peer`.
  void post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
    check_peer(peer);
    const int to = job_rank(peer);
    id.fp.comm = comm_;
    posted_bytes_ += n;
    std::unique_lock lk(w_->m_);
    check_usable(lk);
    if (w_->ranks_[to].gone) peer_gone(lk, to, "has left: this rank cannot send to it");
    w_->box(me_, to).push_back({make_header(id, n), src});
    last_sent_ = id;
    ++w_->ranks_[me_].pending(comm_);
    w_->ranks_[to].cv.notify_all();
  }

  /// Copies the next message from `peer` into dst.
  void recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
    take(peer, id, n, dl, [&](const std::byte* p) { if (n) std::memcpy(dst, p, n); });
  }

  /// Hands the next message from `peer` to `consume` in one piece, straight from the sender's memory.
  void recv_stream(int peer, message_id id, std::size_t n, std::size_t /*align*/,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
    take(peer, id, n, dl, [&](const std::byte* p) { consume(std::span<const std::byte>(p, n)); });
  }

  /// Waits until, for some peer p with `ids[p].tag != 0`, the first message of this view from p
  /// has ids[p]'s tag and number; returns p (`any_source_transport`). A candidate that fails
  /// fails the wait; one that left is passed over, and the wait fails once all have left.
  int probe_any(std::span<const message_id> ids, deadline dl) {
    std::unique_lock lk(w_->m_);
    check_usable(lk);
    auto& me = w_->ranks_[me_];
    for (;;) {
      for (int p = 0; p < size_; ++p) {
        const message_id& id = ids[static_cast<std::size_t>(p)];
        if (p == rank_ || id.tag == 0) continue;
        auto& q = w_->box(job_rank(p), me_);
        const auto it = find(q);
        if (it != q.end() && it->h.tag == id.tag && it->h.seq == id.seq) return p;
      }
      if (me.gone) check_usable(lk);
      for (int q = 0; q < w_->size(); ++q)  // any rank that failed with a mismatch or was aborted: fail now (as take)
        if (w_->ranks_[q].gone && (w_->ranks_[q].kind == errc::mismatch || w_->ranks_[q].kind == errc::aborted))
          peer_gone(lk, q, "failed");
      // A candidate that failed fails the wait; one that left is done sending, unless all have.
      // One whose first message is another keeps it first while this receive waits.
      int open = 0, left = -1, other = 0;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || ids[static_cast<std::size_t>(p)].tag == 0) continue;
        const auto& st = w_->ranks_[job_rank(p)];
        if (st.gone && st.kind != errc::peer_lost) peer_gone(lk, job_rank(p), "failed while this rank waited for a message from any rank");
        auto& q = w_->box(job_rank(p), me_);
        if (find(q) != q.end()) ++other;
        else if (st.gone) left = job_rank(p);
        else ++open;
      }
      if (open == 0 && other > 0)
        fail(lk, errc::mismatch, who() + "a receive from any rank cannot end: every rank still sending to this one has another message first" + in_comm());
      if (open == 0) peer_gone(lk, left, "left, the last rank this receive from any rank could take a message from");
      if (std::chrono::steady_clock::now() >= dl) {  // after a last look at the mailboxes (above)
        std::uint32_t tag = 0;
        for (const message_id& id : ids) tag = tag ? tag : id.tag;
        fail(lk, errc::timeout, who() + "timed out in a receive from any rank (tag " + std::to_string(tag & ~tag_p2p) +
                                    "): no rank sent it a message with that tag" + in_comm());
      }
      me.cv.wait_until(lk, dl);
    }
  }

  /// Waits until every message this view sent has been consumed.
  void flush_sends(deadline dl) {
    std::unique_lock lk(w_->m_);
    check_usable(lk);
    auto& me = w_->ranks_[me_];
    while (me.pending(comm_) != 0) {
      if (me.gone) check_usable(lk);
      cross_check_sent(lk);
      for (int p = 0; p < size_; ++p) {
        const int q = job_rank(p);
        if (p != rank_ && w_->ranks_[q].gone && find(w_->box(me_, q)) != w_->box(me_, q).end())
          peer_gone(lk, q, "left before receiving this rank's data");
      }
      if (me.cv.wait_until(lk, dl) == std::cv_status::timeout && me.pending(comm_) != 0)
        fail(lk, errc::timeout, who() + "timed out waiting for peers to receive " + std::to_string(me.pending(comm_)) + " message(s)" + in_comm());
    }
    // Another view of this rank failed meanwhile: its withdrawal cleared every view's count, so the
    // loop above ended with receivers perhaps still copying; fail here, once they are done.
    check_usable(lk);
  }

 private:
  using box_t = std::deque<inproc_world::message>;
  // The first message of this view in a mailbox.
  box_t::iterator find(box_t& q) const {
    return std::find_if(q.begin(), q.end(), [&](const inproc_world::message& m) { return m.h.fp.comm == comm_; });
  }
  std::string in_comm() const { return comm_ ? " in " + comm_label(comm_) : std::string(); }

  template <class F>
  void take(int peer_in, message_id id, std::size_t n, deadline dl, F&& use) {
    check_peer(peer_in);
    const int peer = job_rank(peer_in);
    id.fp.comm = comm_;
    std::unique_lock lk(w_->m_);
    check_usable(lk);
    auto& me = w_->ranks_[me_];
    auto& sender = w_->ranks_[peer];
    auto& q = w_->box(peer, me_);
    while (find(q) == q.end()) {
      if (me.gone) check_usable(lk);
      if (sender.gone) peer_gone(lk, peer, "left while this rank waited for its data");
      for (int p = 0; p < w_->size(); ++p) {  // any rank that failed with a mismatch or was aborted: fail now
        if (w_->ranks_[p].gone && (w_->ranks_[p].kind == errc::mismatch || w_->ranks_[p].kind == errc::aborted))
          peer_gone(lk, p, "failed");
        if (p != peer) cross_check(lk, p, id);
      }
      if (me.cv.wait_until(lk, dl) == std::cv_status::timeout && find(q) == q.end())
        fail(lk, errc::timeout, who() + "timed out waiting for a message from rank " + std::to_string(peer) +
                                    " (" + gsync::detail::op_label(id.seq) + ")" + in_comm());
    }
    inproc_world::message m = *find(q);
    try {
      check_header(m.h, id, n, me_, peer);
    } catch (const error& e) {
      fail(lk, e.kind(), e.what());
    }
    // The copy runs unlocked; the sender's `readers` count keeps its memory alive meanwhile (a
    // sender that fails or leaves waits for it to drop before its buffers can go away).
    ++sender.readers;
    lk.unlock();
    use(m.p);
    lk.lock();
    if (--sender.readers == 0) sender.cv.notify_all();
    if (sender.gone)  // withdrawn while we copied: the sender failed, so must we
      peer_gone(lk, peer, "failed while this rank received its data");
    q.erase(find(q));
    if (--sender.pending(comm_) == 0) sender.cv.notify_all();
  }

  // A message of collective `id` waiting from rank `p` with another fingerprint is a mismatch now:
  // the disagreeing ranks may never read from each other (two ranks that both believe to be a
  // broadcast's root only send, and would wait for each other until the timeout; see
  // transport/mesh/diagnostics.ipp, cross_check). Point-to-point numbers are per pair and not compared.
  void cross_check(std::unique_lock<std::mutex>& lk, int p, const message_id& id) {
    if (p == me_ || id.tag == 0 || is_p2p_tag(id.tag)) return;
    auto& q = w_->box(p, me_);
    const auto it = find(q);
    if (it == q.end()) return;
    const frame_header& h = it->h;
    if (h.tag != id.tag || h.seq != id.seq || h.fp == id.fp) return;
    try {
      check_header(h, id, static_cast<std::size_t>(h.bytes), me_, p);
    } catch (const error& e) {
      fail(lk, e.kind(), e.what());
    }
  }
  // While this rank waits for its sends to be taken, the same check against its last message.
  void cross_check_sent(std::unique_lock<std::mutex>& lk) {
    for (int p = 0; p < w_->size(); ++p) cross_check(lk, p, last_sent_);
  }

  // Withdraws this rank's queued messages, marks it gone (waking every waiter) and waits until no
  // receiver is still copying from its memory. Called with the world lock held.
  void withdraw(std::unique_lock<std::mutex>& lk, errc kind, const std::string& why) {
    auto& me = w_->ranks_[me_];
    if (!me.gone) {
      me.gone = true;
      me.kind = kind;
      me.why = why;
      for (int p = 0; p < w_->size(); ++p) w_->box(me_, p).clear();
      me.pending_sends.clear();
      for (auto& r : w_->ranks_) r.cv.notify_all();
    }
    while (me.readers > 0) me.cv.wait(lk);
  }
  [[noreturn]] void fail(std::unique_lock<std::mutex>& lk, errc kind, const std::string& msg) {
    withdraw(lk, kind == errc::mismatch || kind == errc::aborted ? kind : errc::peer_lost, msg);
    throw error(kind, msg);
  }
  // `peer` is gone: its mismatch or abort is passed on, anything else is a lost peer.
  [[noreturn]] void peer_gone(std::unique_lock<std::mutex>& lk, int peer, const std::string& what) {
    const auto& p = w_->ranks_[peer];
    if (p.kind == errc::mismatch || p.kind == errc::aborted) {
      fail(lk, p.kind, who() + gsync::detail::relayed(peer, p.why));
    }
    fail(lk, errc::peer_lost, who() + "rank " + std::to_string(peer) + " " + what);
  }
  void check_usable(std::unique_lock<std::mutex>& lk) {
    auto& me = w_->ranks_[me_];
    if (me.gone) {
      // Another communicator of this rank failed (views share the rank): a receiver may still be
      // copying what this one sent, so its buffers must outlive the copy, as in withdraw.
      while (me.readers > 0) me.cv.wait(lk);
      std::string m = me.kind == errc::aborted ? me.why : who() + "communicator unusable after an earlier error: " + me.why;
      lk.unlock();
      throw error(errc::aborted, m);
    }
  }
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw error(errc::invalid_argument, who() + "invalid peer rank " + std::to_string(peer));
  }
  std::string who() const { return "rank " + std::to_string(me_) + ": "; }

  std::shared_ptr<inproc_world> w_;
  int me_;     // rank in the world
  int rank_;   // rank in this view
  int size_;
  std::vector<int> world_;  // this view's ranks in the world (empty: the world itself)
  std::uint64_t comm_ = 0;
  std::shared_ptr<const topology> topo_;  // a split view's placement
  std::shared_ptr<char> life_;            // shared by the rank's views: the last one leaves
  std::uint64_t posted_bytes_ = 0;  // payload bytes handed to post_send
  message_id last_sent_{};  // the last message posted (for cross_check_sent)
};

}  // namespace gsync::transport
