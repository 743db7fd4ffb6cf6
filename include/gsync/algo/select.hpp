#pragma once
/// \file
/// Dispatch: the one place where runtime facts (bytes, world size, transport, GSYNC_ALGO, a
/// template hint) become an algorithm type.
///
/// `algo::automatic` is the default of every collective. For allreduce it weighs the two schedules
/// with the alpha-beta model: recursive doubling costs log2(P) (+2 when N is not a power of two)
/// latencies and moves the whole buffer each time; the ring costs 2(N-1) latencies and moves
/// 2(N-1)/N of the buffer, pipelined. Below a per-world-size threshold (measured on loopback TCP,
/// see benchmarks/results/) the latency term wins and recursive doubling is chosen. The choice and
/// its reason are logged once per collective shape at GSYNC_DEBUG=INFO.

#include <bit>
#include <optional>
#include <string>
#include <string_view>

#include "gsync/algo/recursive_doubling.hpp"
#include "gsync/algo/ring.hpp"
#include "gsync/core/error.hpp"

namespace gsync::algo {

/// Policy tag: let gsync choose (GSYNC_ALGO overrides).
struct automatic {
  static constexpr std::string_view name = "auto";
};

/// Runtime identity of an allreduce algorithm.
enum class allreduce_id { ring, recursive_doubling };

/// Names accepted by GSYNC_ALGO and gsync-perf's -a for allreduce.
inline constexpr std::string_view allreduce_names = "auto, ring, recursive_doubling";

/// The name of an allreduce algorithm.
constexpr std::string_view name(allreduce_id id) {
  return id == allreduce_id::ring ? ring::name : recursive_doubling::name;
}

/// Parses an algorithm name (nullopt for auto); throws invalid_argument listing the valid names.
inline std::optional<allreduce_id> parse_allreduce(std::string_view s, std::string_view where) {
  if (s.empty() || s == "auto" || s == "automatic") return std::nullopt;
  if (s == "ring") return allreduce_id::ring;
  if (s == "recursive_doubling" || s == "rd") return allreduce_id::recursive_doubling;
  throw error(errc::invalid_argument, std::string(where) + ": unknown allreduce algorithm '" + std::string(s) +
                                          "' (valid: " + std::string(allreduce_names) + ")");
}

/// Largest buffer for which recursive doubling beats the ring over `world` ranks.
/// Measured on loopback TCP (2 cores): at 2 and 4 ranks recursive doubling is faster up to
/// 128 KiB; beyond 4 ranks its log2(N) whole-buffer transfers cost more, so the limit shrinks.
inline std::size_t recursive_doubling_limit(int world) {
  if (world <= 4) return 128 << 10;
  return 32 << 10;
}

/// A decision, with what it was made from. The choice runs on every collective, so the
/// explanation (`reason()`) is only formatted when somebody asks for it (INFO logging).
struct choice {
  allreduce_id id;                ///< the algorithm chosen
  std::size_t bytes;              ///< message size
  int world;                      ///< ranks
  std::string_view transport;     ///< transport name
  std::string_view forced;        ///< GSYNC_ALGO value, empty when automatic

  /// Why `id` was chosen, in words.
  std::string reason() const {
    if (!forced.empty() && forced != "auto" && forced != "automatic") return "forced by GSYNC_ALGO=" + std::string(forced);
    const std::size_t limit = recursive_doubling_limit(world);
    const std::string where = " B on " + std::to_string(world) + " ranks over " + std::string(transport);
    if (id == allreduce_id::recursive_doubling)
      return std::to_string(bytes) + " B <= " + std::to_string(limit) + where +
             ": latency-bound, log2(N) whole-buffer exchanges beat 2(N-1) ring steps";
    return std::to_string(bytes) + " B > " + std::to_string(limit) + where +
           ": bandwidth-bound, the pipelined ring moves 2(N-1)/N of the buffer";
  }
};

/// Chooses the allreduce algorithm for `bytes` over `world` ranks of transport `transport_name`,
/// honouring `forced` (from GSYNC_ALGO). Allocation-free.
inline choice choose_allreduce(std::size_t bytes, int world, std::string_view transport_name, std::string_view forced) {
  allreduce_id id = bytes <= recursive_doubling_limit(world) ? allreduce_id::recursive_doubling : allreduce_id::ring;
  if (auto f = parse_allreduce(forced, "GSYNC_ALGO")) id = *f;
  return {id, bytes, world, transport_name, forced};
}

/// Calls `f(Algo{})` with the algorithm type for `id`.
template <class F>
decltype(auto) visit(allreduce_id id, F&& f) {
  if (id == allreduce_id::recursive_doubling) return f(recursive_doubling{});
  return f(ring{});
}

}  // namespace gsync::algo
