#pragma once
/// \file
/// The mesh's TCP connections: which pairs connect at start-up, and how a pair connects later,
/// when a schedule first needs it (`host_options::lazy_connect`, the default).
///
/// The higher rank of a pair always dials the lower one's listener (its address is in the set-up
/// records every rank read at start-up: no store request), runs the job-key handshake and sends
/// a hello naming itself; the lower rank accepts, checks the hello and attaches the socket to the
/// pair's TCP link. One direction per pair means two ranks never connect to each other at once,
/// and a chain of ranks each dialing a lower one cannot close into a cycle.
///   - At start-up: every pair when lazy_connect is off; else only the same-host peers whose data
///     goes through shared memory (their connection is the liveness signal, transport/mesh/host_mesh.hpp).
///   - On first use: a call that sends to or receives from a lower rank not connected yet dials it
///     (blocking, until the peer's next wait accepts: every wait polls the listener); a call that
///     needs a higher rank waits for it to dial, queuing its sends meanwhile. While it waits for a
///     dial, a rank asks the store every 200 ms whether a rank was lost, so that a peer that died
///     before connecting is reported, not waited for until the deadline.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"
#include "gsync/transport/mesh/start_connector.hpp"

namespace gsync::transport {

// The connections made at start-up (see the file comment); the others wait for first use. Run
// on Asio (start_connector.hpp): every dial to a lower rank at once, the higher ranks' dials
// accepted and admitted as their bytes arrive (a stranger's silent connections cost a
// descriptor each, never a wait in series), the store asked every 250 ms whether a rank was lost.
inline void host_mesh::connect_at_start(deadline dl) {
  std::vector<char> now(static_cast<std::size_t>(size_), 0);
  for (int p = 0; p < size_; ++p)
    now[static_cast<std::size_t>(p)] = p != rank_ && (!opt_.lazy_connect || !peers_[static_cast<std::size_t>(p)].on_ctl);
  std::vector<start_connector::target> lower;
  for (int j = 0; j < rank_; ++j)
    if (now[static_cast<std::size_t>(j)]) lower.push_back({j, records_.listener(j)});
  start_connector::hooks h = connector_hooks(dl);
  // A higher rank that has finished its set-up may already dial for its first operation: it is
  // admitted too, but only the ones awaited here count.
  h.awaited = [&] {
    std::string who;
    for (int j = rank_ + 1; j < size_; ++j)
      if (now[static_cast<std::size_t>(j)] && !peers_[static_cast<std::size_t>(j)].tcp().connected()) who += (who.empty() ? "" : ", ") + std::to_string(j);
    return who;
  };
  h.check_lost = [&] {
    if (store_->check("gsync/lost", dl))
      throw error(errc::peer_lost, "while waiting for higher ranks to connect: " + store_->get("gsync/lost", dl));
  };
  // At start-up a refused dial is retried (the peer may not listen yet), but not in a shrink's
  // set-up, whose members all listen before they publish their records (shrink.ipp).
  start_connector c(io_, key_, listener_.admitting(), my_hello(), log_, opt_.congestion, !rec_.rejoining, std::move(h));
  try {
    c.run(lower, &listener_.acceptor(), dl);
  } catch (const error& e) {
    throw error(e.kind(), "rank " + std::to_string(rank_) + ": " + e.what());
  }
}

// What the start-up connector and a dial on first use ask of the mesh: socket options, and a
// connection through (dialed, or accepted with a good hello) attached to its peer's TCP link.
inline start_connector::hooks host_mesh::connector_hooks(deadline) {
  start_connector::hooks h;
  h.tune = [this](detail::net::tcp_socket& s) { tune(s); };
  h.dialed = [this](int peer, detail::net::tcp_socket& s) {
    peers_[static_cast<std::size_t>(peer)].tcp().attach(s.release());  // the TCP link owns the socket from here
    listener_.count_connected();
  };
  h.admit = [this](const hello& hl, detail::net::tcp_socket& s) {
    if (!good_hello(hl)) return false;
    peers_[static_cast<std::size_t>(hl.rank)].tcp().attach(s.release());
    listener_.count_connected();
    return true;
  };
  h.awaited = [] { return std::string(); };
  h.check_lost = [] {};
  return h;
}

// This rank's hello on the connections it dials.
inline records::hello host_mesh::my_hello() const noexcept {
  hello h;
  h.rank = rank_;
  h.size = size_;
  h.nonce = nonce_;
  return h;
}

// Dials lower rank `peer` when an operation first needs it (see the file comment) and attaches
// the connection to its TCP link: its listener is known to be up, so a refusal means it is gone.
// Failures go through the failure protocol, so that the peers hear of them too.
inline void host_mesh::do_dial(int peer, deadline dl) {
  const std::string who = "rank " + std::to_string(peer);
  try {
    start_connector c(io_, key_, listener_.admitting(), my_hello(), log_, opt_.congestion, /*retry_refused=*/false, connector_hooks(dl));
    c.run({{peer, records_.listener(peer)}}, nullptr, dl);
  } catch (const error& e) {
    if (e.kind() == errc::peer_lost)
      lost(peer, "rank " + std::to_string(rank_) + ": could not connect to " + who + " (" + e.what() + "): it exited or crashed");
    fail(e.kind(), "rank " + std::to_string(rank_) + ": connecting to " + who + ": " + e.what());
  }
}

// The dialing rank's hello, checked: true when it names a rank of this job above this one that
// has no connection yet.
inline bool host_mesh::good_hello(const hello& h) const {
  return records::hello_ok(h, rank_, size_, nonce_) && !peers_[static_cast<std::size_t>(h.rank)].tcp().connected();
}

// Takes every connection waiting on the listener now, without blocking: each is admitted as its
// bytes arrive, by the waits' poll loop (`admit_some`), so that a stranger that connects and stays
// silent costs this rank nothing but a descriptor, for `admission::limit` at most.
inline void host_mesh::do_accept_ready(deadline) {
  if (!listener_.accept_ready(key_, log_, [this](detail::net::tcp_socket& s) { tune(s); }))
    fail(errc::system, bootstrap::fd_exhausted("rank " + std::to_string(rank_) + ": accepting a peer's connection", size_).what());
}

// Moves every connection being admitted on by what it has sent (admission.hpp); one whose hello
// names a rank of this job above this one with no connection yet becomes that peer's.
inline void host_mesh::do_admit_some() {
  listener_.admitting().advance(log_, [this](const hello& h, detail::net::tcp_socket& s) {
    if (!good_hello(h)) return false;
    peers_[static_cast<std::size_t>(h.rank)].tcp().attach(s.release());  // the TCP link owns the socket from here
    listener_.count_connected();
    return true;
  });
}

// What a wait on descriptors watches for peers not connected yet, which may dial this rank at any
// time: the listener and the connections being admitted. A wait that depends on such a dial (a
// read from, or sends queued for, a peer not connected) also asks the store whether a rank was lost.
inline void host_mesh::watch_dialers(waiter::poll_set& ps, int in_peer) {
  bool awaiting = in_peer >= 0 && unconnected(in_peer);
  for (int p = 0; p < size_ && !awaiting; ++p) awaiting = !peers_[p].by_doorbell() && !peers_[p].q().empty() && unconnected(p);
  if (awaiting) check_lost_while_unconnected();
  if (!may_be_dialed()) return;
  listener_.watch(ps, listener_slot, admit_slot);
}

// After a wait: takes the dials the poll saw (`ps`; null: none seen, only the time limits of the
// connections being admitted are applied).
inline void host_mesh::serve_dialers(const waiter::poll_set* ps, deadline dl) {
  bool admit = ps == nullptr;
  if (ps)
    for (std::size_t i = 0; i < ps->size(); ++i) {
      if (ps->idx[i] == listener_slot) {
        if (ps->fds[i].revents & POLLIN) accept_ready(dl);
        admit = true;
      } else if (ps->idx[i] == admit_slot) {
        admit |= ps->fds[i].revents != 0;
      }
    }
  if (admit && !listener_.admitting().empty()) admit_some();
}

// Makes sure `peer`'s TCP link is connected before data moves on it: dials a lower rank, waits
// (through the progress loop, which admits dials) for a higher one. Only for a peer whose data
// goes over TCP; others were connected at start-up.
inline void host_mesh::ensure_connected(int peer, deadline dl, message_id id) {
  if (peers_[static_cast<std::size_t>(peer)].tcp().connected()) return;
  if (peer < rank_) return dial(peer, dl);
  while (!peers_[static_cast<std::size_t>(peer)].tcp().connected()) wait_progress(peer, dl, id);
}

// Called by a wait that depends on a dial (a read from, or sends queued for, a higher rank not
// connected yet): at most every 200 ms, fails naming the lost rank when the store has one.
inline void host_mesh::do_check_lost_while_unconnected() {
  const auto now = std::chrono::steady_clock::now();
  if (now < lost_check_next_) return;
  lost_check_next_ = now + std::chrono::milliseconds(200);
  std::string lost;
  try {
    const deadline d = now + std::chrono::milliseconds(500);
    if (store_->check("gsync/lost", d)) lost = store_->get("gsync/lost", d);
  } catch (const error&) {
    lost = "the store (served by rank 0) cannot be reached: rank 0 has probably died";
  }
  if (!lost.empty()) fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": while waiting for a peer to connect: " + lost);
}

}  // namespace gsync::transport
