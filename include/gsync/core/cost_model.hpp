#pragma once
/// \file
/// The alpha-beta-gamma cost model the automatic choices price schedules with, and what a link
/// type declares about itself for them (`link_costs`).
///
/// A message of s bytes costs alpha + s beta on its link, and combining s bytes costs s gamma.
/// The constants belong to the links, not to the algorithms: each link type declares its model
/// (transport/links/shm_link.hpp, transport/links/tcp_link.hpp), a transport reports the model of
/// the links its ranks of one host use (`link_costs`), and the links between hosts are measured at start-up
/// (core/links.hpp). The algorithms carry the formulas (algo/ring.hpp, ...), written over the
/// quantities of `world_shape`. The only name compared anywhere is the user's GSYNC_ALGO.

#include <bit>
#include <cstddef>
#include <string_view>

#include "gsync/core/links.hpp"
#include "gsync/core/topology.hpp"

namespace gsync {

/// Constants of the allreduce cost model, in microseconds.
///
/// `tcp_loopback` was fitted to gsync-perf runs of every algorithm at N = 2, 3, 4, 8 and 8 B ..
/// 64 MiB over loopback TCP on a 2-core VM shared with other jobs (tables, commands and the fit
/// script in benchmarks/results/algorithms/): alpha = median of time / alpha-coefficient over the
/// points up to 2 KiB, beta and gamma = least squares on relative error over the points from
/// 1 MiB. Caveats: N > 2 ranks share 2 cores, so every hop also pays context switches (alpha is an
/// average over 2..8 ranks and far above what a hop costs on a host with a core per rank); the
/// machine was loaded, so single points were far off (best of 5 runs kept; the figures:
/// benchmarks/results/algorithms/README.md, tables.md); and gamma could not be separated from beta
/// (the fit gives 0: the reduction overlaps the kernel's copies). Another machine or network
/// adjusts the numbers; the formulas stay.
struct cost_model {
  double alpha_us;           ///< per message on the critical path (latency + per-message overhead)
  double beta_us_per_byte;   ///< per byte sent by the busiest rank (inverse bandwidth)
  double gamma_us_per_byte;  ///< per byte reduced by the busiest rank (inverse reduction speed)
  std::size_t segment_bytes; ///< pipelining unit assumed for ring and tree (the default GSYNC_SEGMENT_BYTES)
  std::size_t scratch_bytes; ///< scratch size assumed for recursive doubling and direct (communicator's)
  /// Time per message when the ranks share cores (link_estimate::shared_msg_us; 0: they do not).
  /// Then every message counts, not only those on the critical path: see `estimate_placed_us`.
  double shared_msg_us = 0;

  /// Fitted on loopback TCP, 2-core VM (see above).
  static constexpr cost_model tcp_loopback() noexcept { return {156.0, 9.0e-5, 0.0, 512 << 10, 256 << 10}; }
  /// Shared memory between ranks of one host, fitted to gsync-perf runs of every algorithm at
  /// N = 2 (a core per rank), 8 B .. 64 MiB, on the 2-core VM (benchmarks/results/issue52/shm_model.md):
  /// alpha = the median time of recursive doubling up to 1 KiB (one message), beta and gamma =
  /// least squares on relative error over the points from 64 KiB. Here the reduction does not
  /// overlap with a copy (both are the same core's work), so gamma is not 0 as over TCP; it is
  /// why the ring takes over from recursive doubling at a few KiB.
  static constexpr cost_model shared_memory() noexcept { return {0.34, 7.8e-5, 9.6e-5, 512 << 10, 256 << 10}; }
  /// Shared memory on one machine that runs more ranks than it has cores: every hop waits for the
  /// peer to be scheduled, and the ranks' copies and reductions take turns on the cores. Fitted
  /// to gsync-perf with forced algorithms on 4 ranks sharing 2 cores, so that with halving-doubling's
  /// step penalty the model's crossover from recursive doubling to halving-doubling falls near the
  /// measured one (benchmarks/results/from_code_comments.md).
  static constexpr cost_model shared_memory_cores_shared() noexcept { return {2.3, 2.0e-4, 0.0, 512 << 10, 256 << 10}; }
  /// TCP between hosts, from the cost of the links (core/links.hpp): measured by the TCP
  /// transport at start-up, given by GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US, or by default assumed
  /// (a 10 Gbit/s link, 50 us per message).
  static constexpr cost_model network(const link_estimate& l = {}) noexcept {
    return {l.alpha_us, l.beta_us_per_byte, 0.0, 512 << 10, 256 << 10, l.shared_msg_us};
  }
};

/// What the automatic choices know of the links between ranks of one host, as the transport's
/// link types declare it: the choices read these fields, never a transport's name.
/// A transport reports it as `x.local_costs()` (concept `costed_transport`) or through
/// `transport_traits<X>::local_costs`; one that does neither is priced as loopback TCP, and
/// `declared` is false so the choice's reason says so (a warning at join, see core/communicator.hpp).
struct link_costs {
  std::string_view name = "tcp";          ///< the links' name, for logs and reasons only
  cost_model model = cost_model::tcp_loopback();  ///< cost of a message between ranks of one host
  /// Ranks of one host exchange through memory they share: on one host whose ranks outnumber its
  /// cores, the measured table of algo/select.hpp (`cores_shared_table`) applies. (Across hosts the
  /// intra-host steps take `model`, with the probe's measured per-message time.)
  bool shared_memory = false;
  bool declared = true;  ///< false: the transport declared nothing and this is the assumed default
};

/// The quantities of a world of N ranks the estimates share: s = bytes, N, P = largest power of
/// two <= N, L = log2 P, f = 1 when N is not a power of two (else 0), H = floor(log2 N).
struct world_shape {
  double s, N, P, L, f, H;
  constexpr world_shape(std::size_t bytes, int world) noexcept
      : s(static_cast<double>(bytes)), N(world), P(static_cast<double>(std::bit_floor(static_cast<unsigned>(world)))),
        L(std::bit_width(std::bit_floor(static_cast<unsigned>(world))) - 1),
        f(std::has_single_bit(static_cast<unsigned>(world)) ? 0.0 : 1.0), H(std::bit_width(static_cast<unsigned>(world)) - 1) {}
};

/// How many pieces of `unit` bytes (0 counts as 1) `total` bytes take: at least 1.
constexpr double message_pieces(double total, std::size_t unit) noexcept {
  const double u = static_cast<double>(unit == 0 ? 1 : unit);
  const double q = static_cast<double>(static_cast<std::size_t>((total + u - 1) / u));
  return q < 1 ? 1.0 : q;
}

/// What a schedule's estimate on a placement over several hosts is made of (algo/select.hpp
/// `estimate_placed_us`): the placement, the models of hops inside hosts (`intra`) and across
/// (`inter`), `mixed` (inter's, with the slower of the two alphas when hosts run several ranks:
/// a pipelined step waits for its slowest hop) and the factor on halving-doubling's bytes.
struct placed_costs {
  const topology& t;
  const cost_model& intra;
  const cost_model& inter;
  cost_model mixed;
  double hd_pen;
  /// One hop of `b` bytes with `load` senders of a host crossing at once (0: inside the hosts);
  /// `q` messages, bandwidth term times `pen`.
  constexpr double hop(int load, double b, double q, double pen) const noexcept {
    return load > 0 ? q * inter.alpha_us + pen * load * b * inter.beta_us_per_byte
                    : q * intra.alpha_us + pen * b * intra.beta_us_per_byte;
  }
};

}  // namespace gsync
