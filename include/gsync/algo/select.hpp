#pragma once
/// \file
/// Dispatch: the one place where runtime facts (bytes, world size, transport, GSYNC_ALGO, a
/// template hint) become an algorithm type.
///
/// `algo::automatic` is the default of every collective. For allreduce it estimates the time of
/// each of the six flat schedules (and, across hosts, the hierarchical one) with one
/// alpha-beta-gamma cost model (`estimate_us`: alpha per message on the critical path, beta per
/// byte sent, gamma per byte reduced; constants in `cost_model`, measured on this project's
/// machine, see benchmarks/results/algorithms/, or measured at start-up across hosts; where the
/// ranks share cores, every message costs what the probe measured, see `estimate_placed_us`) and
/// picks the cheapest. The choice and its reason (the two best estimates) are logged once per
/// collective shape at GSYNC_DEBUG=INFO.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "gsync/algo/direct.hpp"
#include "gsync/algo/halving_doubling.hpp"
#include "gsync/algo/hierarchical.hpp"
#include "gsync/algo/recursive_doubling.hpp"
#include "gsync/algo/ring.hpp"
#include "gsync/algo/star.hpp"
#include "gsync/algo/tree.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/topology.hpp"

namespace gsync::algo {

/// Policy tag: let gsync choose (GSYNC_ALGO overrides).
struct automatic {
  static constexpr std::string_view name = "auto";
};

/// Runtime identity of an allreduce algorithm.
enum class allreduce_id { ring, recursive_doubling, halving_doubling, tree, direct, hierarchical, star };

/// The hierarchical policy the dispatcher runs: ring inside hosts, ring across hosts.
using hierarchical_default = hierarchical<ring, ring>;

/// Every flat allreduce algorithm, in the order the cost model lists them (hierarchical is
/// considered separately, when the ranks span several hosts).
inline constexpr allreduce_id all_allreduce_ids[] = {allreduce_id::ring, allreduce_id::recursive_doubling,
                                                     allreduce_id::halving_doubling, allreduce_id::tree,
                                                     allreduce_id::direct, allreduce_id::star};

/// Names accepted by GSYNC_ALGO and gsync-perf's -a for allreduce.
inline constexpr std::string_view allreduce_names = "auto, ring, recursive_doubling, halving_doubling, tree, direct, star, hierarchical";

/// The name of an allreduce algorithm.
constexpr std::string_view name(allreduce_id id) {
  switch (id) {
    case allreduce_id::ring: return ring::name;
    case allreduce_id::recursive_doubling: return recursive_doubling::name;
    case allreduce_id::halving_doubling: return halving_doubling::name;
    case allreduce_id::tree: return tree::name;
    case allreduce_id::direct: return direct::name;
    case allreduce_id::star: return star::name;
    case allreduce_id::hierarchical: return hierarchical_default::name;
  }
  return "?";
}

/// Parses an algorithm name (nullopt for auto); throws invalid_argument listing the valid names.
/// Short aliases: rd (recursive_doubling), hd and rabenseifner (halving_doubling).
inline std::optional<allreduce_id> parse_allreduce(std::string_view s, std::string_view where) {
  if (s.empty() || s == "auto" || s == "automatic") return std::nullopt;
  if (s == "ring") return allreduce_id::ring;
  if (s == "recursive_doubling" || s == "rd") return allreduce_id::recursive_doubling;
  if (s == "halving_doubling" || s == "hd" || s == "rabenseifner") return allreduce_id::halving_doubling;
  if (s == "tree") return allreduce_id::tree;
  if (s == "direct") return allreduce_id::direct;
  if (s == "star") return allreduce_id::star;
  if (s == "hierarchical" || s == "hier") return allreduce_id::hierarchical;
  throw error(errc::invalid_argument, std::string(where) + ": unknown allreduce algorithm '" + std::string(s) +
                                          "' (valid: " + std::string(allreduce_names) + ")");
}

/// Constants of the allreduce cost model, in microseconds.
///
/// `tcp_loopback` was fitted to gsync-perf runs of every algorithm at N = 2, 3, 4, 8 and 8 B ..
/// 64 MiB over loopback TCP on a 2-core VM shared with other jobs (tables, commands and the fit
/// script in benchmarks/results/algorithms/): alpha = median of time / alpha-coefficient over the
/// points up to 2 KiB, beta and gamma = least squares on relative error over the points from
/// 1 MiB. Caveats: N > 2 ranks share 2 cores, so every hop also pays context switches (alpha,
/// 156 us, is an average over 2..8 ranks and far above a host with a core per rank, where one hop
/// costs about 10 us); the machine was loaded, so single points were off by up to 10x (best of 5
/// runs kept); and gamma could not be separated from beta (the fit gives 0: the reduction overlaps
/// the kernel's copies). Another machine or network adjusts the numbers; `estimate_us` stays.
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
  /// Shared memory between ranks of one host. ASSUMED, not fitted yet: a hop costs about 10 us
  /// (a futex wake-up at worst) and a byte half of loopback TCP's (one copy in, one read out, no
  /// kernel). Only its ratio to `network` matters for the hierarchical choice.
  static constexpr cost_model shared_memory() noexcept { return {10.0, 4.5e-5, 0.0, 512 << 10, 256 << 10}; }
  /// Shared memory on one machine that runs more ranks than it has cores: every hop waits for the
  /// peer to be scheduled, and the ranks' copies and reductions take turns on the cores. Fitted
  /// to gsync-perf on 4 ranks sharing 2 cores (2000 calls a size, forced algorithms, 2 runs that
  /// differ up to 2x): an 8-byte recursive doubling (2 hops) takes 4.6 us, and per byte a step
  /// costs about 2e-4 us (56 us for 256 KiB); halving-doubling overtakes recursive doubling
  /// between 32 and 64 KiB (measured 15.4 / 15.5 us at 32 KiB, 28.6 / 22.4 at 64 KiB, 54.8 /
  /// 34.9 at 128 KiB); with halving-doubling's step penalty this model puts the crossover at
  /// about 66 KB (recursive doubling up to 64 KiB).
  static constexpr cost_model shared_memory_cores_shared() noexcept { return {2.3, 2.0e-4, 0.0, 512 << 10, 256 << 10}; }
  /// Shared memory inside the hosts of a job placed as `topo`: `shared_memory()`, with the cost
  /// of a message timed at start-up where the probe measured it (core/links.hpp).
  static cost_model shared_memory_of(const topology& topo) noexcept {
    cost_model m = shared_memory();
    if (const auto& l = topo.links(); l && l->intra_alpha_us > 0) m.alpha_us = l->intra_alpha_us;
    return m;
  }
  /// TCP between hosts, from the cost of the links (core/links.hpp): measured by the TCP
  /// transport at start-up, given by GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US, or by default assumed
  /// (a 10 Gbit/s link, 50 us per message).
  static constexpr cost_model network(const link_estimate& l = {}) noexcept {
    return {l.alpha_us, l.beta_us_per_byte, 0.0, 512 << 10, 256 << 10, l.shared_msg_us};
  }
  /// The model used for a transport named `transport` ("tcp", "shm", "inproc", ...) when every
  /// rank is on one host. Only loopback TCP has been measured; the ranking of the flat schedules,
  /// not the absolute time, is what matters.
  static constexpr cost_model for_transport(std::string_view transport) noexcept {
    return transport == "shm" ? shared_memory() : tcp_loopback();
  }
};

