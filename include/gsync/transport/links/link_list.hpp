#pragma once
/// \file
/// `link_list<Ls...>`: the link types a mesh tries for each peer, in order (transport/mesh/). At
/// set-up the first type whose endpoint connects a pair carries that pair's data, as NCCL walks
/// its transports per peer; adding a medium is one link type (its file in transport/links/, its
/// `link_traits` and endpoint) and one entry in the mesh's list (`transport::mesh<Ls...>`,
/// transport/mesh.hpp). At run time the list is a `link_kit` (link_kit.hpp), and each peer holds
/// one port (link_port.hpp) on the link that carries its data.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "gsync/core/concepts.hpp"
#include "gsync/transport/links/link_setup.hpp"

namespace gsync::transport {

/// Link types in the order a mesh tries them for each peer.
/// \tparam Ls link types, each with `link_traits<L>::endpoint` satisfying `link_endpoint`.
template <class... Ls>
  requires(sizeof...(Ls) > 0 && sizeof...(Ls) < 256 && (link<Ls> && ...) &&
           (link_endpoint<typename link_traits<Ls>::endpoint, Ls> && ...))
struct link_list {
  static constexpr std::size_t size = sizeof...(Ls);             ///< number of link types
  static constexpr std::array<std::string_view, size> names{Ls::name...};  ///< for logs
  static constexpr std::array<link_wait, size> waits{link_traits<Ls>::wait...};  ///< how each is waited for

  /// Position of `L` in the list.
  template <class L>
  static constexpr std::size_t index_of = [] {
    constexpr std::array<bool, size> same{std::is_same_v<L, Ls>...};
    for (std::size_t i = 0; i < size; ++i)
      if (same[i]) return i;
    return size;
  }();
};

}  // namespace gsync::transport
