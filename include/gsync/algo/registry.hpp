#pragma once
/// \file
/// The algorithm registries: the lists the dispatchers (algo/select.hpp, algo/select_collectives.hpp),
/// GSYNC_ALGO*, gsync-perf's -a and the gradient layer's byte counts read, so that adding an
/// algorithm is one new file plus one entry in a list below.
///
/// An allreduce algorithm's file holds its schedule and its model (`allreduce_algorithm_model`):
/// the estimate on one host, the messages and bytes it sends, and optionally its estimate on a
/// placement over several hosts (else its one-host formula is priced with the slower hop); the
/// dispatcher only composes them. An algorithm of the other collectives needs only its schedules:
/// which collectives it serves is read from the schedules it has (concepts in core/concepts.hpp).
/// An algorithm's runtime identity (`registry_id`) is its position in its list; what crosses
/// the wire is its fingerprint code (core/fingerprint.hpp), which is protocol and therefore
/// listed there explicitly: a registered algorithm without one does not compile.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "gsync/algo/binomial_tree.hpp"
#include "gsync/algo/cuda_ipc.hpp"
#include "gsync/algo/direct.hpp"
#include "gsync/algo/dissemination.hpp"
#include "gsync/algo/halving_doubling.hpp"
#include "gsync/algo/hierarchical.hpp"
#include "gsync/algo/pairwise.hpp"
#include "gsync/algo/recursive_doubling.hpp"
#include "gsync/algo/ring.hpp"
#include "gsync/algo/star.hpp"
#include "gsync/algo/tree.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/core/fingerprint.hpp"

namespace gsync::algo {

/// The model an allreduce algorithm carries for the automatic choice (all static, in `A`'s file):
/// - `allreduce_us(world_shape, cost_model)`: estimated time on one host, microseconds;
/// - `allreduce_messages(world_shape, cost_model)`: messages sent in all, over every rank (what
///   ranks that share cores pay for, see algo/select.hpp `estimate_placed_us`);
/// - `allreduce_bytes_sent(world_shape)`: bytes one rank sends, averaged over the ranks;
/// - `allreduce_why`: the reason, in words, the choice gives when it takes `A`.
/// Optional: `allreduce_placed_us(world_shape, placed_costs)` (its estimate when the ranks span
/// hosts), and `across_hosts_only` with `allreduce_hosts_us(bytes, topology, intra, inter)` for a
/// schedule that only exists across hosts (hierarchical).
/// \tparam A an allreduce algorithm policy.
template <class A>
concept allreduce_algorithm_model = algorithm<A> && requires(const world_shape& w, const cost_model& m) {
  { A::allreduce_us(w, m) } -> std::convertible_to<double>;
  { A::allreduce_messages(w, m) } -> std::convertible_to<double>;
  { A::allreduce_bytes_sent(w) } -> std::convertible_to<double>;
  { A::allreduce_why } -> std::convertible_to<std::string_view>;
};

namespace detail {
/// True for an algorithm that only exists across hosts (`A::across_hosts_only` true).
template <class A>
constexpr bool across_hosts_only() noexcept {
  if constexpr (requires { A::across_hosts_only; }) return bool(A::across_hosts_only);
  else return false;
}

template <std::size_t I, class H, class... T>
struct nth_type {
  using type = typename nth_type<I - 1, T...>::type;
};
template <class H, class... T>
struct nth_type<0, H, T...> {
  using type = H;
};
/// Does `alias` occur as a word of the space-separated list `list`?
constexpr bool word_in(std::string_view list, std::string_view alias) noexcept {
  while (!list.empty()) {
    const auto sp = list.find(' ');
    if (list.substr(0, sp) == alias) return true;
    if (sp == std::string_view::npos) break;
    list.remove_prefix(sp + 1);
  }
  return false;
}
/// Short names an algorithm answers to besides `A::name` (`A::aliases`, space-separated).
template <class A>
constexpr std::string_view aliases_of() noexcept {
  if constexpr (requires { A::aliases; }) return A::aliases;
  else return {};
}
}  // namespace detail

/// The runtime identity of an algorithm of registry `R`: its position in R's list. Two registries'
/// identities are different types, so an allreduce choice cannot be read as a broadcast's.
/// \tparam R the registry.
template <class R>
struct registry_id {
  std::uint8_t index = 0;  ///< position in the list
  friend constexpr bool operator==(registry_id, registry_id) = default;
};

/// A list of algorithm policies, looked up by position, name or type.
/// \tparam A the algorithms, in the order ties are broken (the earlier wins).
template <class... A>
struct registry {
  static_assert(sizeof...(A) > 0 && sizeof...(A) < 255, "a registry lists 1..254 algorithms");
  static_assert(((algo_code(A::name) != gsync::detail::custom_algo_code) && ...),
                "every registered algorithm needs a wire code: add its name to detail::algo_codes in core/fingerprint.hpp");

  using id = registry_id<registry>;          ///< an algorithm of this list
  static constexpr std::size_t size = sizeof...(A);  ///< how many algorithms
  template <std::size_t I>
  using at = typename detail::nth_type<I, A...>::type;  ///< the I-th algorithm

