#pragma once
/// \file
/// Diagnostics of a waiting call: stall records in the store, stall reports, timeouts that name
/// the ranks behind, and the mismatch cross-check against what other peers sent.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Timeout of the operation `id`: names the call, its bytes, how long it waited and for whom,
// and (from the store's progress records) which ranks had not reached it.
[[noreturn]] inline void host_mesh::timed_out(int in_peer, message_id id) {
  std::string what = in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to accept queued data");
  std::string blocked;
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].q().empty()) blocked += (blocked.empty() ? "" : ", ") + std::to_string(p);
  const auto now = std::chrono::steady_clock::now();
  const bool tracked = id.seq == stall_.seq && id.tag == stall_.tag && id.fp.comm == stall_.comm;
  char w[48] = " waiting";
  if (tracked) std::snprintf(w, sizeof w, " after waiting %.1f s", std::chrono::duration<double>(now - stall_.since).count());
  std::string msg = "rank " + std::to_string(rank_) + ": " + describe_message(id.tag, id.seq, id.fp) +
                    (id.fp.comm ? " in " + comm_label(id.fp.comm) : std::string()) + " (" +
                    std::to_string(payload_bytes(id.fp)) + " bytes per rank) timed out" + w + " for " + what +
                    (blocked.empty() ? "" : " (sends still queued to ranks " + blocked + ")");
  if (is_p2p_tag(id.tag)) msg += p2p_wait_hint(in_peer);
  else if (id.seq != 0) {
    if (auto m = other_call(id, now + std::chrono::seconds(1))) fail(errc::mismatch, *m);
    if (id.fp.comm == 0) msg += behind_report(id.seq, now + std::chrono::seconds(1));
  }
  fail(errc::timeout, msg);
}

// Stall report. An operation that has waited half of GSYNC_STALL_WARN_S, or half of its own
// timeout, publishes "gsync/stall/R" = its op number and call in the store (silently), and from
// then on compares the record of the peer it waits for once a second: a peer waiting in another
// collective under the same op number is a mismatch, raised at once (`other_call`). At
// GSYNC_STALL_WARN_S it logs, once, what it waits for and which ranks have not reached its op
// according to the store: a rank with no record, or one stalled at an earlier op, is the one to
// look at. A timeout reports the same (timed_out). Nothing is sent while operations progress.
// Records carry the call's fingerprint, its communicator with it: each communicator numbers its
// own operations, so only records of the same communicator are compared, and the report of ranks
// behind is for the world's operations (a sub-communicator's members are not the mesh's ranks).
// One operation is tracked at a time: threads waiting in several communicators at once take
// turns, and then the records and reports may not come.
// Returns the time it read, or nothing on an operation's first wait (nothing to check yet).
// Its clock is detail::tick_clock: read on every wait, at a tenth of a second's precision needed.
inline std::optional<std::chrono::steady_clock::time_point> host_mesh::stall_check(int in_peer, message_id id, deadline dl) {
  if (id.seq == 0) return std::nullopt;
  const auto now = detail::tick_clock::now();
  if (id.seq != stall_.seq || id.tag != stall_.tag || id.fp.comm != stall_.comm) {
    withdraw_stall_record();  // the stalled op finished
    stall_ = stall_state{id.tag, id.seq, id.fp.comm, now, 0};
    return std::nullopt;
  }
  const auto waited = now - stall_.since;
  const auto warn = std::chrono::seconds(opt_.stall_warn_s > 0 ? opt_.stall_warn_s : 1000000000);
  const auto publish_at = std::min<std::chrono::steady_clock::duration>(warn / 2, (dl - stall_.since) / 2);
  if (stall_.stage == 0 && waited >= publish_at) {
    stall_.stage = 1;
    try {
      store_->set("gsync/stall/" + std::to_string(rank_), records::stall_record(id), now + std::chrono::seconds(2));
    } catch (const error&) {
    }
  }
  // A peer stalled in another collective under the same operation number can never meet this
  // one (a rank skipped or added a collective, and neither side sends the other anything this
  // call could check): a mismatch, reported now rather than as a timeout later.
  // Only the peer waited for is asked (one store request a second however large the job); a
  // timeout asks them all (timed_out).
  if (stall_.stage >= 1 && in_peer >= 0 && now - stall_.checked >= std::chrono::seconds(1)) {
    stall_.checked = now;
    if (auto m = other_call(id, now + std::chrono::seconds(2), in_peer)) fail(errc::mismatch, *m);
  }
  if (opt_.stall_warn_s <= 0 || stall_.stage != 1 || waited < warn) return now;
  stall_.stage = 2;
  std::string msg = "rank " + std::to_string(rank_) + ": " + describe_message(id.tag, id.seq, id.fp) + " has waited " +
                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) + " s for " +
                    (in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to take queued data"));
  if (id.fp.comm != 0) msg += " in " + comm_label(id.fp.comm);
  log_.warn(msg + (is_p2p_tag(id.tag) ? p2p_wait_hint(in_peer)
                   : id.fp.comm == 0 ? behind_report(id.seq, now + std::chrono::seconds(2))
                                     : std::string()));
  return now;
}

