#pragma once
/// \file
/// Which rank runs on which host: the facts hierarchical algorithms and automatic selection need.
///
/// Hosts are numbered in order of their lowest rank (the host of rank 0 is host 0). Transports
/// that know the placement (the host transport learns it from every rank's host identity at
/// setup) expose it as `topology()`; for the others every rank is on one host. When ranks span
/// several hosts, the TCP transport also records what the links between them cost (`links()`,
/// core/links.hpp), measured at start-up or given by the user.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "gsync/core/links.hpp"

namespace gsync {

/// Placement of the ranks of a communicator on hosts.
class topology {
 public:
  topology() = default;
  /// From each rank's host index (`host_of[r]`, hosts numbered 0.. by lowest rank).
  explicit topology(std::vector<int> host_of) : host_of_(std::move(host_of)) {
    int hosts = 0;
    for (int h : host_of_) hosts = std::max(hosts, h + 1);
    members_.assign(static_cast<std::size_t>(hosts), {});
    for (int r = 0; r < static_cast<int>(host_of_.size()); ++r) members_[static_cast<std::size_t>(host_of_[r])].push_back(r);
    if (uniform()) {
      cross_.assign(members_.front().size(), {});
      for (const auto& m : members_)
        for (std::size_t i = 0; i < m.size(); ++i) cross_[i].push_back(m[i]);
    }
  }
  /// Every one of `world` ranks on one host.
  static topology single_host(int world) { return topology(std::vector<int>(static_cast<std::size_t>(world), 0)); }
  /// Ranks in consecutive blocks of `per_host` (the last host may have fewer).
  static topology blocks(int world, int per_host) {
    std::vector<int> h(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) h[static_cast<std::size_t>(r)] = r / std::max(1, per_host);
    return topology(std::move(h));
  }
  /// From each rank's host identity string (equal strings = one host).
  static topology from_ids(const std::vector<std::string>& ids) {
    std::vector<int> h(ids.size());
    std::vector<std::string> seen;
    for (std::size_t r = 0; r < ids.size(); ++r) {
      auto it = std::find(seen.begin(), seen.end(), ids[r]);
      h[r] = static_cast<int>(it - seen.begin());
      if (it == seen.end()) seen.push_back(ids[r]);
    }
    return topology(std::move(h));
  }

  int world() const noexcept { return static_cast<int>(host_of_.size()); }  ///< ranks
  int hosts() const noexcept { return static_cast<int>(members_.size()); }   ///< hosts
  int host_of(int rank) const { return host_of_[static_cast<std::size_t>(rank)]; }  ///< host of a rank
  /// Ranks on `host`, ascending.
  const std::vector<int>& ranks_on(int host) const { return members_[static_cast<std::size_t>(host)]; }
  /// Position of `rank` among the ranks of its host.
  int local_index(int rank) const {
    const auto& m = ranks_on(host_of(rank));
    return static_cast<int>(std::find(m.begin(), m.end(), rank) - m.begin());
  }
  /// True when every host runs the same number of ranks.
  bool uniform() const noexcept {
    for (const auto& m : members_)
      if (m.size() != members_.front().size()) return false;
    return !members_.empty();
  }
  /// When uniform: the ranks with local index `i` on every host, by host (the inter-host groups
  /// of hierarchical schedules).
  const std::vector<int>& cross(int i) const { return cross_[static_cast<std::size_t>(i)]; }
  /// Ranks per host when uniform, else the largest count.
  int ranks_per_host() const noexcept {
    std::size_t m = 0;
    for (const auto& g : members_) m = std::max(m, g.size());
    return static_cast<int>(m);
  }
  /// Cost of the links between hosts, when the transport measured it or the user gave it (see
  /// core/links.hpp); identical on every rank. Empty: one host, or a transport that cannot tell.
  const std::optional<link_estimate>& links() const noexcept { return links_; }
  /// Records the cost of the links between hosts (the transport, once, at setup).
  void set_links(const link_estimate& l) { links_ = l; }

 private:
  std::vector<int> host_of_;
  std::vector<std::vector<int>> members_;
  std::vector<std::vector<int>> cross_;
  std::optional<link_estimate> links_;
};

}  // namespace gsync
