#pragma once
/// \file
/// The member functions of `transport::heartbeat` (transport/mesh/heartbeat.hpp) that move one
/// connection on: its Asio waits (readable, writable, connected, its timer), the job-key handshake
/// of either side, the hello, the messages, its time limits, and dropping it.

#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/socket_base.hpp>

#include <algorithm>
#include <cstring>
#include <memory>

#include "gsync/transport/mesh/heartbeat.hpp"

namespace gsync::transport {

inline heartbeat_conn& heartbeat::add_conn() { return conns_.emplace_back(io_); }

// Every handler that names a connection is counted in its `waits` (handle() gives it back).
inline void heartbeat::ask(conn& c, ev what) {
  ++c.waits;
  asio::post(io_, on_event{this, &c, what, 0});
}

inline void heartbeat::watch_read(conn& c) {
  if (c.closed || c.reading) return;
  c.reading = true;
  ++c.waits;
  c.sock.async_wait(asio::socket_base::wait_read, on_event{this, &c, ev::read, 0});
}

inline void heartbeat::watch_write(conn& c) {
  if (c.closed || c.writing) return;
  c.writing = true;
  ++c.waits;
  c.sock.async_wait(asio::socket_base::wait_write, on_event{this, &c, ev::write, 0});
}

// The connection's one deadline: moving it cancels the wait before, which is then stale.
inline void heartbeat::arm_timer(conn& c, clock::time_point at) {
  c.timer.expires_at(at);
  ++c.waits;
  c.timer.async_wait(on_event{this, &c, ev::timer, ++c.timer_gen});
}

inline std::string heartbeat::neighbour(const conn& c) const {
  return c.peer >= 0 ? "rank " + std::to_string(c.peer) : std::string("a connection being admitted");
}

// Closes c at once; it is erased when the last handler naming it has run (a posted one at least).
inline void heartbeat::drop(conn& c) {
  if (c.closed) return;
  c.closed = true;
  asio::error_code ig;
  c.sock.close(ig);  // its waits and connect end with operation_aborted
  c.timer.cancel();
  ask(c, ev::reap);
}

// The end of a connection: a dial that failed before its handshake (refused, reset, the wrong
// key) is tried again, unless the successor was reported lost.
inline void heartbeat::finish(conn& c) {
  if (c.closed) return;
  if (c.role == conn::dialing) {
    // A successor that closed its communicator refuses (or drops the handshake) until
    // dial_give_up_: ring() returns now, not after the retries, which go on meanwhile.
    settle_dial();
    if (!known_.count(c.peer)) {
      dialed_ = false;
      retry_dial(clock::now() + period_);
    }
  }
  drop(c);
}

inline void heartbeat::on_connected(conn& c, const asio::error_code& e) {
  if (e) return finish(c);  // refused: its listener is gone or not up; try again
  if (!pump(c)) return;     // the handshake's hello
  watch_read(c);
}

// Queues a message on an established connection and writes what the socket takes now. A write
// that fails is dealt with by a posted handler: a loss passed on must not drop connections under
// the loop that passes it.
inline void heartbeat::send(conn& c, kind k, int rank, const std::string& text) {
  msg_header h;
  h.k = k;
  h.rank = rank;
  h.len = static_cast<std::uint32_t>(std::min<std::size_t>(text.size(), max_text));
  if (c.out.size() > 64 * 1024) return;  // a neighbour that reads nothing: beats can wait, its silence is judged by what it sends
  c.out.append(reinterpret_cast<const char*>(&h), sizeof h);
  c.out.append(text.data(), h.len);
  if (c.broken) return;
  if (!c.flush()) {
    c.broken = true;
    ask(c, ev::broke);
  } else if (!c.out.empty()) {
    watch_write(c);
  }
}

// Writes what is queued, and waits for room for the rest.
inline bool heartbeat::pump(conn& c) {
  if (c.broken || !c.flush()) {
    broke(c);
    return false;
  }
  if (!c.out.empty()) watch_write(c);
  return true;
}

inline void heartbeat::broke(conn& c) {
  if (c.role == conn::up && c.peer >= 0)
    learn(c.peer, false, "rank " + std::to_string(c.peer) + "'s connection broke (seen by rank " + std::to_string(rank_) + ")", &c);
  finish(c);
}

inline void heartbeat::on_readable(conn& c) {
  if (!read_messages(c, clock::now())) return finish(c);
  if (!pump(c)) return;  // what the handshake has to say
  watch_read(c);
}

// Its time limit: the handshake's (a connection not up yet), or the silence's.
inline void heartbeat::on_timer(conn& c) {
  const auto now = clock::now();
  if (c.role != conn::up) {
    if (now < c.until) return arm_timer(c, c.until);
    // A successor whose kernel took the connection but whose heartbeat never answered stopped
    // (its thread runs from its set-up on); a stranger is just dropped.
    if (c.role == conn::dialing) {
      settle_dial();
      learn(c.peer, true, "rank " + std::to_string(c.peer) + " did not answer its heartbeat connection within " +
                              std::to_string(std::max(dead_after_, std::chrono::milliseconds(2000)).count()) +
                              " ms (stopped, or its host or link is gone; seen by rank " + std::to_string(rank_) + ")",
            &c);
    }
    return finish(c);
  }
  if (c.peer >= 0 && now - c.heard > dead_after_) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - c.heard).count();
    learn(c.peer, true, "rank " + std::to_string(c.peer) + " stopped answering: no heartbeat for " + std::to_string(ms) +
                            " ms (the process is stopped or hung, or its host or link is gone; seen by rank " + std::to_string(rank_) + ")",
          &c);
    return finish(c);
  }
  arm_timer(c, c.heard + dead_after_ + std::chrono::milliseconds(1));
}