// Why a point-to-point message may never come (its numbers are per pair, so the collective
// progress records say nothing about it).
inline std::string host_mesh::p2p_wait_hint(int in_peer) {
  if (in_peer < 0) return "; the receiver has not taken this point-to-point message yet";
  return "; rank " + std::to_string(in_peer) +
         " has not sent it yet. Operations on a communicator run one at a time in issue order, so ranks that each "
         "issue a recv (or recv_async) before their own send to the next rank wait for each other in a cycle: "
         "exchange with gsync::sendrecv (both directions at once), or order the calls so that the cycle breaks";
}

// Sets this rank's stall record back to "0" (no record) if it had published one (best effort).
inline void host_mesh::withdraw_stall_record() noexcept {
  if (stall_.stage == 0) return;
  stall_.stage = 0;
  stall_.seq = 0;
  try {
    store_->set("gsync/stall/" + std::to_string(rank_), "0", std::chrono::steady_clock::now() + std::chrono::seconds(2));
  } catch (...) {
  }
}

// The other side of a collective mismatch that the store shows: a peer (`only`, else any) whose
// stall record names the same operation number of the same communicator as `id` but another
// call. Collectives only (point-to-point messages are numbered per pair). Best effort: nullopt
// when there is none or the store cannot say.
inline std::optional<std::string> host_mesh::other_call(message_id id, deadline sdl, int only) {
  if (id.seq == 0 || is_p2p_tag(id.tag)) return std::nullopt;
  try {
    for (int j = only >= 0 ? only : 0; j < (only >= 0 ? only + 1 : size_); ++j) {
      if (j == rank_) continue;
      const std::string key = "gsync/stall/" + std::to_string(j);
      if (!store_->check(key, sdl)) continue;
      std::uint64_t seq = 0;
      std::uint32_t tag = 0;
      fingerprint fp;
      if (!records::parse_stall_record(store_->get(key, sdl), seq, tag, fp) || seq != id.seq || is_p2p_tag(tag)) continue;
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

// "; ranks that have not reached op #S: ..." from the other ranks' progress records in the store.
inline std::string host_mesh::behind_report(std::uint64_t seq, deadline sdl) {
  try {
    std::string behind, waiting;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      const std::string key = "gsync/stall/" + std::to_string(j);
      std::uint64_t at = 0;
      std::uint32_t tag = 0;
      fingerprint fp;
      if (store_->check(key, sdl) && !records::parse_stall_record(store_->get(key, sdl), at, tag, fp)) at = 0;
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

// A collective that has waited 100 ms looks at the next frame every other peer has sent this
// rank (without consuming it): a frame of this very operation carrying another fingerprint is
// a mismatch now, and a failure notice fails this rank now, rather than at the timeout. This
// catches the calls where the disagreeing ranks never read from each other (two ranks each
// believing to be a broadcast's root wait for different parents). Point-to-point messages are
// numbered per pair and are not compared across peers.
inline void host_mesh::cross_check(int in_peer, message_id id, std::chrono::steady_clock::time_point now) {
  if (id.seq == 0 || is_p2p_tag(id.tag) || id.seq != stall_.seq || id.tag != stall_.tag || id.fp.comm != stall_.comm) return;
  if (now - stall_.since < std::chrono::milliseconds(100)) return;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || p == in_peer || peers_[p].reading) continue;  // (shared mode: another thread reads p)
    frame_header h;
    if (!data_link(p).peek_header(h)) continue;
    if (h.magic == notice_magic) {  // consume and report it
      take_header(p, data_link(p), h, nullptr, 0, std::chrono::steady_clock::now() + std::chrono::seconds(1), id);
      on_notice(p, h, nullptr, 0, id);
    }
    if (h.magic == frame_magic && h.fp.comm == id.fp.comm && h.tag == id.tag && h.seq == id.seq && !(h.fp == id.fp))
      check(h, id, static_cast<std::size_t>(h.bytes), p, nullptr, 0);
  }
}

}  // namespace gsync::transport
