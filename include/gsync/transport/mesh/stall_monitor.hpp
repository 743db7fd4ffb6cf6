#pragma once
/// \file
/// `stall_monitor`: owns what a rank knows of its own waiting operation (which one, since when,
/// whether its stall record is in the store) and the reports drawn from the other ranks' records:
/// a stall warning, a mismatch seen in the store, the ranks behind at a timeout.
///
/// How it works. An operation that has waited half of GSYNC_STALL_WARN_S, or half of its own
/// timeout, publishes "gsync/stall/R" = its op number and call in the store (silently), and from
/// then on compares the record of the peer it waits for once a second: a peer waiting in another
/// collective under the same op number is a mismatch, raised at once (`other_call`). At
/// GSYNC_STALL_WARN_S it logs, once, what it waits for and which ranks have not reached its op
/// according to the store: a rank with no record, or one stalled at an earlier op, is the one to
/// look at. A timeout reports the same (the mesh's `timed_out`). Nothing is sent while operations
/// progress. Records carry the call's fingerprint, its communicator with it: each communicator
/// numbers its own operations, so only records of the same communicator are compared, and the
/// report of ranks behind is for the world's operations (a sub-communicator's members are not the
/// mesh's ranks). One operation is tracked at a time: threads waiting in several communicators at
/// once take turns, and then the records and reports may not come.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "gsync/bootstrap/store_client.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/fingerprint.hpp"
#include "gsync/core/log.hpp"
#include "gsync/core/op_numbering.hpp"
#include "gsync/core/tick_clock.hpp"
#include "gsync/transport/frame.hpp"
#include "gsync/transport/mesh/records.hpp"

namespace gsync::transport {

/// See the file comment. Not thread-safe: the mesh calls it under its lock (shared mode).
class stall_monitor {
 public:
  /// What one look at a waiting operation found (`look`).
  struct verdict {
    std::optional<std::chrono::steady_clock::time_point> now;  ///< the time read; none on the operation's first wait
    bool due = false;       ///< the store has work: publish this rank's record, compare the peer's, or warn (`report`)
    bool withdrawn = false;  ///< the operation tracked before had published a record: erase it (`erase_record`)
  };

  /// `warn_s`: GSYNC_STALL_WARN_S (0: never warn); `store`: the mesh's store connection, where the
  /// records go (none yet, or none any more: nothing is published or read).
  stall_monitor(int rank, int size, int warn_s, logger log, const std::unique_ptr<bootstrap::store_client>& store)
      : rank_(rank), size_(size), warn_s_(warn_s), log_(std::move(log)), store_(store) {}
  stall_monitor(const stall_monitor&) = delete;
  stall_monitor& operator=(const stall_monitor&) = delete;

  /// Called on every wait of operation `id` (waiting for `in_peer`, or to send when -1), ending at
  /// `dl`: tracks it and says whether the store has work (`report`). Touches no store itself, so
  /// that the data path stays clear of the store's code. Its clock is detail::tick_clock: read on
  /// every wait, at a tenth of a second's precision needed.
  verdict look(int in_peer, message_id id, deadline dl) noexcept {
    verdict v;
    if (id.seq == 0) return v;
    const auto now = detail::tick_clock::now();
    if (!tracking(id)) {
      v.withdrawn = withdraw();  // the stalled op finished
      cur_ = state{id.tag, id.seq, id.fp.comm, now, 0, {}};
      return v;
    }
    v.now = now;
    const auto waited = now - cur_.since;
    v.due = (cur_.stage == 0 && waited >= publish_at(dl)) || (cur_.stage >= 1 && in_peer >= 0 && now - cur_.checked >= std::chrono::seconds(1)) ||
            (warn_s_ > 0 && cur_.stage == 1 && waited >= warn());
    return v;
  }

  /// The store's part of a look that was `due`: publishes this rank's record, compares the peer's,
  /// warns once. Returns a mismatch: the peer waits in another call under the same number.
  std::optional<std::string> report(int in_peer, message_id id, deadline dl, std::chrono::steady_clock::time_point now) {
    const auto waited = now - cur_.since;
    if (cur_.stage == 0 && waited >= publish_at(dl)) {
      cur_.stage = 1;
      try {
        if (store_) store_->set(key(rank_), records::stall_record(id), now + std::chrono::seconds(2));
      } catch (const error&) {
      }
    }
    // A peer stalled in another collective under the same operation number can never meet this
    // one (a rank skipped or added a collective, and neither side sends the other anything this
    // call could check): a mismatch, reported now rather than as a timeout later. Only the peer
    // waited for is asked (one store request a second however large the job); a timeout asks
    // them all.
    if (cur_.stage >= 1 && in_peer >= 0 && now - cur_.checked >= std::chrono::seconds(1)) {
      cur_.checked = now;
      if (auto m = other_call(id, now + std::chrono::seconds(2), in_peer)) return m;
    }
    if (warn_s_ <= 0 || cur_.stage != 1 || waited < warn()) return std::nullopt;
    cur_.stage = 2;
    std::string msg = "rank " + std::to_string(rank_) + ": " + describe_message(id.tag, id.seq, id.fp) + " has waited " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) + " s for " +
                      (in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to take queued data"));
    if (id.fp.comm != 0) msg += " in " + comm_label(id.fp.comm);
    log_.warn(msg + (is_p2p_tag(id.tag) ? p2p_wait_hint(in_peer)
                     : id.fp.comm == 0 ? behind_report(id.seq, now + std::chrono::seconds(2))
                                       : std::string()));
    return std::nullopt;
  }