// The handshake is through: from now on its silence is watched.
inline void heartbeat::went_up(conn& c, clock::time_point now) {
  c.role = conn::up;
  c.heard = now;
  arm_timer(c, c.heard + dead_after_ + std::chrono::milliseconds(1));
}

// The dialer's handshake: hello sent (queued in dial), the server's proof, ours, then the
// heartbeat hello naming this rank. True while it goes on or is done (role up).
inline bool heartbeat::drive_dialer(conn& c, clock::time_point now) {
  namespace au = bootstrap::auth;
  if (c.step != 0 || c.in.size() < au::challenge_bytes) return true;
  std::string proof;
  try {
    proof = c.cs->prove(reinterpret_cast<const std::uint8_t*>(c.in.data()), neighbour(c));
  } catch (const error& e) {
    if (e.kind() != errc::auth_failed) throw;
    log_.warn("rank " + std::to_string(rank_) + ": heartbeat: rank " + std::to_string(c.peer) +
              "'s listener failed the job-key handshake (another job's process on its port?); not watched");
    return false;
  }
  c.in.erase(0, au::challenge_bytes);
  c.out += proof;
  hello h;
  h.rank = rank_;
  h.size = size_;
  h.nonce = nonce_;
  c.out.append(reinterpret_cast<const char*>(&h), sizeof h);
  c.step = 1;
  c.cs.reset();
  went_up(c, now);
  settle_dial();
  return true;
}

// The acceptor's side: the job-key handshake, then the hello, which must come from the
// predecessor of this job.
inline bool heartbeat::drive_admitter(conn& c, clock::time_point now) {
  if (!c.hs) c.hs = std::make_unique<bootstrap::auth::server_handshake>(*key_);
  if (c.step == 0) {
    const auto st = c.hs->feed(c.in, c.out);
    if (st == bootstrap::auth::server_handshake::state::failed) return false;
    if (st == bootstrap::auth::server_handshake::state::need_more) return true;
    c.step = 1;
  }
  if (c.in.size() < sizeof(hello)) return true;
  hello h;
  std::memcpy(&h, c.in.data(), sizeof h);
  c.in.erase(0, sizeof h);
  const int pred = (rank_ + size_ - 1) % size_;
  if (h.magic != hello{}.magic || h.version != 1 || h.size != size_ || h.rank != pred || (ringing_ && h.nonce != nonce_)) return false;
  c.nonce = h.nonce;
  c.peer = h.rank;
  c.hs.reset();
  went_up(c, now);
  return true;
}

// Reads what arrived and acts on it; false: drop the connection (closed, or garbage).
inline bool heartbeat::read_messages(conn& c, clock::time_point now) {
  bool eof = false, got = false;
  if (!c.read_available(got, eof)) return false;  // nobody of this job sends that much
  if (c.role == conn::dialing && !drive_dialer(c, now)) return false;
  if (c.role == conn::admitting && !drive_admitter(c, now)) return false;
  if (c.role == conn::up) {
    if (got) c.heard = now;
    msg_header h;
    std::string text;
    for (int got_one; (got_one = take_message(c.in, h, text)) != 0;) {
      if (got_one < 0) {
        log_.warn("rank " + std::to_string(rank_) + ": heartbeat: garbage from " + neighbour(c) + "; no longer watched");
        return false;
      }
      if (h.k == bye) {
        c.peer = -1;  // left normally: nothing to report when the connection closes
        return false;
      }
      if (h.k == lost_silent || h.k == lost_exited) learn(h.rank, h.k == lost_silent, text, &c);
    }
  }
  if (eof) {
    if (c.role == conn::up && c.peer >= 0)
      learn(c.peer, false, "rank " + std::to_string(c.peer) + " closed its connection without a goodbye (it exited or was killed; seen by rank " +
                               std::to_string(rank_) + ")",
            &c);
    return false;
  }
  return true;
}

}  // namespace gsync::transport
