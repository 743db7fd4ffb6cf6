#pragma once
// A transport written outside the library, the way a user adds one: the conformance suite
// (test_conformance.cpp, and the "mailbox" worlds of test_collectives_sweep.cpp) runs the
// allreduce and collectives sweeps over it, as every new transport or link type must pass them.
//
// Ranks are threads of one process. Each ordered pair of ranks has a FIFO of messages; a message
// is a copy of the sender's bytes plus the `message_id` it was sent with (nothing is read from the
// sender's memory after post_send returns, unlike the library's in-process transport). recv
// checks the message against what the receiver expects (tag, sequence number, size, fingerprint)
// and fails with errc::mismatch otherwise; every wait ends at its deadline with errc::timeout.
// recv_stream hands the payload over in pieces of at most 1021 bytes rounded down to the
// alignment, so that reductions see odd piece boundaries.
//
// Written against the documented concept only (gsync/core/concepts.hpp: transport_policy); it
// uses no part of gsync's own transports.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gsync/core/communicator.hpp>
#include <gsync/core/concepts.hpp>
#include <gsync/core/error.hpp>
#include <gsync/core/topology.hpp>

#include "support/world.hpp"

namespace gsync_test {

/// The shared state of one mailbox world: a FIFO per ordered pair, one lock and one condition.
class mailbox_world {
 public:
  struct message {
    gsync::message_id id;
    std::vector<std::byte> bytes;
  };
  explicit mailbox_world(int n) : n_(n), boxes_(static_cast<std::size_t>(n) * static_cast<std::size_t>(n)) {}
  int size() const noexcept { return n_; }
  std::deque<message>& box(int from, int to) { return boxes_[static_cast<std::size_t>(from) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(to)]; }
  std::mutex m;
  std::condition_variable cv;

 private:
  int n_;
  std::vector<std::deque<message>> boxes_;
};

/// One rank's endpoint (satisfies gsync::transport_policy).
class mailbox_transport {
 public:
  mailbox_transport(std::shared_ptr<mailbox_world> w, int rank)
      : w_(std::move(w)), rank_(rank), topo_(gsync::topology::single_host(w_->size())) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return w_->size(); }
  std::string_view name() const noexcept { return "mailbox"; }
  const gsync::topology& topo() const noexcept { return topo_; }

  void post_send(int peer, gsync::message_id id, const std::byte* src, std::size_t n) {
    check_peer(peer);
    posted_ += n;
    mailbox_world::message msg{id, std::vector<std::byte>(src, src + n)};
    {
      std::lock_guard lk(w_->m);
      w_->box(rank_, peer).push_back(std::move(msg));
    }
    w_->cv.notify_all();
  }

  void recv(int peer, gsync::message_id id, std::byte* dst, std::size_t n, gsync::deadline dl) {
    const auto msg = take(peer, id, n, dl);
    if (n) std::memcpy(dst, msg.bytes.data(), n);
  }

  void recv_stream(int peer, gsync::message_id id, std::size_t n, std::size_t align,
                   gsync::detail::function_ref<void(std::span<const std::byte>)> consume, gsync::deadline dl) {
    const auto msg = take(peer, id, n, dl);
    if (align == 0) align = 1;
    const std::size_t piece = std::max<std::size_t>(align, 1021 - 1021 % align);
    for (std::size_t at = 0; at < n; at += piece) consume(std::span<const std::byte>(msg.bytes.data() + at, std::min(piece, n - at)));
  }

  void flush_sends(gsync::deadline) {}  // a send owns its copy at once

  /// Payload bytes handed to post_send so far (gsync::counting_transport).
  std::uint64_t payload_bytes_posted() const noexcept { return posted_; }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw gsync::error(gsync::errc::invalid_argument, "mailbox: rank " + std::to_string(rank_) + ": invalid peer " + std::to_string(peer));
  }
  mailbox_world::message take(int peer, gsync::message_id id, std::size_t n, gsync::deadline dl) {
    check_peer(peer);
    std::unique_lock lk(w_->m);
    auto& q = w_->box(peer, rank_);
    if (!w_->cv.wait_until(lk, dl, [&] { return !q.empty(); }))
      throw gsync::error(gsync::errc::timeout, "mailbox: rank " + std::to_string(rank_) + " timed out waiting for rank " + std::to_string(peer));
    auto msg = std::move(q.front());
    q.pop_front();
    lk.unlock();
    if (msg.id.tag != id.tag || msg.id.seq != id.seq || msg.bytes.size() != n || !(msg.id.fp == id.fp))
      throw gsync::error(gsync::errc::mismatch, "mailbox: rank " + std::to_string(rank_) + " expected " + std::to_string(n) +
                                                    " bytes of op #" + std::to_string(id.seq) + " from rank " + std::to_string(peer) +
                                                    ", got " + std::to_string(msg.bytes.size()) + " bytes of op #" + std::to_string(msg.id.seq));
    return msg;
  }

  std::shared_ptr<mailbox_world> w_;
  int rank_;
  gsync::topology topo_;
  std::uint64_t posted_ = 0;
};

}  // namespace gsync_test

// Registering the transport's costs: the automatic choice of algorithms prices schedules with
// what a transport declares (gsync::link_costs); messages between threads through a locked
// queue cost about what shared memory does.
template <>
struct gsync::transport_traits<gsync_test::mailbox_transport> : gsync::transport_traits<void> {
  static constexpr gsync::link_costs local_costs{"mailbox", gsync::cost_model::shared_memory(), /*shared_memory=*/false};
};

namespace gsync_test {

static_assert(gsync::transport_policy<mailbox_transport>);
static_assert(gsync::counting_transport<mailbox_transport>);

using mailbox_communicator = gsync::communicator<mailbox_transport>;

/// n ranks over the mailbox transport, one thread each.
template <class F>
void run_mailbox(int n, F f, gsync::config cfg = {}) {
  auto w = std::make_shared<mailbox_world>(n);
  std::vector<mailbox_communicator> comms;
  comms.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) comms.emplace_back(std::make_unique<mailbox_transport>(w, r), cfg);
  run_threads<mailbox_communicator>(n, [&](int r) { return std::move(comms[static_cast<std::size_t>(r)]); }, f);
}

}  // namespace gsync_test
