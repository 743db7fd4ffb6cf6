#pragma once
/// \file
/// The links between hosts as two numbers of the alpha-beta model: what one message costs and
/// what one byte costs. Automatic algorithm selection (algo/select.hpp) needs them once ranks span
/// several hosts, because the crossovers between schedules move with them (the faster the links,
/// the larger the buffer at which the ring overtakes halving-doubling).
///
/// Where the numbers come from, in order of precedence:
/// 1. GSYNC_NET_GBPS (link rate, Gbit/s per direction) and GSYNC_NET_LATENCY_US (cost of one
///    message, microseconds), each overriding its own number;
/// 2. the start-up probe of the TCP transport (transport/link_probe.hpp), which times the flat ring
///    when a job spans several hosts (GSYNC_NET_PROBE=0 skips it);
/// 3. an assumed 10 Gbit/s link with 50 us per message (`link_estimate{}`).

#include <optional>
#include <string>

#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"

namespace gsync {

/// Cost of the links between hosts.
struct link_estimate {
  double alpha_us = 50.0;            ///< per message on the critical path (latency + per-message overhead)
  double beta_us_per_byte = 8.0e-4;  ///< per byte through one link direction (8e-4: 10 Gbit/s)
  bool measured = false;             ///< true when the numbers come from the start-up probe
  /// Per message between two ranks of one host (shared memory), timed by the probe when hosts
  /// run several ranks each; 0 when not measured (the cost model's assumption then stands).
  /// Matters on hosts that run more ranks than cores, where a hop waits for a wake-up.
  double intra_alpha_us = 0;
  /// When the ranks share cores (a machine runs more ranks than it has cores, as the fake hosts
  /// of benchmarks/netcluster.sh do): the time per message of a probe step in which every rank
  /// sends one, the 8-byte ring step divided by the ranks. The kernel's and the scheduler's work
  /// per message, not the wire, then sets the pace of small messages, and a schedule that sends M
  /// messages in all takes about M times this, whatever its depth. 0: cores not shared (or not
  /// measured); the per-message cost is then `alpha_us` on the critical path.
  double shared_msg_us = 0;

  /// Link rate in Gbit/s that `beta_us_per_byte` stands for.
  double gbps() const noexcept { return 8.0 / (beta_us_per_byte * 1e3); }
};

namespace detail {

/// `base` with the link rate `gbps` (Gbit/s per direction) and the per-message cost `latency_us`
/// applied where they are positive (`transport::host_options::net_gbps`, `net_latency_us`).
inline link_estimate override_links(link_estimate base, double gbps, double latency_us) noexcept {
  if (gbps > 0) base.beta_us_per_byte = 8.0 / (gbps * 1e3);
  if (latency_us > 0) base.alpha_us = latency_us;
  return base;
}

/// `base` with GSYNC_NET_GBPS (`gbps`, Gbit/s per direction, e.g. "1", "25", "100") and
/// GSYNC_NET_LATENCY_US (`latency_us`) applied where given. Throws invalid_argument on values
/// that are not positive numbers, naming the variable.
inline link_estimate override_links(link_estimate base, const std::optional<std::string>& gbps,
                                    const std::optional<std::string>& latency_us) {
  const auto positive = [](const std::optional<std::string>& v, const char* what) {
    if (!v) return 0.0;
    if (auto x = parse_positive(*v)) return *x;
    throw error(errc::invalid_argument, std::string(what) + "='" + *v + "' is not a positive number");
  };
  return override_links(base, positive(gbps, "GSYNC_NET_GBPS"), positive(latency_us, "GSYNC_NET_LATENCY_US"));
}

/// `override_links(base, ...)` of the variables GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US (parsed in
/// core/config.hpp).
inline link_estimate override_links_from_env(link_estimate base = {}) {
  const auto [gbps, latency_us] = env_net_rates();
  return override_links(base, gbps, latency_us);
}

}  // namespace detail
}  // namespace gsync