  /// True when `id` is the operation tracked.
  bool tracking(message_id id) const noexcept { return id.seq == cur_.seq && id.tag == cur_.tag && id.fp.comm == cur_.comm; }
  /// Since when the tracked operation waits.
  std::chrono::steady_clock::time_point since() const noexcept { return cur_.since; }

  /// Forgets the operation tracked; true when it had published a record, which `erase_record`
  /// then sets back to "0" (no record).
  bool withdraw() noexcept {
    if (cur_.stage == 0) return false;
    cur_.stage = 0;
    cur_.seq = 0;
    return true;
  }
  /// Sets this rank's stall record back to "0" (best effort).
  void erase_record() noexcept {
    try {
      if (store_) store_->set(key(rank_), "0", std::chrono::steady_clock::now() + std::chrono::seconds(2));
    } catch (...) {
    }
  }

  /// The other side of a collective mismatch that the store shows: a peer (`only`, else any)
  /// whose stall record names the same operation number of the same communicator as `id` but
  /// another call. Collectives only (point-to-point messages are numbered per pair). Best effort:
  /// nullopt when there is none or the store cannot say.
  std::optional<std::string> other_call(message_id id, deadline sdl, int only = -1) {
    if (id.seq == 0 || is_p2p_tag(id.tag) || !store_) return std::nullopt;
    try {
      for (int j = only >= 0 ? only : 0; j < (only >= 0 ? only + 1 : size_); ++j) {
        if (j == rank_) continue;
        if (!store_->check(key(j), sdl)) continue;
        std::uint64_t seq = 0;
        std::uint32_t tag = 0;
        fingerprint fp;
        if (!records::parse_stall_record(store_->get(key(j), sdl), seq, tag, fp) || seq != id.seq || is_p2p_tag(tag)) continue;
        // A peer waiting in another communicator's operation of the same number is no mismatch.
        if (fp.comm != id.fp.comm) continue;
        if (tag == id.tag && fp == id.fp) continue;
        std::string m = "rank " + std::to_string(rank_) + " called " + describe_message(id.tag, id.seq, id.fp) + ", rank " +
                        std::to_string(j) + " called " + describe_message(tag, seq, fp);
        m += tag != id.tag ? ": different operations" : ": they disagree on the " + fingerprint_difference(id.fp, fp);
        return m + " (both wait, each in its own call: a rank skipped or added a collective?)";
      }
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }

  /// "; ranks that have not reached op #S: ..." from the other ranks' progress records in the store.
  std::string behind_report(std::uint64_t seq, deadline sdl) {
    if (!store_) return {};
    try {
      std::string behind, waiting;
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        std::uint64_t at = 0;
        std::uint32_t tag = 0;
        fingerprint fp;
        if (store_->check(key(j), sdl) && !records::parse_stall_record(store_->get(key(j), sdl), at, tag, fp)) at = 0;
        if (at != 0 && fp.comm != 0)
          behind += (behind.empty() ? "" : ", ") + std::to_string(j) + " (waiting in " + describe_message(tag, at, fp) + " of " + comm_label(fp.comm) + ")";
        else if (at == 0) behind += (behind.empty() ? "" : ", ") + std::to_string(j) + " (no record: busy elsewhere or hung outside gsync)";
        else if (at < seq) behind += (behind.empty() ? "" : ", ") + std::to_string(j) + " (stuck at " + gsync::detail::op_label(at) + ")";
        else waiting += (waiting.empty() ? "" : ", ") + std::to_string(j);
      }
      std::string m = behind.empty() ? "; every other rank has reached it and is waiting too (a lost message or a dead link?)"
                                     : "; ranks that have not reached " + gsync::detail::op_label(seq) + ": " + behind;
      if (!waiting.empty()) m += "; waiting at or after it: " + waiting;
      return m;
    } catch (const std::exception& e) {
      return std::string("; the store could not be asked which ranks are behind: ") + e.what();
    }
  }

  /// Why a point-to-point message may never come (its numbers are per pair, so the collective
  /// progress records say nothing about it).
  static std::string p2p_wait_hint(int in_peer) {
    if (in_peer < 0) return "; the receiver has not taken this point-to-point message yet";
    return "; rank " + std::to_string(in_peer) +
           " has not sent it yet. Operations on a communicator run one at a time in issue order, so ranks that each "
           "issue a recv (or recv_async) before their own send to the next rank wait for each other in a cycle: "
           "exchange with gsync::sendrecv (both directions at once), or order the calls so that the cycle breaks";
  }

 private:
  struct state {  // the operation tracked
    std::uint32_t tag = 0;
    std::uint64_t seq = 0;
    std::uint64_t comm = 0;  // its communicator (fingerprint::comm): each numbers its own operations
    std::chrono::steady_clock::time_point since{};
    int stage = 0;  // 0: quiet, 1: published in the store, 2: reported
    std::chrono::steady_clock::time_point checked{};  // when the peers' records were last compared
  };
  static std::string key(int r) { return "gsync/stall/" + std::to_string(r); }
  std::chrono::steady_clock::duration warn() const noexcept { return std::chrono::seconds(warn_s_ > 0 ? warn_s_ : 1000000000); }
  // When a waiting operation publishes its record: at half the warning time, or half its own timeout.
  std::chrono::steady_clock::duration publish_at(deadline dl) const noexcept {
    return std::min<std::chrono::steady_clock::duration>(warn() / 2, (dl - cur_.since) / 2);
  }

  int rank_, size_, warn_s_;
  logger log_;
  const std::unique_ptr<bootstrap::store_client>& store_;  // the mesh's
  state cur_;
};

}  // namespace gsync::transport
