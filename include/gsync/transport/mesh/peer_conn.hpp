#pragma once
/// \file
/// `transport::mesh_peer`: what a host mesh holds for one peer: its own TCP connection to it (hello,
/// failure notices, liveness) and the port of the link that carries the peer's data. (Who reads the
/// peer's stream in shared mode, and the frames set aside for other communicators: shared_mode.hpp.)

#include <deque>
#include <memory>

#include "gsync/transport/frame.hpp"
#include "gsync/transport/links/link_port.hpp"
#include "gsync/transport/links/tcp_link.hpp"

namespace gsync::transport {

/// One peer. The data link is a port on the connection itself, or on a link of another type that
/// the port owns; then the TCP connection stays open, silent, as the liveness signal. Placed once
/// (never moved: the port may point at `ctl`).
struct mesh_peer {
  tcp_link ctl;                     ///< the mesh's own connection
  std::unique_ptr<link_port> data;  ///< the data link
  bool on_ctl = true;               ///< the data goes over `ctl`
  tcp_link& tcp() noexcept { return ctl; }
  const tcp_link& tcp() const noexcept { return ctl; }
  bool by_doorbell() const noexcept { return data->wait == link_wait::doorbell; }
  std::deque<send_op>& q() noexcept { return data->q; }  ///< the data link's queue
};

}  // namespace gsync::transport