/// The network between hosts from the user's description: the assumed links of
/// `link_estimate{}` with the link rate `gbps` (Gbit/s per direction; GSYNC_NET_GBPS) and the
/// per-message cost `latency_us` (GSYNC_NET_LATENCY_US) where given. Throws invalid_argument on
/// values that are not positive numbers.
inline cost_model network_model(const std::optional<std::string>& gbps, const std::optional<std::string>& latency_us) {
  return cost_model::network(detail::override_links({}, gbps, latency_us));
}

/// `network_model` of GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US, read once per process: the links
/// when the transport has not recorded them (`topology::links()`). Every rank must see the same
/// values: ranks that choose different algorithms fail with errc::mismatch.
inline cost_model network_from_env() {
  static const cost_model m = cost_model::network(detail::override_links_from_env());
  return m;
}

/// The network model of a job placed as `topo`: its recorded links (measured at start-up, with
/// the user's GSYNC_NET_* applied), else `network_from_env()`.
inline cost_model network_of(const topology& topo) {
  if (const auto& l = topo.links()) return cost_model::network(*l);
  return network_from_env();
}

/// Halving-doubling's steps cannot overlap (step k+1 sends what step k just combined), while the
/// ring pipelines segments across all its steps. With equal byte counts the ring measured faster
/// above 1 MiB: 1.05-1.9x over loopback TCP at 4 and 8 ranks (benchmarks/results/algorithms/); over
/// 1 Gbit/s links from 4 MiB, 1.04-1.22x at 4 and 8 fake hosts, while up to 2 MiB the two took the
/// same time there (benchmarks/results/cluster/A_mid_sizes.md; `shared_hd_even_bytes`). This
/// factor on halving-doubling's bandwidth term stands for that lost overlap.
inline constexpr double hd_step_penalty = 1.1;

