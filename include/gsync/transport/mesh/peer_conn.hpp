#pragma once
/// \file
/// `transport::mesh_peer`: what a host mesh holds for one peer: its own TCP connection to it (hello,
/// failure notices, liveness), the port of the link that carries the peer's data, and the frames of
/// other communicators read off that link and set aside for their owners (shared mode).

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "gsync/transport/frame.hpp"
#include "gsync/transport/links/link_port.hpp"
#include "gsync/transport/links/tcp_link.hpp"

namespace gsync::transport {

/// A frame of another communicator than the reader's, set aside whole for its owner.
struct stashed_frame {
  frame_header h;
  std::vector<std::byte> data;
};

/// One peer. The data link is a port on the connection itself, or on a link of another type that
/// the port owns; then the TCP connection stays open, silent, as the liveness signal. Placed once
/// (never moved: the port may point at `ctl`).
struct mesh_peer {
  tcp_link ctl;                     ///< the mesh's own connection
  std::unique_ptr<link_port> data;  ///< the data link
  bool on_ctl = true;               ///< the data goes over `ctl`
  std::deque<stashed_frame> inbox;  ///< whole frames of other communicators read off the link (shared mode)
  bool reading = false;             ///< a thread is reading a frame off the link (shared mode)
  tcp_link& tcp() noexcept { return ctl; }
  const tcp_link& tcp() const noexcept { return ctl; }
  bool by_doorbell() const noexcept { return data->wait == link_wait::doorbell; }
  std::deque<send_op>& q() noexcept { return data->q; }  ///< the data link's queue
};

}  // namespace gsync::transport
