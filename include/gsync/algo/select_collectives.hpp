#pragma once
/// \file
/// Dispatch for the collectives other than allreduce (whose dispatch is algo/select.hpp): the place
/// where runtime facts (bytes, world size, segment size, a GSYNC_ALGO_<COLLECTIVE> override) become
/// an algorithm type. `algo::automatic` is every collective's default template argument.
///
/// The choices follow the alpha-beta model: a message of n bytes costs alpha + n*beta (alpha: the
/// per-message latency, tens of microseconds on loopback TCP; beta: seconds per byte).
/// - broadcast, reduce: a binomial tree takes ceil(log2 N) message times of the whole buffer,
///   L(alpha + n beta); the pipelined chain (ring policy) cut into S = n/segment segments takes
///   (N-2+S)(alpha + n beta/S), about n beta once S >> N. The model picks the cheaper one for the
///   actual n, N and segment size: the tree for small buffers (and whenever the chain would have
///   few segments), the chain for large ones. alpha/beta is taken as 32 KiB on one host (25 us
///   at 1.3 GB/s, loopback TCP; not yet fitted to measurements) and, when the ranks span several
///   hosts, from the links the transport timed at start-up (core/links.hpp; e.g. 30 us at
///   1 Gbit/s is about 3.6 KB, where the chain pays off much sooner).
/// - reduce_scatter, allgather: the dissemination schedules (algo/dissemination.hpp:
///   ceil(log2 N) rounds, (N-1)/N of the data each way like the ring) for N >= 3 when the whole
///   buffer (N blocks) is at most `latency_bound_bytes` (the communicator's scratch, which the
///   reduce-scatter needs for its partials); the ring (N-1 steps of n/N bytes each way, pipelined
///   in segments) otherwise. Alpha-beta: the ring pays (N-1) latencies, dissemination
///   ceil(log2 N) (plus one where a run of blocks wraps), for the same bytes.
/// - alltoall: pairwise exchange (N-1 steps, one partner each way per step).
/// Every choice and its reason are logged once per collective shape at GSYNC_DEBUG=INFO.

#include <bit>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "gsync/algo/registry.hpp"
#include "gsync/algo/select.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/topology.hpp"