namespace detail {
/// How many pieces of `unit` bytes (0 counts as 1) `total` bytes take: at least 1.
constexpr double pieces(double total, std::size_t unit) noexcept {
  const double u = static_cast<double>(unit == 0 ? 1 : unit);
  const double q = static_cast<double>(static_cast<std::size_t>((total + u - 1) / u));
  return q < 1 ? 1.0 : q;
}

/// The quantities of a world of N ranks the estimates share: s = bytes, N, P = largest power of
/// two <= N, L = log2 P, f = 1 when N is not a power of two (else 0), H = floor(log2 N).
struct world_shape {
  double s, N, P, L, f, H;
  constexpr world_shape(std::size_t bytes, int world) noexcept
      : s(static_cast<double>(bytes)), N(world), P(static_cast<double>(std::bit_floor(static_cast<unsigned>(world)))),
        L(std::bit_width(std::bit_floor(static_cast<unsigned>(world))) - 1),
        f(std::has_single_bit(static_cast<unsigned>(world)) ? 0.0 : 1.0), H(std::bit_width(static_cast<unsigned>(world)) - 1) {}
};
}  // namespace detail

/// Estimated time in microseconds of allreduce algorithm `id` on `bytes` over `world` ranks.
///
/// With s = bytes, N = world, P = largest power of two <= N, L = log2 P, f = 1 when N != P (else 0),
/// H = floor(log2 N), seg = segment size and scr = scratch size of the model:
/// - ring: 2(N-1) steps, each chunk (s/N) in Sr = ceil(s/N/seg) segments, pipelined (a segment
///   leaves as soon as it has arrived, so the latencies of a pipeline of depth 2(N-1) over Sr
///   segments add up to 2(N-1) + Sr - 1):
///     (2(N-1) + Sr - 1) alpha + 2(N-1)/N s beta + (N-1)/N s gamma
/// - recursive_doubling: L + 2f whole-buffer exchanges (the fold adds two hops), in q = ceil(s/scr)
///   scratch-sized pieces: q (L+2f) alpha + (L+2f) s beta + (L+f) s gamma
/// - halving_doubling: 2L + 2f messages; the core moves 2(P-1)/P of the buffer, the fold 2 whole
///   buffers: (2L+2f) alpha + hd_step_penalty (2(P-1)/P + 2f) s beta + ((P-1)/P + f) s gamma
/// - tree: 2H + St - 1 rounds (St = ceil(s/2/seg) segments per half), each costing about two
///   messages at the busiest rank (interior in one tree: two children, leaf in the other); the
///   busiest rank sends 3 halves up and down its interior tree and 1 in its leaf tree, plus the
///   pipeline fill of 2H segments: 2(2H+St-1) alpha + (2s + 2H s/(2St)) beta + s gamma
/// - direct: q = ceil(s/scr) pieces, each N-1 messages out and in:
///     q (N-1) alpha + (N-1) s beta + (N-1) s gamma
/// - star: two latencies, plus rank 0's own work on the other 2(N-2) messages, one after another,
///   each taken as half an alpha (alpha counts the work at both ends and the wire); rank 0's link
///   carries (N-1) s in, then (N-1) s out: N alpha + 2(N-1) s beta + (N-1) s gamma
/// N = 1 costs nothing for every algorithm (a local copy).
constexpr double estimate_us(allreduce_id id, std::size_t bytes, int world, const cost_model& m) noexcept {
  if (world <= 1) return 0.0;
  const auto [s, N, P, L, f, H] = detail::world_shape(bytes, world);
  const double a = m.alpha_us, b = m.beta_us_per_byte, g = m.gamma_us_per_byte;
  switch (id) {
    case allreduce_id::ring: {
      const double Sr = detail::pieces(s / N, m.segment_bytes);
      return (2 * (N - 1) + Sr - 1) * a + 2 * (N - 1) / N * s * b + (N - 1) / N * s * g;
    }
    case allreduce_id::recursive_doubling:
      return detail::pieces(s, m.scratch_bytes) * (L + 2 * f) * a + (L + 2 * f) * s * b + (L + f) * s * g;
    case allreduce_id::halving_doubling:  // bandwidth term x hd_step_penalty: see cost_model
      return (2 * L + 2 * f) * a + hd_step_penalty * (2 * (P - 1) / P + 2 * f) * s * b + ((P - 1) / P + f) * s * g;
    case allreduce_id::tree: {
      const double St = detail::pieces(s / 2, m.segment_bytes);
      return 2 * (2 * H + St - 1) * a + (2 * s + 2 * H * s / (2 * St)) * b + s * g;
    }
    case allreduce_id::direct:
      return detail::pieces(s, m.scratch_bytes) * (N - 1) * a + (N - 1) * s * b + (N - 1) * s * g;
    case allreduce_id::star:
      return N * a + 2 * (N - 1) * s * b + (N - 1) * s * g;
    case allreduce_id::hierarchical: {  // without a placement: one host, the intra-host ring
      const double Sr = detail::pieces(s / N, m.segment_bytes);
      return (2 * (N - 1) + Sr - 1) * a + 2 * (N - 1) / N * s * b + (N - 1) / N * s * g;
    }
  }
  return 0.0;
}

