#pragma once
/// \file
/// What a link type needs to be set up inside a mesh (transport/mesh/): the facts of the job it
/// is given (`link_setup`), its own settings (`link_traits<L>::options`, `link_options_t`), and
/// the rank-wide part of the link type, its endpoint (`link_endpoint`), which publishes what peers
/// need through the store, connects a peer's link when both sides can, and owns what the links of
/// that type share (a shared-memory segment, a device context, a protection domain). Set-up code:
/// non-templated per element, out of the data path.

#include <cstdint>
#include <string>

#include "gsync/core/concepts.hpp"
#include "gsync/core/log.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/core/host_options.hpp"

namespace gsync::bootstrap {
class store_client;
}  // namespace gsync::bootstrap

namespace gsync::transport {

namespace shm {
struct doorbell;
}  // namespace shm

/// The facts of the job a link endpoint is set up from (made by the mesh once its own TCP
/// connections and the host identities are in place).
struct link_setup {
  int rank = 0;                           ///< this rank
  int size = 1;                           ///< world size
  bootstrap::store_client* store = nullptr;  ///< the job's rendezvous store
  const topology* topo = nullptr;         ///< which rank runs on which host
  std::uint64_t nonce = 0;                ///< the job's nonce (unique names)
  bool shares_cores = false;              ///< this machine runs more ranks than it has cores
  deadline dl{};                          ///< end of every wait of the set-up
  logger log;                             ///< where set-up reports go
};

/// The settings of a link type without any.
struct no_link_options {};

/// `link_options_t<L>`'s lookup (use the alias).
template <class L>
struct link_options_of {
  using type = no_link_options;
};
template <class L>
  requires requires { typename link_traits<L>::options; }
struct link_options_of<L> {
  using type = typename link_traits<L>::options;
};

/// The settings of link type `L`: `link_traits<L>::options` where it declares them, else
/// `no_link_options`. Each link type takes its own; the mesh's settings (`host_options`) are not
/// handed to the links.
template <class L>
using link_options_t = typename link_options_of<L>::type;

/// `L`'s settings as a mesh's settings give them: `link_traits<L>::options_from(o)` where the
/// traits say how (gsync's shared-memory link reads its part of `host_options`, which
/// core/config.ipp fills from the GSYNC_* variables), else the type's defaults.
template <class L>
link_options_t<L> link_options_from(const host_options& o) {
  if constexpr (requires { link_traits<L>::options_from(o); }) return link_traits<L>::options_from(o);
  else return link_options_t<L>{};
}

/// The rank-wide part of link type `L`, named by `link_traits<L>::endpoint`:
/// - constructed from a `link_setup` and the link type's settings (`link_options_t<L>`; a type
///   without settings may take the `link_setup` alone) before any pair is connected: publishes,
///   in the store, what the peers need to connect to this rank over the medium (or that it cannot);
/// - `e.connect(s, peer, l)` connects `l` to `peer` and returns true, or returns false (the
///   mesh then tries the next link type in its list). Both ranks of a pair must come to the same
///   answer from what both published;
/// - `e.finish(s)` runs once every peer has its link (choices that depend on all peers);
/// - `e.report()` says, for the set-up log, how the medium was set up ("" when nothing to say).
/// \tparam E the endpoint type. \tparam L its link type.
template <class E, class L>
concept link_endpoint = (std::constructible_from<E, const link_setup&, const link_options_t<L>&> ||
                         (std::same_as<link_options_t<L>, no_link_options> && std::constructible_from<E, const link_setup&>)) &&
                        requires(E& e, const E& ce, const link_setup& s, int peer, L& l) {
                          { e.connect(s, peer, l) } -> std::same_as<bool>;
                          e.finish(s);
                          { ce.report() } -> std::convertible_to<std::string>;
                        };

/// This rank's doorbell, where a mesh sleeps while it waits for links waited for by doorbell
/// (`link_wait::doorbell`, transport/shm.hpp): the endpoint of such a link type derives from it,
/// and the mesh takes the first endpoint of its list that has a bell. Non-templated, so the mesh's
/// waits are compiled once.
class doorbell_owner {
 public:
  /// True when this rank has the bell (its segment was created).
  virtual bool has_bell() const noexcept = 0;
  /// The bell: the peers ring it when they write or free room.
  virtual shm::doorbell& bell() noexcept = 0;
  /// True when sleeps pair with asymmetric fences (shm::arm's `light`).
  virtual bool light() const noexcept = 0;
  /// Raises this rank's `failed` word and rings every peer linked through it.
  virtual void mark_failed(std::uint32_t word) noexcept = 0;
  /// Once every peer has mapped what it must: removes the name (the mapping stays).
  virtual void unlink() noexcept = 0;

 protected:
  ~doorbell_owner() = default;
};

}  // namespace gsync::transport
