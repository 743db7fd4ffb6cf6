#pragma once
/// \file
/// Hierarchical allreduce: inside each host, then across hosts, then inside each host again.
///
/// How chunks move. The L ranks of a host split the buffer into L chunks. (1) Intra-host
/// reduce-scatter with `Intra`'s schedule: afterwards local rank i holds one chunk combined over
/// the ranks of its host (not finalized: the sum is still partial). (2) Inter-host allreduce with
/// `Inter`'s schedule among the H ranks that have the same local index on every host, each working
/// in place on that chunk only; this level completes the reduction and applies the operator's
/// finalize (avg divides by the world size here). (3) Intra-host allgather with `Intra`'s schedule:
/// every rank collects the other L-1 finished chunks from its host's ranks.
/// Per rank, the slow inter-host links carry 2(H-1)/H of B/L bytes instead of the flat ring's
/// 2(N-1)/N of B, and the H parallel inter-host allreduces share each host's links, so the
/// inter-host traffic per host is 2(H-1)/H x B, the minimum. The intra-host levels ride shared
/// memory. Results are bitwise identical on every rank: each chunk is combined in one fixed order.
///
/// Needs every host to run the same number of ranks (topology::uniform()); otherwise, and when
/// there is only one host or one rank per host, it runs the flat schedule of the level that exists
/// (Intra on one host, Inter across single-rank hosts, the ring for irregular placements).
///
/// Requirements on `Intra`: static `reduce_scatter_phase(p, final)` leaving group rank i the chunk
/// `owned_chunk(p)` of `ring_layout`-style chunking, and `allgather_phase(p)` that distributes
/// owned chunks (the ring provides both). `Inter`: any allreduce algorithm.

#include <string_view>

#include "gsync/algo/ring.hpp"
#include "gsync/core/chunking.hpp"
#include "gsync/core/group_primitives.hpp"
#include "gsync/core/topology.hpp"

namespace gsync::algo {

/// Hierarchical algorithm policy.
/// \tparam Intra schedule inside a host (reduce-scatter and allgather phases; default the ring).
/// \tparam Inter allreduce schedule across hosts (default the ring).
template <class Intra = ring, class Inter = ring>
struct hierarchical {
  static constexpr std::string_view name = "hierarchical";

  /// Runs the schedule over primitives `p`, whose transport knows the placement (`p.topo()`).
  /// \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    const topology& t = p.topo();
    const int hosts = t.hosts();
    if (!t.uniform() || t.world() != n) return ring::allreduce(p);
    const int local = t.ranks_per_host();
    if (hosts == 1) return Intra::allreduce(p);
    if (local == 1) return Inter::allreduce(p);
    const int li = t.local_index(r), h = t.host_of(r);
    const auto& mates = t.ranks_on(h);
    group_primitives<P> intra(p, mates, li, 0, p.count(), /*on_output=*/false, /*allow_final=*/false);
    Intra::reduce_scatter_phase(intra, /*final=*/false);
    const range mine = Intra::owned_chunk(intra);
    if (mine.count) {
      group_primitives<P> inter(p, t.cross(li), h, mine.offset, mine.count, /*on_output=*/true, /*allow_final=*/true);
      Inter::allreduce(inter);
    }
    group_primitives<P> gather(p, mates, li, 0, p.count(), /*on_output=*/true, /*allow_final=*/false);
    Intra::allgather_phase(gather);
    p.finish();
  }
};

}  // namespace gsync::algo