  /// The identity of algorithm `X` (which must be in the list).
  template <class X>
  static constexpr id id_of() noexcept {
    static_assert((std::is_same_v<X, A> || ...), "algorithm not in this registry");
    std::uint8_t i = 0, found = 0;
    ((std::is_same_v<X, A> ? (found = i, ++i) : ++i), ...);
    return id{found};
  }

  /// The name of algorithm `i` ("?" out of range).
  static constexpr std::string_view name(id i) noexcept {
    std::string_view n = "?";
    std::uint8_t k = 0;
    ((k++ == i.index ? (n = A::name, 0) : 0), ...);
    return n;
  }

  /// The algorithm whose name or alias is `s`, if any.
  static constexpr std::optional<id> find(std::string_view s) noexcept {
    std::optional<id> r;
    std::uint8_t k = 0;
    ((!r && (s == A::name || detail::word_in(detail::aliases_of<A>(), s)) ? (r = id{k}, ++k) : ++k), ...);
    return r;
  }

  /// Calls `f(A{}, id)` for every algorithm in order.
  template <class F>
  static constexpr void for_each(F&& f) {
    std::uint8_t k = 0;
    (f(A{}, id{k++}), ...);
  }

  /// Calls `f(X{})` with the algorithm type of `i` and returns what it returns (every call must
  /// return the same type); an index out of range calls it with the first algorithm.
  template <class F>
  static decltype(auto) visit(id i, F&& f) {
    return visit_from<0>(i.index, f);
  }

 private:
  template <std::size_t I, class F>
  static decltype(auto) visit_from(std::uint8_t i, F& f) {
    if constexpr (I + 1 == size) {
      return f(at<I>{});
    } else {
      if (i == I) return f(at<I>{});
      if constexpr (I == 0) {
        if (i >= size) return f(at<0>{});
      }
      return visit_from<I + 1>(i, f);
    }
  }
};

/// Calls `f(X{})` with the algorithm type of `i`. \tparam R the registry.
template <class R, class F>
decltype(auto) visit(registry_id<R> i, F&& f) {
  return R::visit(i, f);
}

/// The name of algorithm `i`. \tparam R the registry.
template <class R>
constexpr std::string_view name(registry_id<R> i) noexcept {
  return R::name(i);
}

/// The hierarchical policy the dispatcher runs: ring inside hosts, ring across hosts.
using hierarchical_default = hierarchical<ring, ring>;

/// Every allreduce algorithm GSYNC_ALGO, gsync-perf and the automatic choice know, in the order
/// the choice lists them (ties go to the earlier). The entry for a new algorithm goes here.
using allreduce_registry = registry<ring, recursive_doubling, halving_doubling, tree, direct, star, hierarchical_default>;

/// The runtime identity of an allreduce algorithm.
using allreduce_id = allreduce_registry::id;

/// The identity of allreduce algorithm `A`. \tparam A a registered allreduce algorithm.
template <class A>
inline constexpr allreduce_id allreduce_id_of = allreduce_registry::id_of<A>();

/// The allreduce algorithms of device buffers over CUDA IPC (algo/cuda_ipc.hpp): forceable like
/// the host ones (template argument, GSYNC_ALGO), chosen among by their models where the GPUs of
/// the communicator formed a CUDA IPC group. A device allreduce forced to a host algorithm (or one
/// that CUDA IPC cannot serve) runs that host schedule on pinned copies (host staging).
using device_allreduce_registry = registry<one_shot, two_shot, hierarchical_ipc>;

/// The runtime identity of a device allreduce algorithm.
using device_allreduce_id = device_allreduce_registry::id;

/// Every algorithm of broadcast, reduce, reduce_scatter, allgather, alltoall, gather, scatter and
/// the v-collectives (allgatherv, reduce_scatterv, alltoallv), in the order
/// their names are listed; which collectives each serves is read from the schedules it has.
/// The entry for a new algorithm goes here.
using collective_registry = registry<ring, binomial_tree, pairwise, dissemination, direct>;

/// The runtime identity of an algorithm of the collectives other than allreduce.
using collective_id = collective_registry::id;

/// The identity of collective algorithm `A`. \tparam A a registered algorithm.
template <class A>
inline constexpr collective_id collective_id_of = collective_registry::id_of<A>();

namespace detail {
template <class... A>
constexpr bool all_modelled(registry<A...>*) noexcept {
  return (allreduce_algorithm_model<A> && ...);
}
}  // namespace detail
static_assert(detail::all_modelled(static_cast<allreduce_registry*>(nullptr)),
              "every registered allreduce algorithm carries its model (allreduce_algorithm_model)");
namespace detail {
template <class... A>
constexpr bool all_device_modelled(registry<A...>*) noexcept {
  return (device_allreduce_algorithm<A> && ...);
}
}  // namespace detail
static_assert(detail::all_device_modelled(static_cast<device_allreduce_registry*>(nullptr)),
              "every registered device allreduce algorithm carries its model (device_allreduce_algorithm)");

}  // namespace gsync::algo