/// Messages flat allreduce algorithm `id` sends in all, over every rank, on `bytes` over `world`
/// ranks, with the pieces of model `m` (N, P, L, Sr, St, q as in `estimate_us`): ring
/// 2(N-1) N Sr; recursive doubling (P L + 2(N-P)) q; halving-doubling 2 P L + 2(N-P); tree
/// 4(N-1) St (two trees, each segment up and down every edge); direct N(N-1) q; star 2(N-1).
constexpr double total_messages(allreduce_id id, std::size_t bytes, int world, const cost_model& m) noexcept {
  if (world <= 1) return 0.0;
  const auto [s, N, P, L, f, H] = detail::world_shape(bytes, world);
  switch (id) {
    case allreduce_id::ring: return 2 * (N - 1) * N * detail::pieces(s / N, m.segment_bytes);
    case allreduce_id::recursive_doubling: return (P * L + 2 * (N - P)) * detail::pieces(s, m.scratch_bytes);
    case allreduce_id::halving_doubling: return 2 * P * L + 2 * (N - P);
    case allreduce_id::tree: return 4 * (N - 1) * detail::pieces(s / 2, m.segment_bytes);
    case allreduce_id::direct: return N * (N - 1) * detail::pieces(s, m.scratch_bytes);
    case allreduce_id::star: return 2 * (N - 1);
    case allreduce_id::hierarchical: break;
  }
  return 2 * (N - 1) * N * detail::pieces(s / N, m.segment_bytes);
}

/// The part of the smaller of the two resources' times (cores, links) that does not overlap with
/// the larger when ranks share cores. The measurements listed at estimate_placed_us put it
/// between 0 and 0.3 (recursive doubling at 16 KiB on 4 hosts: 276 us for W = 274 and C about
/// 70; the ring at 64 KiB on 8 hosts: C = 1064-1290 for 1263-1369). A quarter also breaks the ties
/// of max(W, C) toward the schedule that needs less of the other resource: at 2 KiB on 4 hosts
/// recursive doubling (W = 34, C = 108) over star (W = 103, C = 81), measured 62-97 against 89-150.
inline constexpr double shared_overlap_loss = 0.25;

/// The largest buffer at which halving-doubling measured as fast as the ring when ranks share
/// cores (benchmarks/netcluster.sh, 1 Gbit/s links, 2026-12-02, time per call in us): 4 hosts
/// 3283 / 3283 at 256 KiB, 13342 / 13169 at 1 MiB, 26406 / 26374 at 2 MiB, then 64289 / 52749 at
/// 4 MiB; 8 hosts 3828 / 3831-4033 at 256 KiB, 31012-31421 / 30833-30981 at 2 MiB, then
/// 64616-70885 / 61729-61890 at 4 MiB. Up to here its steps lose nothing to the ring's pipeline;
/// above it hd_step_penalty applies.
inline constexpr std::size_t shared_hd_even_bytes = std::size_t{2} << 20;

