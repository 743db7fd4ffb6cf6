#pragma once
/// \file
/// The shared-memory link type: a ring in a segment both ranks of one host map (transport/shm.hpp).
/// What the choices of algorithms and memory paths read about it is declared here
/// (`link_traits<shm_link>`); its data path is transport/mesh/shm_path.ipp.

#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::transport {
/// A shared-memory ring between two ranks of one host (see the file comment).
struct shm_link;
}  // namespace gsync::transport

namespace gsync {
/// Shared memory: the assumed shared-memory model (core/cost_model.hpp), host memory only; the
/// two ranks share memory, so on a machine with more ranks than cores the measured table of
/// algo/select.hpp applies.
template <>
struct link_traits<transport::shm_link> {
  static constexpr link_costs costs{"shm", cost_model::shared_memory(), /*shared_memory=*/true};
  static constexpr bool moves_host_memory = true;     ///< reads and writes pageable host memory
  static constexpr bool moves_device_memory = false;  ///< device memory must be staged through host memory
};
}  // namespace gsync
