#pragma once
/// \file
/// Dispatch: the one place where runtime facts (bytes, world size, transport, GSYNC_ALGO, a
/// template hint) become an algorithm type.
///
/// `algo::automatic` is the default of every collective. Today the only allreduce algorithm is
/// ring, so automatic picks it; the reason is still computed and logged (GSYNC_DEBUG=INFO) once per
/// collective shape so that new algorithms slot into `choose_allreduce` and its table.

#include <optional>
#include <string>
#include <string_view>

#include "gsync/algo/ring.hpp"
#include "gsync/core/error.hpp"

namespace gsync::algo {

/// Policy tag: let gsync choose (GSYNC_ALGO overrides).
struct automatic {
  static constexpr std::string_view name = "auto";
};

/// Runtime identity of an allreduce algorithm.
enum class allreduce_id { ring };

/// Names accepted by GSYNC_ALGO and gsync-perf's -a for allreduce.
inline constexpr std::string_view allreduce_names = "auto, ring";

/// Parses an algorithm name; throws invalid_argument listing the valid names.
inline std::optional<allreduce_id> parse_allreduce(std::string_view s, std::string_view where) {
  if (s.empty() || s == "auto" || s == "automatic") return std::nullopt;
  if (s == "ring") return allreduce_id::ring;
  throw error(errc::invalid_argument, std::string(where) + ": unknown allreduce algorithm '" + std::string(s) +
                                          "' (valid: " + std::string(allreduce_names) + ")");
}

/// A decision and why it was made.
struct choice {
  allreduce_id id;
  std::string reason;
};

/// Chooses the allreduce algorithm for `bytes` over `world` ranks of transport `transport_name`,
/// honouring `forced` (from GSYNC_ALGO).
inline choice choose_allreduce(std::size_t bytes, int world, std::string_view transport_name, std::string_view forced) {
  if (auto f = parse_allreduce(forced, "GSYNC_ALGO"))
    return {*f, "forced by GSYNC_ALGO=" + std::string(forced)};
  (void)bytes;
  return {allreduce_id::ring, "ring is the only allreduce algorithm so far (" + std::to_string(world) +
                                  " ranks over " + std::string(transport_name) + ")"};
}

/// Calls `f(Algo{})` with the algorithm type for `id`.
template <class F>
decltype(auto) visit(allreduce_id id, F&& f) {
  switch (id) {
    case allreduce_id::ring: return f(ring{});
  }
  return f(ring{});
}

}  // namespace gsync::algo