namespace detail {
/// estimate_placed_us without shared cores (the sums described there), with `hd_pen` on
/// halving-doubling's bytes.
inline double placed_us(allreduce_id id, std::size_t bytes, const topology& t, const cost_model& intra, const cost_model& inter,
                        double hd_pen) noexcept {
  const int world = t.world();
  if (world <= 1) return 0.0;
  const auto [s, N, P, L, f, H] = detail::world_shape(bytes, world);
  const int steps = static_cast<int>(L);
  const bool fold = f != 0;
  const double g = inter.gamma_us_per_byte;
  // A pipelined step (ring, tree) or a round of messages (direct) that mixes hops inside and
  // across hosts waits for the slower kind of hop.
  cost_model mixed = inter;
  if (t.ranks_per_host() > 1) mixed.alpha_us = std::max(inter.alpha_us, intra.alpha_us);
  // One hop of `b` bytes with `load` senders of a host crossing at once (0: inside the hosts);
  // `q` messages, bandwidth term times `pen`.
  const auto hop = [&](int load, double b, double q, double pen) {
    return load > 0 ? q * inter.alpha_us + pen * load * b * inter.beta_us_per_byte : q * intra.alpha_us + pen * b * intra.beta_us_per_byte;
  };
  switch (id) {
    case allreduce_id::ring: {
      const double Sr = detail::pieces(s / N, inter.segment_bytes);
      return (2 * (N - 1) + Sr - 1) * mixed.alpha_us + 2 * (N - 1) / N * s * inter.beta_us_per_byte * std::max(1, t.ring_load()) +
             (N - 1) / N * s * g;
    }
    case allreduce_id::recursive_doubling: {
      const double q = detail::pieces(s, inter.scratch_bytes);
      double c = 0;
      for (int k = 0; k < steps; ++k) c += hop(t.xor_load(k), s, q, 1.0);
      if (fold) c += 2 * hop(t.fold_load(), s, q, 1.0);
      return c + (steps + (fold ? 1 : 0)) * s * g;
    }
    case allreduce_id::halving_doubling: {
      double c = 0, share = s;
      for (int i = 0; i < steps; ++i) {
        share /= 2;  // exchanged at the step of distance P / 2^(i+1)
        c += 2 * hop(t.xor_load(steps - 1 - i), share, 1.0, hd_pen);
      }
      if (fold) c += 2 * hop(t.fold_load(), s, 1.0, hd_pen);
      return c + ((P - 1) / P + (fold ? 1 : 0)) * s * g;
    }
    case allreduce_id::direct: {
      const double q = detail::pieces(s, inter.scratch_bytes);
      return q * (N - 1) * mixed.alpha_us + static_cast<double>(t.all_to_all_load()) * s * inter.beta_us_per_byte + (N - 1) * s * g;
    }
    case allreduce_id::star:
    case allreduce_id::tree:
    case allreduce_id::hierarchical: break;
  }
  return estimate_us(id, bytes, world, mixed);
}
}  // namespace detail

