#pragma once
// Worlds of threads over a mesh whose list starts with a link type defined here, outside include/
// (support/uds_link.hpp): Unix-domain sockets between ranks of one "host", TCP between hosts.

#include <functional>
#include <string>

#include <gsync/transport/mesh.hpp>

#include "support/uds_link.hpp"
#include "support/world.hpp"

/// gsync's mesh with the outside link first: its data between same-host ranks, TCP otherwise.
using uds_mesh = gsync::transport::mesh<outside::uds_link, gsync::transport::tcp_link>;
using uds_communicator = gsync::communicator<uds_mesh>;

/// n ranks over `uds_mesh`, joined through a store on loopback. Unless `host_of` says otherwise
/// (GSYNC_HOST_ID semantics), up to 3 ranks share one host (every pair on the outside link), and
/// from 4 on, ranks below `(n + 1) / 2` are on one host and the others on a second, so that both
/// link types carry data.
namespace gsync_test {

template <class F>
void run_uds(int n, F f, gsync::config cfg, std::function<std::string(int)> host_of = {}) {
  const auto port = free_port();
  if (!host_of) host_of = [n](int r) { return std::string(n < 4 || r < (n + 1) / 2 ? "uds-a" : "uds-b"); };
  run_threads<uds_communicator>(n, [&](int r) { return uds_communicator::join(test_launch_info(r, n, port, host_of(r)), cfg); }, f);
}

}  // namespace gsync_test
