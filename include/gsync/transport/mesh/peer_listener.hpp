#pragma once
/// \file
/// `transport::peer_listener`: owns a rank's listener for its peers' dials (the higher rank of a
/// pair dials the lower one, transport/mesh/connect.ipp), the connections accepted on it and not
/// admitted yet (`admission`), and the count of peers connected. Which hello admits a connection,
/// and to which peer, is the mesh's.

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/bootstrap/socket.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/transport/mesh/admission.hpp"
#include "gsync/transport/mesh/waiter.hpp"

namespace gsync::transport {

class peer_listener {
 public:
  explicit peer_listener(asio::io_context& io) : acc_(io) {}
  peer_listener(const peer_listener&) = delete;
  peer_listener& operator=(const peer_listener&) = delete;

  /// Listens on an ephemeral port of `addr`, close-on-exec and non-blocking; the connections it
  /// accepts inherit the congestion control `congestion`. `who` names the rank in the error.
  void open(const asio::ip::address& addr, int backlog, const std::string& congestion, const std::string& who) {
    const asio::ip::tcp::endpoint ep(addr, 0);
    asio::error_code ec;
    acc_.open(ep.protocol(), ec);
    if (!ec) detail::set_cloexec(acc_.native_handle());
    if (!ec) acc_.bind(ep, ec);
    if (!ec) detail::set_congestion(acc_.native_handle(), congestion);
    if (!ec) acc_.listen(std::max(64, backlog), ec);
    if (ec) throw error(errc::system, who + ": cannot listen on " + addr.to_string() + ": " + ec.message());
    acc_.non_blocking(true);
  }
  /// No more dials: a peer that dials this rank later is refused at once.
  void close() noexcept {
    asio::error_code ig;
    if (acc_.is_open()) acc_.close(ig);
  }
  bool is_open() const noexcept { return acc_.is_open(); }
  /// The listener itself, for the start-up connector's asynchronous accepts (start_connector.hpp).
  detail::net::tcp_acceptor& acceptor() noexcept { return acc_; }
  admission& admitting() noexcept { return admitting_; }

  int connected() const noexcept { return connected_; }  ///< peers with a TCP connection
  void count_connected() noexcept { ++connected_; }
  /// True while one of the `size - 1` peers not connected yet may still dial this rank.
  bool may_be_dialed(int size) const noexcept { return (connected_ < size - 1 && acc_.is_open()) || !admitting_.empty(); }

  /// Takes every connection waiting now, without blocking, into admission (each must prove `key`),
  /// `tune(socket)` setting its options. False when the process is out of descriptors.
  template <class Tune>
  bool accept_ready(const bootstrap::auth::job_key& key, const logger& log, Tune&& tune) {
    if (!acc_.is_open()) return true;
    for (;;) {
      auto s = std::make_unique<detail::net::tcp_socket>(acc_.get_executor());
      asio::error_code ec;
      acc_.accept(*s, ec);
      if (ec) return !bootstrap::out_of_descriptors(ec);  // else would block, or a connection that went away first
      detail::set_cloexec(s->native_handle());
      tune(*s);
      asio::error_code ig;
      std::string from = s->remote_endpoint(ig).address().to_string();
      admitting_.take(std::move(s), key, std::move(from), log);
    }
  }

  /// What a wait on descriptors watches for dials: the listener as `listener_slot`, the
  /// connections being admitted as `admit_slot`.
  void watch(waiter::poll_set& ps, int listener_slot, int admit_slot) {
    if (acc_.is_open()) ps.add(acc_.native_handle(), POLLIN, listener_slot);
    admitting_.watch(ps, admit_slot);
  }

 private:
  detail::net::tcp_acceptor acc_;
  admission admitting_;  // after acc_: its sockets close first
  int connected_ = 0;
};

}  // namespace gsync::transport