/// Estimated time in microseconds of flat allreduce algorithm `id` on `bytes` when the ranks are
/// placed as `t` (several hosts). A step that stays inside every host costs what `intra` says; a
/// step in which some ranks send to other hosts costs `inter`'s per-message time plus the bytes
/// of all the ranks of the busiest host that cross at once, since they share its link
/// (topology::xor_load, fold_load, ring_load, all_to_all_load). With one rank per host every
/// step crosses with one sender, and this is `estimate_us` with `inter`.
/// - ring: (2(N-1) + Sr - 1) alpha' + 2(N-1)/N s beta x ring_load (the crossing hops set the pace),
///   where alpha' is the larger of the two models' alphas when hosts run several ranks (a
///   pipelined step waits for its slowest hop), else inter's;
/// - recursive_doubling: per step k (partner r XOR 2^k) one whole-buffer hop, priced by its load,
///   q times alpha for q scratch-sized pieces; the fold's two hops by fold_load;
/// - halving_doubling: per core step of distance d, two hops (halving and doubling) of the share
///   s/2^(i+1) exchanged there, priced by d's load, bandwidth x hd_step_penalty; the fold as above;
/// - direct: q (N-1) alpha' + all_to_all_load s inter beta;
/// - tree: `estimate_us` with inter's beta and alpha' (its crossings are not modelled: every hop
///   is priced as one that crosses);
/// - star: `estimate_us` with alpha'.
/// When the ranks share cores (`inter.shared_msg_us` > 0), a message's time is the machines' work
/// on it, which the other ranks' messages wait for wherever they are in the schedule: the
/// per-message terms above (the alphas) give way to the cores' time, C = `total_messages` x
/// shared_msg_us. The cores and the links are then two resources that work at once (while the
/// cores run one rank's message, another's bytes cross a link), so the busier of the two sets the
/// time: with W the byte terms, max(W, C) + shared_overlap_loss x min(W, C), not W + C. On these
/// links halving-doubling's time is its bytes' (below) up to shared_hd_even_bytes, so W takes
/// hd_step_penalty only above that, or where the ring pipelines.
/// Measured on fake hosts that share 2 cores (benchmarks/netcluster.sh, 1 Gbit/s links, forced
/// algorithms, 300 calls a size, 2026-12-02; benchmarks/results/cluster/A_mid_sizes.md), time per
/// call in us, where W is the bytes' time at the measured rate:
///   - 4 hosts: recursive doubling (8 messages) 59-104 from 512 B to 4 KiB (C), 137-139 at 8 KiB,
///     276-285 at 16 KiB (W = 274), 550 at 32 KiB; halving-doubling (16 messages) 105-205 up to
///     8 KiB (C), 204-232 at 16 KiB (W = 205), 412-423 at 32 KiB, 826 at 64 KiB (W = 823); the ring
///     (24 messages) 306-315 at 16 KiB (C), 417 at 32 KiB (W).
///   - 8 hosts: recursive doubling (24 messages) 180-480 up to 8 KiB (C), 411-444 at 16 KiB
///     (W = 413); halving-doubling (48 messages) 400-700 up to 16 KiB (C), 484-706 at 32 KiB
///     (W = 482, C of the slower run's messages about 650), 964-1018 at 64 KiB (W = 963); the ring
///     (112 messages) 1263-1369 at 64 KiB (C).
/// The sum put the crossover between recursive doubling and halving-doubling at 48 KiB on 4 hosts
/// and the ring ahead of halving-doubling at 64 KiB on 8; they lie between 8 and 16 KiB, and
/// halving-doubling is 1.3x faster at 64 KiB.
inline double estimate_placed_us(allreduce_id id, std::size_t bytes, const topology& t, const cost_model& intra,
                                 const cost_model& inter) noexcept {
  if (t.world() <= 1) return 0.0;
  if (inter.shared_msg_us <= 0) return detail::placed_us(id, bytes, t, intra, inter, hd_step_penalty);
  cost_model i0 = intra, n0 = inter;
  i0.alpha_us = n0.alpha_us = 0;
  i0.shared_msg_us = n0.shared_msg_us = 0;
  // Halving-doubling's lost overlap (hd_step_penalty) counts where the ring pipelines (a chunk of
  // more than one segment) or the buffer is larger than shared_hd_even_bytes.
  const bool pipelined = detail::pieces(static_cast<double>(bytes) / t.world(), inter.segment_bytes) > 1;
  const double pen = pipelined || bytes > shared_hd_even_bytes ? hd_step_penalty : 1.0;
  const double w = detail::placed_us(id, bytes, t, i0, n0, pen);
  const double c = total_messages(id, bytes, t.world(), inter) * inter.shared_msg_us;
  return std::max(w, c) + shared_overlap_loss * std::min(w, c);
}

/// Estimated time of the hierarchical schedule on `hosts` hosts of `local` ranks each: the ring
/// reduce-scatter and allgather inside a host (model `intra`, s bytes over L ranks), plus the ring
/// allreduce of s/L bytes across the H hosts (model `inter`), where the L cross-host allreduces of
/// a host run at once and share its link: together they put 2(H-1)/H s bytes on it, against the
/// flat ring's 2(N-1)/N s. The schedule runs in J slices (`hierarchical::slices`, one per L
/// segments of the model's size, at most 16) that flow through the levels as a pipeline: with
/// a and b the times of one slice inside and across hosts, it takes a + b to fill and drain
/// and (J-1) max(a, b) in between; each slice pays the per-message costs again.
constexpr double estimate_hierarchical_us(std::size_t bytes, int hosts, int local, const cost_model& intra,
                                          const cost_model& inter) noexcept {
  const double H = hosts, L = local;
  const std::size_t J = hierarchical_default::slices(bytes, local, intra.segment_bytes);
  const double s = static_cast<double>(bytes) / static_cast<double>(J);  // one slice
  const double a = estimate_us(allreduce_id::ring, static_cast<std::size_t>(s), local, intra);
  const double b = estimate_us(allreduce_id::ring, static_cast<std::size_t>(s / L), hosts, inter) +
                   (L - 1) * 2 * (H - 1) / H * (s / L) * inter.beta_us_per_byte;
  return a + b + static_cast<double>(J - 1) * std::max(a, b);
}