namespace gsync::algo {

namespace detail {
/// Stands for a primitives type when asking which schedules an algorithm has (never defined).
struct any_primitives;

template <class A>
constexpr bool serves(std::string_view collective) noexcept {
  using P = any_primitives;
  if (collective == "broadcast") return broadcast_algorithm<A, P>;
  if (collective == "reduce") return rooted_reduce_algorithm<A, P>;
  if (collective == "reduce_scatter") return reduce_scatter_algorithm<A, P>;
  if (collective == "allgather") return allgather_algorithm<A, P>;
  if (collective == "alltoall") return alltoall_algorithm<A, P>;
  if (collective == "gather") return gather_algorithm<A, P>;
  if (collective == "scatter") return scatter_algorithm<A, P>;
  if (collective == "allgatherv") return allgatherv_algorithm<A, P>;
  if (collective == "reduce_scatterv") return reduce_scatterv_algorithm<A, P>;
  if (collective == "alltoallv") return alltoallv_algorithm<A, P>;
  return false;
}
}  // namespace detail

/// Does algorithm `id` have a schedule for `collective` ("broadcast", "reduce", "reduce_scatter",
/// "allgather", "alltoall", "gather", "scatter", "allgatherv", "reduce_scatterv", "alltoallv")?
/// Read from the schedules it defines, not from a list.
constexpr bool serves(collective_id id, std::string_view collective) noexcept {
  bool r = false;
  collective_registry::for_each([&](auto a, collective_id i) {
    if (i == id) r = detail::serves<decltype(a)>(collective);
  });
  return r;
}

/// The names `collective` accepts: "auto" and the registered algorithms that serve it.
inline std::string valid_names(std::string_view collective) {
  std::string r = "auto";
  collective_registry::for_each([&](auto a, collective_id) {
    if (detail::serves<decltype(a)>(collective)) (r += ", ") += decltype(a)::name;
  });
  return r;
}

/// Parses an algorithm name or alias for `collective` (nullopt for auto); throws invalid_argument
/// naming `where` (the variable or option) and listing the valid names.
inline std::optional<collective_id> parse_collective(std::string_view collective, std::string_view s, std::string_view where) {
  if (s.empty() || s == "auto" || s == "automatic") return std::nullopt;
  const auto id = collective_registry::find(s);
  if (!id || !serves(*id, collective))
    throw error(errc::invalid_argument, std::string(where) + ": unknown " + std::string(collective) + " algorithm '" +
                                            std::string(s) + "' (valid: " + valid_names(collective) + ")");
  return id;
}

/// Largest whole buffer (N blocks, in bytes) for which reduce_scatter and allgather take the
/// dissemination schedules: the communicator's scratch (core/communicator.hpp `scratch_bytes`).
inline constexpr std::size_t latency_bound_bytes = 256 << 10;

/// The alpha/beta ratio of the model on one host, in bytes: a message latency is worth this many bytes.
inline constexpr double alpha_over_beta_bytes = 32 * 1024;

/// The alpha/beta ratio, in bytes, for ranks placed as `topo` (null: unknown): from the links
/// between hosts when the ranks span several and the transport recorded them, else
/// `alpha_over_beta_bytes`.
inline double alpha_bytes_for(const topology* topo) noexcept {
  if (topo && topo->hosts() > 1 && topo->links() && topo->links()->beta_us_per_byte > 0)
    return topo->links()->alpha_us / topo->links()->beta_us_per_byte;
  return alpha_over_beta_bytes;
}

/// Model time, in units of beta, of a binomial tree over `world` ranks for `bytes`, a message
/// latency being worth `alpha_bytes` bytes.
inline double tree_cost(std::size_t bytes, int world, double alpha_bytes = alpha_over_beta_bytes) {
  const double levels = std::bit_width(static_cast<unsigned>(world - 1));  // ceil(log2 N)
  return levels * (alpha_bytes + static_cast<double>(bytes));
}

/// Model time, in units of beta, of the pipelined chain over `world` ranks for `bytes` in
/// segments of `segment_bytes`, a message latency being worth `alpha_bytes` bytes.
inline double chain_cost(std::size_t bytes, int world, std::size_t segment_bytes, double alpha_bytes = alpha_over_beta_bytes) {
  const double s = static_cast<double>(std::max<std::size_t>(1, (bytes + segment_bytes - 1) / std::max<std::size_t>(1, segment_bytes)));
  return (world - 2 + s) * (alpha_bytes + static_cast<double>(bytes) / s);
}

/// A decision, with what it was made from; `reason()` formats the explanation only when asked.
struct collective_choice {
  collective_id id;            ///< the algorithm chosen
  std::string_view collective; ///< which collective
  std::size_t bytes;           ///< message size (per-rank buffer for rooted, one block for the others)
  int world;                   ///< ranks
  std::size_t segment_bytes;   ///< pipelining unit
  std::string_view forced;     ///< GSYNC_ALGO_<COLLECTIVE> value, empty when automatic
  double alpha_bytes = alpha_over_beta_bytes;  ///< the model's alpha/beta ratio (broadcast, reduce)

