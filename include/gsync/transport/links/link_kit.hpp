#pragma once
/// \file
/// `link_kit`: a mesh's link list as its set-up uses it (transport/mesh/setup.ipp), type-erased:
/// the endpoints of the list's types, and for each peer a port (`link_port`) on the first type
/// whose endpoint connects the pair. `link_kit_of<Ls...>` is the one template behind it; the
/// mesh's set-up itself stays compiled once, whatever the list.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "gsync/core/concepts.hpp"
#include "gsync/transport/links/link_list.hpp"
#include "gsync/transport/links/link_port.hpp"
#include "gsync/transport/links/link_setup.hpp"
#include "gsync/transport/links/tcp_link.hpp"

namespace gsync::transport {

/// A mesh's link list at run time (see the file comment).
class link_kit {
 public:
  virtual ~link_kit() = default;
  /// The types' names in the list's order, joined by ", " (for messages).
  virtual std::string names() const = 0;
  /// Constructs every type's endpoint from the job's facts and its own settings (taken from the
  /// mesh's, `link_options_from`): each publishes in the store what its peers need. Once, before
  /// `connect`.
  virtual void open(const link_setup& s, const host_options& o) = 0;
  /// The port of the first type whose endpoint connects this rank to `peer`, or null when none
  /// does. `ctl` is the mesh's own TCP connection to the peer: a `tcp_link` in the list carries
  /// the pair's data over it rather than over a second connection.
  virtual std::unique_ptr<link_port> connect(const link_setup& s, int peer, tcp_link& ctl) = 0;
  /// Once every peer has its port (choices that depend on all of them).
  virtual void finish(const link_setup& s) = 0;
  /// What the endpoints have to say for the set-up log ("" when nothing).
  virtual std::string report() const = 0;
  /// The first endpoint that holds this rank's doorbell (`doorbell_owner`), else null.
  virtual doorbell_owner* bell_owner() noexcept = 0;
  /// The costs of the list's first type whose ranks share memory, else null.
  virtual const link_costs* shared_memory_costs() const noexcept = 0;
  /// An unopened kit of the same list (a shrunk mesh sets up anew).
  virtual std::unique_ptr<link_kit> fresh() const = 0;
};

/// The kit of `link_list<Ls...>`.
template <class List>
class link_kit_of;

template <class... Ls>
class link_kit_of<link_list<Ls...>> final : public link_kit {
 public:
  using list = link_list<Ls...>;

  std::string names() const override {
    std::string r;
    for (std::string_view n : list::names) r += (r.empty() ? "" : ", ") + std::string(n);
    return r;
  }
  void open(const link_setup& s, const host_options& o) override {
    opts_ = std::tuple<link_options_t<Ls>...>(link_options_from<Ls>(o)...);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (make_endpoint<Ls>(std::get<I>(eps_), s, std::get<I>(opts_)), ...);  // in the list's order
    }(std::index_sequence_for<Ls...>{});
    opened_ = true;
  }
  std::unique_ptr<link_port> connect(const link_setup& s, int peer, tcp_link& ctl) override {
    return connect_from<0>(s, peer, ctl);
  }
  void finish(const link_setup& s) override {
    std::apply([&](auto&... e) { (e->finish(s), ...); }, eps_);
  }
  std::string report() const override {
    std::string r;
    if (!opened_) return r;
    std::apply([&](const auto&... e) { ((r += e->report().empty() ? std::string() : ", " + e->report()), ...); }, eps_);
    return r.empty() ? r : r.substr(2);
  }
  doorbell_owner* bell_owner() noexcept override {
    if (!opened_) return nullptr;
    doorbell_owner* found = nullptr;
    std::apply([&](auto&... e) { ((found = found ? found : bell_of(*e)), ...); }, eps_);
    return found;
  }
  const link_costs* shared_memory_costs() const noexcept override {
    const link_costs* found = nullptr;
    ((found = found || !link_traits<Ls>::costs.shared_memory ? found : &link_traits<Ls>::costs), ...);
    return found;
  }
  std::unique_ptr<link_kit> fresh() const override { return std::make_unique<link_kit_of>(); }

 private:
  template <class L>
  using endpoint_t = typename link_traits<L>::endpoint;
  // Constructs L's endpoint in place (endpoints own mappings and sockets: they do not move).
  template <class L, class E>
  static void make_endpoint(std::optional<E>& e, const link_setup& s, const link_options_t<L>& o) {
    if constexpr (std::constructible_from<E, const link_setup&, const link_options_t<L>&>) e.emplace(s, o);
    else e.emplace(s);
  }
  template <class E>
  static doorbell_owner* bell_of(E& e) noexcept {
    if constexpr (std::is_base_of_v<doorbell_owner, E>) return e.has_bell() ? static_cast<doorbell_owner*>(&e) : nullptr;
    else return nullptr;
  }
  template <std::size_t I>
  std::unique_ptr<link_port> connect_from(const link_setup& s, int peer, tcp_link& ctl) {
    if constexpr (I == list::size) {
      return nullptr;
    } else {
      using L = std::tuple_element_t<I, std::tuple<Ls...>>;
      auto& ep = *std::get<I>(eps_);
      if constexpr (std::is_same_v<L, tcp_link>) {
        if (ep.connect(s, peer, ctl)) return std::make_unique<link_port_of<tcp_link>>(I, ctl);
      } else {
        auto p = std::make_unique<link_port_of<L>>(I);
        if (ep.connect(s, peer, p->link())) return p;
      }
      return connect_from<I + 1>(s, peer, ctl);
    }
  }

  std::tuple<link_options_t<Ls>...> opts_;        // each type's settings (open)
  std::tuple<std::optional<endpoint_t<Ls>>...> eps_;  // each type's endpoint (open)
  bool opened_ = false;
};

/// The kit of `mesh<Ls...>` (declared in transport/mesh_view.hpp).
template <class... Ls>
std::unique_ptr<link_kit> make_link_kit() {
  return std::make_unique<link_kit_of<link_list<Ls...>>>();
}

}  // namespace gsync::transport
