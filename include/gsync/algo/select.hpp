#pragma once
/// \file
/// Dispatch: the one place where runtime facts (bytes, world size, the links' costs, GSYNC_ALGO, a
/// template hint) become an allreduce algorithm type.
///
/// `algo::automatic` is the default of every collective. For allreduce it estimates the time of
/// every registered schedule (algo/registry.hpp; across hosts also those that only exist there,
/// hierarchical) with the alpha-beta-gamma model (`estimate_us`: alpha per message on the
/// critical path, beta per byte sent, gamma per byte reduced) and picks the cheapest. Each
/// algorithm's file holds its formulas; the constants come from the links: the model the
/// transport's link types declare for ranks of one host (`link_costs`, core/cost_model.hpp),
/// and across hosts the links measured at start-up (core/links.hpp); where the ranks share
/// cores, every message costs what the probe measured (`estimate_placed_us`). Nothing here reads
/// a transport's name. The choice and its reason (the two best estimates) are logged once per
/// collective shape at GSYNC_DEBUG=INFO.

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "gsync/algo/registry.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/topology.hpp"

namespace gsync::algo {

using gsync::cost_model;
using gsync::link_costs;

/// Policy tag: let gsync choose (GSYNC_ALGO overrides).
struct automatic {
  static constexpr std::string_view name = "auto";
};

namespace detail {
template <class... A>
constexpr auto flat_ids(registry<A...>*) noexcept {
  constexpr std::size_t n = ((across_hosts_only<A>() ? 0 : 1) + ...);
  std::array<allreduce_id, n> ids{};
  std::size_t k = 0;
  allreduce_registry::for_each([&](auto a, allreduce_id id) {
    if constexpr (!across_hosts_only<decltype(a)>()) ids[k++] = id;
  });
  return ids;
}
}  // namespace detail

/// Every flat allreduce algorithm (those not `across_hosts_only`), in the registry's order.
inline constexpr auto all_allreduce_ids = detail::flat_ids(static_cast<allreduce_registry*>(nullptr));

/// Names accepted by GSYNC_ALGO and gsync-perf's -a for allreduce: "auto" and the registry's.
inline std::string allreduce_names() {
  std::string r = "auto";
  allreduce_registry::for_each([&](auto a, allreduce_id) { (r += ", ") += decltype(a)::name; });
  return r;
}

/// Names of the device allreduce algorithms (algo/cuda_ipc.hpp), comma-separated.
inline std::string device_allreduce_names() {
  std::string r;
  device_allreduce_registry::for_each([&](auto a, device_allreduce_id) { (r += r.empty() ? "" : ", ") += decltype(a)::name; });
  return r;
}

/// The device allreduce algorithm named `s` (name or alias), if it names one. GSYNC_ALGO set to
/// one of these applies to allreduces of device buffers; host allreduces then choose themselves.
inline std::optional<device_allreduce_id> parse_device_allreduce(std::string_view s) noexcept { return device_allreduce_registry::find(s); }

/// Parses a host algorithm name or alias (nullopt for auto); throws invalid_argument listing the
/// valid names, and saying so when `s` names a device algorithm. Aliases: rd
/// (recursive_doubling), hd and rabenseifner (halving_doubling), hier.
inline std::optional<allreduce_id> parse_allreduce(std::string_view s, std::string_view where) {
  if (s.empty() || s == "auto" || s == "automatic") return std::nullopt;
  if (auto id = allreduce_registry::find(s)) return id;
  if (parse_device_allreduce(s))
    throw error(errc::invalid_argument, std::string(where) + ": '" + std::string(s) +
                                            "' is an allreduce of device buffers over CUDA IPC; host memory runs " + allreduce_names());
  throw error(errc::invalid_argument, std::string(where) + ": unknown allreduce algorithm '" + std::string(s) + "' (valid: " +
                                          allreduce_names() + "; on device buffers also " + device_allreduce_names() + ")");
}

/// The model of the links inside the hosts of a job placed as `topo`, whose ranks of one host
/// talk over links costing `local`: that model, with the cost of a message timed at start-up where
/// the probe measured it (core/links.hpp), and no gamma: the network's model has none (it could
/// not be told from beta), and the flat schedules' reductions are priced with it, so the
/// hierarchical schedule's must not be priced higher.
inline cost_model intra_model(const link_costs& local, const topology& topo) noexcept {
  cost_model m = local.model;
  if (const auto& l = topo.links(); l && l->intra_alpha_us > 0) m.alpha_us = l->intra_alpha_us;
  m.gamma_us_per_byte = 0;
  return m;
}

/// The network between hosts from the user's description: the assumed links of
/// `link_estimate{}` with the link rate `gbps` (Gbit/s per direction; GSYNC_NET_GBPS) and the
/// per-message cost `latency_us` (GSYNC_NET_LATENCY_US) where given. Throws invalid_argument on
/// values that are not positive numbers.
inline cost_model network_model(const std::optional<std::string>& gbps, const std::optional<std::string>& latency_us) {
  return cost_model::network(gsync::detail::override_links({}, gbps, latency_us));
}

/// `network_model` of GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US, read once per process: the links
/// when the transport has not recorded them (`topology::links()`). Every rank must see the same
/// values: ranks that choose different algorithms fail with errc::mismatch.
inline cost_model network_from_env() {
  static const cost_model m = cost_model::network(gsync::detail::override_links_from_env());
  return m;
}

/// The network model of a job placed as `topo`: its recorded links (measured at start-up, with
/// the user's GSYNC_NET_* applied), else `network_from_env()`.
inline cost_model network_of(const topology& topo) {
  if (const auto& l = topo.links()) return cost_model::network(*l);
  return network_from_env();
}

/// halving_doubling::step_penalty, by its older name.
inline constexpr double hd_step_penalty = halving_doubling::step_penalty;

/// Estimated time in microseconds of allreduce algorithm `id` on `bytes` over `world` ranks on
/// one host, with the links' model `m`: the algorithm's own `allreduce_us` (the formulas are in
/// each algorithm's file: ring.hpp, recursive_doubling.hpp, ...), in terms of s = bytes, N =
/// world, P = largest power of two <= N, L = log2 P, f = 1 when N != P, H = floor(log2 N)
/// (`world_shape`), the segment size and the scratch size of the model. N = 1 costs nothing for
/// every algorithm (a local copy).
inline double estimate_us(allreduce_id id, std::size_t bytes, int world, const cost_model& m) noexcept {
  if (world <= 1) return 0.0;
  const world_shape w(bytes, world);
  return visit(id, [&](auto a) { return decltype(a)::allreduce_us(w, m); });
}

/// Messages allreduce algorithm `id` sends in all, over every rank, on `bytes` over `world`
/// ranks, with the pieces of model `m` (each algorithm's `allreduce_messages`).
inline double total_messages(allreduce_id id, std::size_t bytes, int world, const cost_model& m) noexcept {
  if (world <= 1) return 0.0;
  const world_shape w(bytes, world);
  return visit(id, [&](auto a) { return decltype(a)::allreduce_messages(w, m); });
}

/// Bytes one rank sends, averaged over the ranks, when allreduce algorithm `id` reduces `bytes`
/// over `world` ranks (each algorithm's `allreduce_bytes_sent`; 0 for one rank).
inline double bytes_sent(allreduce_id id, std::size_t bytes, int world) noexcept {
  if (world <= 1) return 0.0;
  const world_shape w(bytes, world);
  return visit(id, [&](auto a) { return decltype(a)::allreduce_bytes_sent(w); });
}

/// The part of the smaller of the two resources' times (cores, links) that does not overlap with
/// the larger when ranks share cores, fitted to the forced runs of estimate_placed_us; a quarter
/// also breaks the ties of max(W, C) toward the schedule that needs less of the other resource
/// (benchmarks/results/cluster/A_mid_sizes.md; W and C: benchmarks/results/from_code_comments.md).
inline constexpr double shared_overlap_loss = 0.25;

/// The largest buffer at which halving-doubling measured as fast as the ring when ranks share
/// cores (benchmarks/netcluster.sh, 1 Gbit/s links; benchmarks/results/cluster/A_mid_sizes.md,
/// set 3). Up to here its steps lose nothing to the ring's pipeline; above it hd_step_penalty applies.
inline constexpr std::size_t shared_hd_even_bytes = std::size_t{2} << 20;

namespace detail {
/// estimate_placed_us without shared cores: each algorithm's `allreduce_placed_us`, or its one-host
/// formula priced with the slower hop (`placed_costs::mixed`) where it has none; `hd_pen` on
/// halving-doubling's bytes.
inline double placed_us(allreduce_id id, std::size_t bytes, const topology& t, const cost_model& intra, const cost_model& inter,
                        double hd_pen) noexcept {
  const int world = t.world();
  if (world <= 1) return 0.0;
  // A pipelined step (ring, tree) or a round of messages (direct) that mixes hops inside and
  // across hosts waits for the slower kind of hop.
  cost_model mixed = inter;
  if (t.ranks_per_host() > 1) mixed.alpha_us = std::max(inter.alpha_us, intra.alpha_us);
  const placed_costs c{t, intra, inter, mixed, hd_pen};
  const world_shape w(bytes, world);
  return visit(id, [&](auto a) {
    using A = decltype(a);
    if constexpr (requires { A::allreduce_placed_us(w, c); }) return A::allreduce_placed_us(w, c);
    else return A::allreduce_us(w, mixed);
  });
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
/// Why max and not the sum: the sum misplaced the crossovers between these schedules that forced
/// runs on fake hosts sharing 2 cores measured (benchmarks/results/cluster/A_mid_sizes.md; the W
/// and C behind them in benchmarks/results/from_code_comments.md).
inline double estimate_placed_us(allreduce_id id, std::size_t bytes, const topology& t, const cost_model& intra,
                                 const cost_model& inter) noexcept {
  if (t.world() <= 1) return 0.0;
  if (inter.shared_msg_us <= 0) return detail::placed_us(id, bytes, t, intra, inter, hd_step_penalty);
  cost_model i0 = intra, n0 = inter;
  i0.alpha_us = n0.alpha_us = 0;
  i0.shared_msg_us = n0.shared_msg_us = 0;
  // Halving-doubling's lost overlap (hd_step_penalty) counts where the ring pipelines (a chunk of
  // more than one segment) or the buffer is larger than shared_hd_even_bytes.
  const bool pipelined = message_pieces(static_cast<double>(bytes) / t.world(), inter.segment_bytes) > 1;
  const double pen = pipelined || bytes > shared_hd_even_bytes ? hd_step_penalty : 1.0;
  const double w = detail::placed_us(id, bytes, t, i0, n0, pen);
  const double c = total_messages(id, bytes, t.world(), inter) * inter.shared_msg_us;
  return std::max(w, c) + shared_overlap_loss * std::min(w, c);
}

/// Estimated time of the hierarchical schedule on `hosts` hosts of `local` ranks each
/// (hierarchical::allreduce_hosts_us).
constexpr double estimate_hierarchical_us(std::size_t bytes, int hosts, int local, const cost_model& intra,
                                          const cost_model& inter) noexcept {
  return hierarchical_default::allreduce_hosts_us(bytes, hosts, local, intra, inter);
}

/// A decision, with what it was made from. The choice runs on every collective, so the
/// explanation (`reason()`) is only formatted when somebody asks for it (INFO logging).
struct choice {
  allreduce_id id;                ///< the algorithm chosen
  std::size_t bytes;              ///< message size
  int world;                      ///< ranks
  std::string_view transport;     ///< the links' name (`link_costs::name`), for the reason only
  std::string_view forced;        ///< GSYNC_ALGO value, empty when automatic
  double cost_us = 0;             ///< estimated time of `id` (automatic choice only)
  allreduce_id runner_up = allreduce_id_of<ring>;  ///< the second cheapest (automatic choice only)
  double runner_up_us = 0;        ///< its estimated time
  std::string_view measured{};    ///< non-empty: taken from a measured table (`cores_shared_table`), this says which row
  bool model_declared = true;     ///< false: the transport declared no cost model (`link_costs::declared`)

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
         std::string(name(runner_up)) + " (" +
         std::string(visit(id, [](auto a) { return std::string_view(decltype(a)::allreduce_why); })) + ")";
    if (!model_declared) r += "; the transport declares no cost model, loopback TCP's was assumed";
    return r;
  }
};

/// Measured choices for one machine that runs more ranks than it has cores, over shared memory,
/// where the cost model's per-hop alpha misleads: a wait hands the core to another rank, so what
/// counts is how many times every rank must be scheduled (rounds), and then the work that one
/// core must do alone. `direct` waits once (every rank writes its buffer into every peer's ring,
/// then reduces what arrived), `star` twice with all the reduction on rank 0; recursive doubling
/// waits log2(N) times (plus the fold), halving-doubling and the ring more. Measured with forced
/// algorithms on ranks sharing 2 cores (benchmarks/results/latency_cores_shared.md; the gsync-perf
/// ranges behind this table in benchmarks/results/from_code_comments.md).
/// So: direct up to 1 KiB on 4..8 ranks, star from there to 512 KiB on 6..8 ranks; nullopt (the
/// model decides) elsewhere, also for more than 8 ranks, which were not measured (direct's
/// N(N-1) messages and star's serial root grow with N). 3 ranks: the model already picks direct.
inline std::optional<allreduce_id> cores_shared_table(std::size_t bytes, int world, std::string_view* row = nullptr) noexcept {
  std::string_view why;
  std::optional<allreduce_id> id;
  if (world >= 4 && world <= 8 && bytes <= 1024) id = allreduce_id_of<direct>, why = "4..8 ranks, up to 1 KiB: direct";
  else if (world >= 6 && world <= 8 && bytes <= (std::size_t{512} << 10)) id = allreduce_id_of<star>, why = "6..8 ranks, 1-512 KiB: star";
  if (row) *row = why;
  return id;
}

/// Chooses the allreduce algorithm for `bytes` over `world` ranks whose links inside a host cost
/// `local` (the transport's, `local_costs_of`), honouring `forced` (from GSYNC_ALGO; a device algorithm's name counts as automatic here): the
/// cheapest registered algorithm (algo/registry.hpp) by its estimate with `local.model`.
/// Allocation-free (one closed-form estimate per algorithm). On one machine whose ranks outnumber
/// its cores, over links that share memory, the model is `shared_memory_cores_shared` and
/// `cores_shared_table` overrides it where it has a measured row.
/// With `topo` spanning several hosts, the flat schedules are costed on that placement
/// (`estimate_placed_us`: the network model, `net` else `network_of(*topo)`, for steps that cross
/// hosts, with the link shared by the host's crossing ranks; `intra_model(local, *topo)` for the
/// others) and the schedules that only exist across hosts (hierarchical, when every host runs the
/// same number of ranks, more than one) are compared with them. `segment_bytes` (the
/// communicator's, when given) replaces the models' pipelining unit, which sets the ring's
/// segments and the hierarchical schedule's slice count as the schedules will run them.
inline choice choose_allreduce(std::size_t bytes, int world, const link_costs& local, std::string_view forced,
                               const topology* topo = nullptr, const cost_model* net = nullptr, std::size_t segment_bytes = 0) {
  if (!forced.empty() && parse_device_allreduce(forced)) forced = {};  // GSYNC_ALGO forces device buffers only
  choice c{allreduce_id_of<ring>, bytes, world, local.name, forced};
  c.model_declared = local.declared;
  if (auto f = parse_allreduce(forced, "GSYNC_ALGO")) return c.id = *f, c;
  const bool multi_host = topo && topo->world() == world && topo->hosts() > 1;
  cost_model network = multi_host ? (net ? *net : network_of(*topo)) : cost_model::network();
  cost_model m = multi_host ? network : local.model;
  const bool cores_shared = !multi_host && local.shared_memory && topo && topo->cores_shared();
  if (cores_shared) m = cost_model::shared_memory_cores_shared();
  cost_model intra = multi_host ? intra_model(local, *topo) : local.model;
  if (segment_bytes != 0) network.segment_bytes = m.segment_bytes = intra.segment_bytes = segment_bytes;
  bool have_best = false, have_second = false;
  allreduce_registry::for_each([&](auto a, allreduce_id id) {  // ties keep the earlier entry of the list
    using A = decltype(a);
    double t = 0;
    if constexpr (detail::across_hosts_only<A>()) {
      if (!multi_host) return;
      const auto h = A::allreduce_hosts_us(bytes, *topo, intra, network);
      if (!h) return;
      t = *h;
    } else if (multi_host) {
      t = estimate_placed_us(id, bytes, *topo, intra, network);
    } else if (cores_shared && std::is_same_v<A, halving_doubling> && bytes <= shared_hd_even_bytes) {
      // Ranks sharing cores: up to shared_hd_even_bytes its steps lose nothing to the ring's
      // pipeline (as across hosts, estimate_placed_us): no step penalty on its bytes.
      cost_model even = m;
      even.beta_us_per_byte /= halving_doubling::step_penalty;
      t = estimate_us(id, bytes, world, even);
    } else {
      t = estimate_us(id, bytes, world, m);
    }
    if (!have_best || t < c.cost_us) {
      if (have_best) c.runner_up = c.id, c.runner_up_us = c.cost_us, have_second = true;
      c.id = id, c.cost_us = t, have_best = true;
    } else if (!have_second || t < c.runner_up_us) {
      c.runner_up = id, c.runner_up_us = t, have_second = true;
    }
  });
  if (cores_shared) {
    std::string_view row;
    if (auto t = cores_shared_table(bytes, world, &row); t && *t != c.id) {
      c.runner_up = c.id, c.runner_up_us = c.cost_us;
      c.id = *t, c.cost_us = estimate_us(*t, bytes, world, m), c.measured = row;
    }
  }
  return c;
}

}  // namespace gsync::algo

namespace gsync::algo {

/// A choice among the device allreduce algorithms (algo/cuda_ipc.hpp), with what it was made from.
struct device_choice {
  device_allreduce_id id;            ///< the algorithm chosen
  std::size_t bytes;                 ///< message size
  int gpus;                          ///< GPUs in the CUDA IPC group (per host when `hosts` > 1)
  int hosts;                         ///< hosts
  std::string_view forced;           ///< the setting that forced it ("GSYNC_CUDA_IPC_ALGO=..."), empty when chosen
  double cost_us = 0;                ///< estimated time of `id`
  std::optional<device_allreduce_id> runner_up;  ///< the other candidate, if there was one
  double runner_up_us = 0;           ///< its estimated time