  /// Why `id` was chosen, in words.
  std::string reason() const {
    if (!forced.empty() && forced != "auto" && forced != "automatic")
      return "forced by " + env_name() + "=" + std::string(forced);
    const std::string where = std::to_string(bytes) + " B on " + std::to_string(world) + " ranks";
    if (collective == "broadcast" || collective == "reduce") {
      const std::string costs =
          " (model: tree " + std::to_string(static_cast<long long>(tree_cost(bytes, world, alpha_bytes))) + " vs chain " +
          std::to_string(static_cast<long long>(chain_cost(bytes, world, segment_bytes, alpha_bytes))) +
          " byte-times, alpha = " + std::to_string(static_cast<long long>(alpha_bytes)) + " B" +
          (alpha_bytes == alpha_over_beta_bytes ? ")" : " from the links timed at start-up)");
      if (id == collective_id_of<binomial_tree>)
        return where + ": latency-bound, ceil(log2 N) whole-buffer hops beat the chain's N-2+S segment hops" + costs;
      return where + ": bandwidth-bound, the pipelined chain moves the buffer about once" + costs;
    }
    if (collective == "alltoall" || collective == "alltoallv") return where + ": pairwise exchange, one partner each way per step";
    if (collective == "gather" || collective == "scatter")
      return where + ": linear, every block straight between the root and its rank (the only " + std::string(collective) + " schedule)";
    if (id == collective_id_of<dissemination>)
      return where + ": latency-bound, ceil(log2 N) rounds instead of the ring's N-1 steps for the same bytes";
    return where + ": the ring moves (N-1)/N of the data each way in pipelined segments, the bandwidth optimum";
  }
  /// The environment variable that overrides this collective's choice.
  std::string env_name() const {
    std::string e = "GSYNC_ALGO_";
    for (char ch : collective) e += static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
    return e;
  }
};

/// Chooses the algorithm of a rooted collective (`collective`: "broadcast" or "reduce", whose
/// override is `env`) for `bytes` over `world` ranks placed as `topo`: the binomial tree or the
/// pipelined chain, whichever the model prices lower, unless `forced` names one. Allocation-free
/// unless `forced` is invalid.
inline collective_choice choose_rooted(std::string_view collective, std::string_view env, std::size_t bytes, int world,
                                       std::size_t segment_bytes, std::string_view forced, const topology* topo) {
  const double ab = alpha_bytes_for(topo);
  collective_id id = tree_cost(bytes, world, ab) <= chain_cost(bytes, world, segment_bytes, ab) ? collective_id_of<binomial_tree>
                                                                                                 : collective_id_of<ring>;
  if (auto f = parse_collective(collective, forced, env)) id = *f;
  return {id, collective, bytes, world, segment_bytes, forced, ab};
}

/// Chooses the broadcast algorithm (`choose_rooted`), honouring `forced` (GSYNC_ALGO_BROADCAST).
inline collective_choice choose_broadcast(std::size_t bytes, int world, std::size_t segment_bytes, std::string_view forced,
                                          const topology* topo = nullptr) {
  return choose_rooted("broadcast", "GSYNC_ALGO_BROADCAST", bytes, world, segment_bytes, forced, topo);
}

/// Chooses the reduce algorithm (`choose_rooted`, as broadcast), honouring `forced` (GSYNC_ALGO_REDUCE).
inline collective_choice choose_reduce(std::size_t bytes, int world, std::size_t segment_bytes, std::string_view forced,
                                       const topology* topo = nullptr) {
  return choose_rooted("reduce", "GSYNC_ALGO_REDUCE", bytes, world, segment_bytes, forced, topo);
}

/// The automatic choice for reduce_scatter and allgather with blocks of `bytes` over `world` ranks.
inline collective_id choose_block_collective(std::size_t bytes, int world) noexcept {
  const bool small = world >= 3 && bytes <= latency_bound_bytes / static_cast<std::size_t>(world);
  return small ? collective_id_of<dissemination> : collective_id_of<ring>;
}

/// Chooses the reduce_scatter algorithm (`choose_block_collective`), honouring `forced`
/// (GSYNC_ALGO_REDUCE_SCATTER).
inline collective_choice choose_reduce_scatter(std::size_t bytes, int world, std::size_t segment_bytes, std::string_view forced) {
  collective_id id = choose_block_collective(bytes, world);
  if (auto f = parse_collective("reduce_scatter", forced, "GSYNC_ALGO_REDUCE_SCATTER")) id = *f;
  return {id, "reduce_scatter", bytes, world, segment_bytes, forced};
}

/// Chooses the allgather algorithm (`choose_block_collective`), honouring `forced`
/// (GSYNC_ALGO_ALLGATHER).
inline collective_choice choose_allgather(std::size_t bytes, int world, std::size_t segment_bytes, std::string_view forced) {
  collective_id id = choose_block_collective(bytes, world);
  if (auto f = parse_collective("allgather", forced, "GSYNC_ALGO_ALLGATHER")) id = *f;
  return {id, "allgather", bytes, world, segment_bytes, forced};
}

/// Chooses the algorithm of `collective` (gather, scatter, allgatherv, reduce_scatterv,
/// alltoallv; `bytes`: this rank's input) among those that serve it: `automatic` (today each has
/// one schedule: linear gather and scatter, the ring for allgatherv and reduce_scatterv, pairwise
/// exchange for alltoallv), unless `forced` (GSYNC_ALGO_<COLLECTIVE>) names another.
inline collective_choice choose_other(std::string_view collective, collective_id automatic, std::size_t bytes, int world,
                                      std::size_t segment_bytes, std::string_view forced) {
  collective_choice ch{automatic, collective, bytes, world, segment_bytes, forced};
  if (auto f = parse_collective(collective, forced, ch.env_name())) ch.id = *f;
  return ch;
}

/// Chooses the alltoall algorithm (pairwise exchange), honouring `forced` (GSYNC_ALGO_ALLTOALL).
inline collective_choice choose_alltoall(std::size_t bytes, int world, std::size_t segment_bytes, std::string_view forced) {
  collective_id id = collective_id_of<pairwise>;
  if (auto f = parse_collective("alltoall", forced, "GSYNC_ALGO_ALLTOALL")) id = *f;
  return {id, "alltoall", bytes, world, segment_bytes, forced};
}

}  // namespace gsync::algo
