#pragma once
/// \file
/// The TCP link type: one connection between two ranks, on any hosts. What the choices of
/// algorithms and memory paths read about it is declared here (`link_traits<tcp_link>`); its data
/// path (framed sends, streaming receives) is transport/mesh/socket_path.ipp.

#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::transport {
/// A TCP connection between two ranks (see the file comment).
struct tcp_link;
}  // namespace gsync::transport

namespace gsync {
/// TCP: loopback TCP's fitted model between ranks of one host (core/cost_model.hpp), host memory
/// only; the peers share nothing.
template <>
struct link_traits<transport::tcp_link> {
  static constexpr link_costs costs{"tcp", cost_model::tcp_loopback(), /*shared_memory=*/false};
  static constexpr bool moves_host_memory = true;     ///< reads and writes pageable host memory
  static constexpr bool moves_device_memory = false;  ///< device memory must be staged through host memory
};
}  // namespace gsync