/// A decision, with what it was made from. The choice runs on every collective, so the
/// explanation (`reason()`) is only formatted when somebody asks for it (INFO logging).
struct choice {
  allreduce_id id;                ///< the algorithm chosen
  std::size_t bytes;              ///< message size
  int world;                      ///< ranks
  std::string_view transport;     ///< transport name
  std::string_view forced;        ///< GSYNC_ALGO value, empty when automatic
  double cost_us = 0;             ///< estimated time of `id` (automatic choice only)
  allreduce_id runner_up = allreduce_id::ring;  ///< the second cheapest (automatic choice only)
  double runner_up_us = 0;        ///< its estimated time
  std::string_view measured{};    ///< non-empty: taken from a measured table (`cores_shared_table`), this says which row

  /// Why `id` was chosen, in words.
  std::string reason() const {
    if (!forced.empty() && forced != "auto" && forced != "automatic") return "forced by GSYNC_ALGO=" + std::string(forced);
    const auto us = [](double v) {
      std::string t = std::to_string(v);
      return t.substr(0, t.find('.') + 2) + " us";
    };
    std::string r = std::to_string(bytes) + " B on " + std::to_string(world) + " ranks over " + std::string(transport) + ": ";
    if (world <= 1) return r + "one rank, a local copy";
    if (!measured.empty())
      return r + "measured table for ranks sharing cores (" + std::string(measured) + "; the model's choice " +
             std::string(name(runner_up)) + ", estimated " + us(runner_up_us) + ")";
    r += "cheapest by the alpha-beta-gamma model, estimated " + us(cost_us) + " against " + us(runner_up_us) + " for " +
         std::string(name(runner_up));
    switch (id) {
      case allreduce_id::ring: return r + " (bandwidth-bound: the pipelined ring moves 2(N-1)/N of the buffer)";
      case allreduce_id::recursive_doubling: return r + " (latency-bound: log2(N) whole-buffer exchanges)";
      case allreduce_id::halving_doubling: return r + " (log2(N) latencies and 2(P-1)/P of the buffer)";
      case allreduce_id::tree: return r + " (pipelined double binary tree: log2(N) depth, about 2x the buffer per rank)";
      case allreduce_id::direct: return r + " (one round: every rank sends its buffer to every other)";
      case allreduce_id::star: return r + " (the fewest messages: every rank's buffer to rank 0 and the result back)";
      case allreduce_id::hierarchical:
        return r + " (ranks span several hosts: reduce inside each host over shared memory, across hosts only 1/L of the"
                   " buffer per rank, 2(H-1)/H of it per host link)";
    }
    return r;
  }
};

/// Measured choices for one machine that runs more ranks than it has cores, over shared memory,
/// where the cost model's per-hop alpha misleads: a wait hands the core to another rank, so what
/// counts is how many times every rank must be scheduled (rounds), and then the work that one
/// core must do alone. `direct` waits once (every rank writes its buffer into every peer's ring,
/// then reduces what arrived), `star` twice with all the reduction on rank 0; recursive doubling
/// waits log2(N) times (plus the fold), halving-doubling and the ring more. Measured on this
/// project's 2-core VM (gsync-perf, 200-1000 calls a size, forced algorithms, interleaved runs
/// that differ by up to 1.6x; 2026-12-02), time per call in us:
///   - 4 ranks, 8 B: direct 12.5-18.3 (median of 4 runs 16.2), recursive doubling 16.3-26.5 (22.0),
///     star 18.7-32.2 (19.1); bursts of 500 calls, best burst over 6 runs: direct 9.3-11.9,
///     recursive doubling 11.6-16.8, Open MPI 12.0-17.7. At 8 KiB the three tie (19-28).
///   - 6 ranks: 8 B direct 26.7, recursive doubling 43.5, star 29-31; 32 KiB star 45.8, ring 117
///     (the model's choice), direct 73.5; 128 KiB star 96.8, ring 150.7; 512 KiB star 302, ring 310;
///     2 MiB ring 1006, star 1412.
///   - 8 ranks: 8 B direct 44-51, star 41-72, recursive doubling 63-95 (the model's choice);
///     2 KiB star 49-64, direct 58-67; 32 KiB star 84-94, halving-doubling 150-206; 512 KiB star
///     428-485, halving-doubling 442-663; 2 MiB ring 1763, star 2396.
/// So: direct up to 1 KiB on 4..8 ranks, star from there to 512 KiB on 6..8 ranks; nullopt (the
/// model decides) elsewhere, also for more than 8 ranks, which were not measured (direct's
/// N(N-1) messages and star's serial root grow with N). 3 ranks: the model already picks direct.
inline std::optional<allreduce_id> cores_shared_table(std::size_t bytes, int world, std::string_view* row = nullptr) noexcept {
  std::string_view why;
  std::optional<allreduce_id> id;
  if (world >= 4 && world <= 8 && bytes <= 1024) id = allreduce_id::direct, why = "4..8 ranks, up to 1 KiB: direct";
  else if (world >= 6 && world <= 8 && bytes <= (std::size_t{512} << 10)) id = allreduce_id::star, why = "6..8 ranks, 1-512 KiB: star";
  if (row) *row = why;
  return id;
}

