#pragma once
/// \file
/// The choice-and-run step shared by the collectives whose dispatch has no model of its own
/// (gather, scatter, allgatherv, reduce_scatterv, alltoallv: gather.hpp ... alltoallv.hpp): an
/// explicit algorithm runs as given; `algo::automatic` takes the collective's default, or the
/// algorithm its GSYNC_ALGO_<COLLECTIVE> setting names, logs the choice once per shape at
/// GSYNC_DEBUG=INFO and runs it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "gsync/algo/select_collectives.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/dtype.hpp"
#include "gsync/dispatch/collective.hpp"

namespace gsync::detail {

/// Calls `run(A{})` with the algorithm type that runs this operation: `Algo` itself, or for
/// `algo::automatic` the choice among the registered algorithms (`algo::choose_other`). `run`
/// must do nothing for an algorithm without the collective's schedule (only reached when forced
/// by name, which parse_collective refuses first).
/// \param collective its name ("gather"); \param forced its GSYNC_ALGO_<COLLECTIVE> setting;
/// \param automatic the default algorithm; \param bytes this rank's input; \param dt, count, op
/// the shape, for the log. \tparam Algo algorithm policy. \tparam X transport.
template <class Algo, class X, class Run>
void run_chosen(communicator<X>& comm, std::string_view collective, std::string_view forced, algo::collective_id automatic,
                std::size_t bytes, dtype dt, std::size_t count, std::string_view op, Run&& run) {
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const auto ch = algo::choose_other(collective, automatic, bytes, comm.size(), comm.segment_bytes(), forced);
    log_choice(comm, collective, dt, count, op, ch, [](auto i) { return algo::name(i); });
    algo::visit(ch.id, run);
  } else {
    run(Algo{});
  }
}

/// The sum of `counts`, or invalid_argument naming `what` when it does not fit in size_t.
inline std::size_t checked_total(std::string_view what, std::span<const std::size_t> counts) {
  std::size_t t = 0;
  for (std::size_t c : counts) {
    if (c > SIZE_MAX - t) invalid(what, "the counts add up to more elements than size_t holds");
    t += c;
  }
  return t;
}

/// Checks a counts argument: one count per rank.
inline void check_counts(std::string_view what, std::string_view name, std::span<const std::size_t> counts, int world) {
  if (counts.size() != static_cast<std::size_t>(world))
    invalid(what, std::string(name) + " has " + std::to_string(counts.size()) + " entries but must have one per rank (" +
                      std::to_string(world) + ")");
}

/// Where block `b` starts when blocks of `counts` are packed in rank order.
inline std::size_t block_offset(std::span<const std::size_t> counts, int b) noexcept {
  std::size_t o = 0;
  for (int i = 0; i < b; ++i) o += counts[static_cast<std::size_t>(i)];
  return o;
}

}  // namespace gsync::detail
