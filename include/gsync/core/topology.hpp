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
    link_loads();
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

  /// The placement of the ranks `ranks` (in this topology's numbering; rank i of the result is
  /// `ranks[i]`), hosts renumbered by first appearance; measured links and core sharing carry over.
  topology subset(const std::vector<int>& ranks) const {
    std::vector<int> h(ranks.size()), seen;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const int w = host_of(ranks[i]);
      auto it = std::find(seen.begin(), seen.end(), w);
      h[i] = static_cast<int>(it - seen.begin());
      if (it == seen.end()) seen.push_back(w);
    }
    topology t(std::move(h));
    if (links_ && t.hosts() > 1) t.set_links(*links_);
    t.set_cores_shared(cores_shared_);
    return t;
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
  /// Link sharing of the flat schedules (what the cost model needs to price a flat schedule on
  /// this placement). Each is the largest number, over hosts, of the host's ranks that send to a
  /// rank on another host in the same step; 0 when the step stays inside every host.
  /// - `xor_load(k)`: ranks r < P (P = the largest power of two <= world) paired with r XOR 2^k,
  ///   the steps of recursive doubling and halving-doubling;
  /// - `fold_load()`: the fold of those schedules, rank r >= P with r - P (either direction);
  /// - `ring_load()`: each rank r sending to r + 1 (mod world).
  int xor_load(int k) const { return k >= 0 && k < static_cast<int>(xor_load_.size()) ? xor_load_[static_cast<std::size_t>(k)] : 0; }
  int fold_load() const noexcept { return fold_load_; }  ///< see xor_load
  int ring_load() const noexcept { return ring_load_; }  ///< see xor_load
  /// The most senders a host has towards ranks on other hosts when every rank sends to every
  /// other (the direct schedule): max over hosts of L_h (world - L_h).
  long long all_to_all_load() const noexcept {
    long long m = 0;
    for (const auto& g : members_) m = std::max(m, static_cast<long long>(g.size()) * static_cast<long long>(world() - static_cast<int>(g.size())));
    return m;
  }

  /// Cost of the links between hosts, when the transport measured it or the user gave it (see
  /// core/links.hpp); identical on every rank. Empty: one host, or a transport that cannot tell.
  const std::optional<link_estimate>& links() const noexcept { return links_; }
  /// Records the cost of the links between hosts (the transport, once, at setup).
  void set_links(const link_estimate& l) { links_ = l; }
  /// True when this machine runs more ranks than it has cores (the transport decides, at setup,
  /// from what every rank of the machine sees alike: ranks per machine and core count).
  bool cores_shared() const noexcept { return cores_shared_; }
  /// Records whether the ranks share cores (the transport, once, at setup).
  void set_cores_shared(bool v) noexcept { cores_shared_ = v; }

 private:
  // Computes xor_load_, fold_load_ and ring_load_ (see xor_load), once.
  void link_loads() {
    const int n = world();
    if (n <= 1 || hosts() <= 1) return;
    std::vector<int> count(static_cast<std::size_t>(hosts()));
    auto load = [&](auto&& sends_across) {  // max over hosts of the ranks r with sends_across(r)
      std::fill(count.begin(), count.end(), 0);
      int m = 0;
      for (int r = 0; r < n; ++r)
        if (sends_across(r)) m = std::max(m, ++count[static_cast<std::size_t>(host_of(r))]);
      return m;
    };
    int pow2 = 1;
    while (pow2 * 2 <= n) pow2 *= 2;
    for (int d = 1; d < pow2; d <<= 1) xor_load_.push_back(load([&](int r) { return r < pow2 && host_of(r ^ d) != host_of(r); }));
    const int extra = n - pow2;
    fold_load_ = std::max(load([&](int r) { return r >= pow2 && host_of(r - pow2) != host_of(r); }),
                          load([&](int r) { return r < extra && host_of(r + pow2) != host_of(r); }));
    ring_load_ = load([&](int r) { return host_of((r + 1) % n) != host_of(r); });
  }

  std::vector<int> host_of_;
  std::vector<std::vector<int>> members_;
  std::vector<std::vector<int>> cross_;
  std::optional<link_estimate> links_;
  std::vector<int> xor_load_;
  int fold_load_ = 0, ring_load_ = 0;
  bool cores_shared_ = false;
};

}  // namespace gsync