/// Chooses the allreduce algorithm for `bytes` over `world` ranks of transport `transport_name`,
/// honouring `forced` (from GSYNC_ALGO): the cheapest by `estimate_us` with the transport's
/// `cost_model`. Allocation-free (six closed-form estimates, seven across hosts). On one machine
/// whose ranks outnumber its cores, over shared memory, `cores_shared_table` overrides the model
/// where it has a measured row.
/// With `topo` spanning several hosts, the flat schedules are costed on that placement
/// (`estimate_placed_us`: the network model, `net` else `network_of(*topo)`, for steps that cross
/// hosts, with the link shared by the host's crossing ranks; shared memory for the others) and,
/// when every host runs the same number of ranks (more than one), compared with the hierarchical
/// one. `segment_bytes` (the communicator's, when given)
/// replaces the models' pipelining unit, which sets the ring's segments and the hierarchical
/// schedule's slice count as the schedules will run them.
inline choice choose_allreduce(std::size_t bytes, int world, std::string_view transport_name, std::string_view forced,
                               const topology* topo = nullptr, const cost_model* net = nullptr, std::size_t segment_bytes = 0) {
  if (auto f = parse_allreduce(forced, "GSYNC_ALGO")) return {*f, bytes, world, transport_name, forced};
  const bool multi_host = topo && topo->world() == world && topo->hosts() > 1;
  cost_model network = multi_host ? (net ? *net : network_of(*topo)) : cost_model::network();
  cost_model m = multi_host ? network : cost_model::for_transport(transport_name);
  const bool cores_shared_shm = !multi_host && transport_name == "shm" && topo && topo->cores_shared();
  if (cores_shared_shm) m = cost_model::shared_memory_cores_shared();
  cost_model intra = multi_host ? cost_model::shared_memory_of(*topo) : cost_model::shared_memory();
  if (segment_bytes != 0) network.segment_bytes = m.segment_bytes = intra.segment_bytes = segment_bytes;
  allreduce_id best = allreduce_id::ring, second = allreduce_id::ring;
  double best_us = 0, second_us = 0;
  bool have_best = false, have_second = false;
  for (allreduce_id id : all_allreduce_ids) {  // ties keep the earlier entry of the list
    const double t = multi_host ? estimate_placed_us(id, bytes, *topo, intra, network) : estimate_us(id, bytes, world, m);
    if (!have_best || t < best_us) {
      if (have_best) second = best, second_us = best_us, have_second = true;
      best = id, best_us = t, have_best = true;
    } else if (!have_second || t < second_us) {
      second = id, second_us = t, have_second = true;
    }
  }
  if (cores_shared_shm) {
    std::string_view row;
    if (auto t = cores_shared_table(bytes, world, &row); t && *t != best) {
      choice c{*t, bytes, world, transport_name, forced, estimate_us(*t, bytes, world, m), best, best_us};
      c.measured = row;
      return c;
    }
  }
  if (multi_host && topo->uniform() && topo->ranks_per_host() > 1) {
    const double h = estimate_hierarchical_us(bytes, topo->hosts(), topo->ranks_per_host(), intra, network);
    if (h < best_us) second = best, second_us = best_us, best = allreduce_id::hierarchical, best_us = h;
    else if (h < second_us) second = allreduce_id::hierarchical, second_us = h;
  }
  return {best, bytes, world, transport_name, forced, best_us, second, second_us};
}

/// Calls `f(Algo{})` with the algorithm type for `id`.
template <class F>
decltype(auto) visit(allreduce_id id, F&& f) {
  switch (id) {
    case allreduce_id::recursive_doubling: return f(recursive_doubling{});
    case allreduce_id::halving_doubling: return f(halving_doubling{});
    case allreduce_id::tree: return f(tree{});
    case allreduce_id::direct: return f(direct{});
    case allreduce_id::star: return f(star{});
    case allreduce_id::hierarchical: return f(hierarchical_default{});
    case allreduce_id::ring: break;
  }
  return f(ring{});
}

}  // namespace gsync::algo
