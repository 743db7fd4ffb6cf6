#pragma once
/// \file
/// Diagnostics of a waiting call that need the links: timeouts that name the call, its queued
/// sends and (from the stall monitor, stall_monitor.hpp) the ranks behind, and the mismatch
/// cross-check against what other peers sent.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Timeout of the operation `id`: names the call, its bytes, how long it waited and for whom,
// and (from the store's progress records) which ranks had not reached it.
[[noreturn]] inline void host_mesh::do_timed_out(int in_peer, message_id id) {
  std::string what = in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to accept queued data");
  std::string blocked;
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].q().empty()) blocked += (blocked.empty() ? "" : ", ") + std::to_string(p);
  const auto now = std::chrono::steady_clock::now();
  char w[48] = " waiting";
  if (stall_.tracking(id)) std::snprintf(w, sizeof w, " after waiting %.1f s", std::chrono::duration<double>(now - stall_.since()).count());
  std::string msg = "rank " + std::to_string(rank_) + ": " + describe_message(id.tag, id.seq, id.fp) +
                    (id.fp.comm ? " in " + comm_label(id.fp.comm) : std::string()) + " (" +
                    std::to_string(payload_bytes(id.fp)) + " bytes per rank) timed out" + w + " for " + what +
                    (blocked.empty() ? "" : " (sends still queued to ranks " + blocked + ")");
  if (is_p2p_tag(id.tag)) msg += stall_monitor::p2p_wait_hint(in_peer);
  else if (id.seq != 0) {
    if (auto m = stall_.other_call(id, now + std::chrono::seconds(1))) fail(errc::mismatch, *m);
    if (id.fp.comm == 0) msg += stall_.behind_report(id.seq, now + std::chrono::seconds(1));
  }
  fail(errc::timeout, msg);
}

// The stall monitor's look found work for the store (stall_monitor.hpp): a mismatch it shows fails now.
inline void host_mesh::do_stall_report(int in_peer, message_id id, deadline dl, std::chrono::steady_clock::time_point now) {
  if (auto m = stall_.report(in_peer, id, dl, now)) fail(errc::mismatch, *m);
}

// A collective that has waited 100 ms looks at the next frame every other peer has sent this
// rank (without consuming it): a frame of this very operation carrying another fingerprint is
// a mismatch now, and a failure notice fails this rank now, rather than at the timeout. This
// catches the calls where the disagreeing ranks never read from each other (two ranks each
// believing to be a broadcast's root wait for different parents). Point-to-point messages are
// numbered per pair and are not compared across peers.
inline void host_mesh::cross_check(int in_peer, message_id id, std::chrono::steady_clock::time_point now) {
  if (id.seq == 0 || is_p2p_tag(id.tag) || !stall_.tracking(id)) return;
  if (now - stall_.since() < std::chrono::milliseconds(100)) return;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || p == in_peer || shared_.reading(p)) continue;  // (shared mode: another thread reads p)
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