  /// Why `id` was chosen, in words.
  std::string reason() const {
    const auto us = [](double v) {
      std::string t = std::to_string(v);
      return t.substr(0, t.find('.') + 2) + " us";
    };
    std::string r = std::to_string(bytes) + " B on " + std::to_string(gpus) + " GPUs" +
                    (hosts > 1 ? " per host, " + std::to_string(hosts) + " hosts" : std::string()) + " over CUDA IPC: ";
    if (!forced.empty()) return r + "forced by " + std::string(forced);
    if (!runner_up) return r + "the only device algorithm for this placement, estimated " + us(cost_us);
    return r + "cheapest by the device model (assumed constants, algo/cuda_ipc.hpp), estimated " + us(cost_us) + " against " +
           us(runner_up_us) + " for " + std::string(device_allreduce_registry::name(*runner_up)) + " (" +
           std::string(device_allreduce_registry::visit(id, [](auto a) { return std::string_view(decltype(a)::device_why); })) + ")";
  }
};

/// Chooses the device allreduce algorithm for `bytes` where the GPUs formed CUDA IPC groups of
/// `gpus` GPUs on each of `hosts` hosts: across hosts the hierarchical form (the only one), on
/// one host the cheaper of one_shot and two_shot by `m` (ties go to one_shot), unless
/// `ipc_schedule` (GSYNC_CUDA_IPC_ALGO: "", "auto", "oneshot", "twoshot") forces one; `network`
/// prices the level across hosts. Throws invalid_argument on another GSYNC_CUDA_IPC_ALGO value.
inline device_choice choose_device_allreduce(std::size_t bytes, int gpus, int hosts, const ipc_cost_model& m,
                                             std::string_view ipc_schedule, const cost_model& network = cost_model::network()) {
  device_choice c{device_allreduce_registry::id_of<one_shot>(), bytes, gpus, hosts, {}, 0, std::nullopt, 0};
  if (hosts > 1) {
    c.id = device_allreduce_registry::id_of<hierarchical_ipc>();
    c.cost_us = hierarchical_ipc::device_hosts_us(bytes, hosts, gpus, m, network);
    return c;
  }
  if (!ipc_schedule.empty() && ipc_schedule != "auto") {
    if (ipc_schedule == "oneshot" || ipc_schedule == "one-shot") c.forced = "GSYNC_CUDA_IPC_ALGO=oneshot";
    else if (ipc_schedule == "twoshot" || ipc_schedule == "two-shot")
      c.forced = "GSYNC_CUDA_IPC_ALGO=twoshot", c.id = device_allreduce_registry::id_of<two_shot>();
    else
      throw error(errc::invalid_argument, "GSYNC_CUDA_IPC_ALGO='" + std::string(ipc_schedule) + "' is not one of auto, oneshot, twoshot");
    c.cost_us = device_allreduce_registry::visit(c.id, [&](auto a) {
      if constexpr (decltype(a)::across_hosts_only) return 0.0;
      else return decltype(a)::device_us(bytes, gpus, m);
    });
    return c;
  }
  bool have = false;
  device_allreduce_registry::for_each([&](auto a, device_allreduce_id id) {
    using A = decltype(a);
    if constexpr (!A::across_hosts_only) {
      const double t = A::device_us(bytes, gpus, m);
      if (!have || t < c.cost_us) {
        if (have) c.runner_up = c.id, c.runner_up_us = c.cost_us;
        c.id = id, c.cost_us = t, have = true;
      } else if (!c.runner_up || t < c.runner_up_us) {
        c.runner_up = id, c.runner_up_us = t;
      }
    }
  });
  return c;
}

}  // namespace gsync::algo
