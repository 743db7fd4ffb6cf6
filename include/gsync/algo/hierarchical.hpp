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
/// Slices (ring inside and across hosts, the default). A large buffer is cut into J slices (up to
/// 16, each at least L segments) that flow through the three levels as a pipeline, so that the
/// host links never wait for the shared-memory levels: (1) for each slice in turn, the intra-host
/// reduce-scatter, then at once the first inter-host ring step's sends of that slice's chunk are
/// queued (they leave while the next slice is being reduced inside the host); (2) the remaining
/// inter-host reduce-scatter steps, each step over every slice in order, the last one forwarding
/// the finished segments (the first allgather step); (3) the inter-host allgather steps, each
/// over every slice, and right after a slice's last step its intra-host allgather, which runs
/// while the later slices are still crossing hosts. Every connection carries its messages in the
/// same (step, slice, segment) order on both ends. Only the first slice's reduce-scatter and the
/// last slice's allgather are not overlapped with the host links. With J = 1 this is the plain
/// three-level schedule above.
///
/// Two levels, for an `Intra` without separate phases (tree, recursive_doubling,
/// halving_doubling, direct: the latency-optimal schedules). (1) Intra-host allreduce with
/// `Intra`'s schedule over the whole buffer, not finalized: every rank of a host holds the host's
/// combination. (2) Inter-host allreduce with `Inter`'s schedule among the ranks with the same
/// local index, over the whole buffer, in place, finalized. The L groups of step (2) run the same
/// reduction side by side, so each host link carries L times the flat level's bytes: this form
/// suits the small messages these schedules are chosen for (two rounds of latency instead of
/// three). Results are bitwise identical on every rank as long as `Intra` gives every rank of the
/// host the same bits (all of gsync's schedules do).
///
/// Hosts that run different numbers of ranks (not topology::uniform()) take a two-level form
/// without slices: `Intra` reduces inside every host, the first rank of each host runs `Inter`
/// across the hosts, then passes the result down its host's chain (ring broadcast). With one
/// host, or one rank per host, it runs the one level that exists (Intra, or Inter); a transport
/// that does not know the placement counts as one host.
///
/// Requirements: `Intra` and `Inter` are allreduce schedules (any pair). An `Intra` that also has
/// `phased_schedule`'s reduce-scatter and allgather phases (the ring) runs the three-level form.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gsync/algo/ring.hpp"
#include "gsync/core/chunking.hpp"
#include "gsync/core/cost_model.hpp"
#include "gsync/core/group_primitives.hpp"
#include "gsync/core/topology.hpp"

namespace gsync::algo {

/// A schedule with separate phases, as the ring has them: `reduce_scatter_phase(g, final)` leaves
/// group rank i the chunk `owned_chunk(g)` (combined over the group, finalized when `final`), and
/// `allgather_phase(g)` distributes the owned chunks to every group rank.
/// \tparam A the algorithm policy; \tparam G the primitives type it runs over.
template <class A, class G>
concept phased_schedule = requires(G& g, const G& cg) {
  A::reduce_scatter_phase(g, false);
  { A::owned_chunk(cg) } -> std::same_as<range>;
  A::allgather_phase(g);
};

/// Hierarchical algorithm policy.
/// \tparam Intra allreduce schedule inside a host (default the ring; one with reduce-scatter and
///         allgather phases runs the three-level form, any other the two-level form).
/// \tparam Inter allreduce schedule across hosts (default the ring).
template <class Intra = ring, class Inter = ring>
struct hierarchical {
  static constexpr std::string_view name = "hierarchical";
  static constexpr std::string_view aliases = "hier";  ///< other names GSYNC_ALGO* accept

  /// Model (algo/registry.hpp) of the default form, ring inside and across hosts; other pairs are
  /// only run when forced. On one host it is the ring.
  static constexpr double allreduce_us(const world_shape& w, const cost_model& m) noexcept { return ring::allreduce_us(w, m); }
  /// Messages in all, as the ring's on one host.
  static constexpr double allreduce_messages(const world_shape& w, const cost_model& m) noexcept {
    return ring::allreduce_messages(w, m);
  }
  /// Bytes one rank sends, averaged: 2(N-1)/N s as the ring (2(L-1)/L s inside its host, 2(H-1)/H
  /// s/L across).
  static constexpr double allreduce_bytes_sent(const world_shape& w) noexcept { return ring::allreduce_bytes_sent(w); }
  /// Not one of the flat schedules: the automatic choice considers it only through
  /// `allreduce_hosts_us`, when the ranks span several hosts.
  static constexpr bool across_hosts_only = true;
  /// Estimated time on `hosts` hosts of `local` ranks each: the ring reduce-scatter and allgather
  /// inside a host (model `intra`, s bytes over L ranks), plus the ring allreduce of s/L bytes
  /// across the H hosts (model `inter`), where the L cross-host allreduces of a host run at once
  /// and share its link: together they put 2(H-1)/H s bytes on it, against the flat ring's
  /// 2(N-1)/N s. The schedule runs in J slices (`slices`, one per L segments of the model's size,
  /// at most 16) that flow through the levels as a pipeline: with a and b the times of one slice
  /// inside and across hosts, it takes a + b to fill and drain and (J-1) max(a, b) in between;
  /// each slice pays the per-message costs again.
  static constexpr double allreduce_hosts_us(std::size_t bytes, int hosts, int local, const cost_model& intra,
                                             const cost_model& inter) noexcept {
    const double H = hosts, L = local;
    const std::size_t J = slices(bytes, local, intra.segment_bytes);
    const double s = static_cast<double>(bytes) / static_cast<double>(J);  // one slice
    // A level of one rank costs nothing (a local copy).
    const double a = local <= 1 ? 0.0 : ring::allreduce_us(world_shape(static_cast<std::size_t>(s), local), intra);
    const double b = (hosts <= 1 ? 0.0 : ring::allreduce_us(world_shape(static_cast<std::size_t>(s / L), hosts), inter)) +
                     (L - 1) * 2 * (H - 1) / H * (s / L) * inter.beta_us_per_byte;
    return a + b + static_cast<double>(J - 1) * std::max(a, b);
  }
  /// `allreduce_hosts_us` on placement `t`; nullopt where the sliced form does not apply (hosts of
  /// different sizes, one rank per host, one host).
  static std::optional<double> allreduce_hosts_us(std::size_t bytes, const topology& t, const cost_model& intra,
                                                  const cost_model& inter) noexcept {
    if (t.hosts() <= 1 || !t.uniform() || t.ranks_per_host() <= 1) return std::nullopt;
    return allreduce_hosts_us(bytes, t.hosts(), t.ranks_per_host(), intra, inter);
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view allreduce_why =
      "ranks span several hosts: reduce inside each host over its fast links, across hosts only 1/L of the buffer per rank, "
      "2(H-1)/H of it per host link";

  /// Runs the schedule over primitives `p`, whose transport knows the placement (`p.topo()`).
  /// \tparam P a primitives type.
  template <class P>
  static void allreduce(P& p) {
    const int n = p.size(), r = p.rank();
    if (n == 1) return p.copy_final(p.out({0, p.count()}), p.in({0, p.count()}));
    const topology& t = p.topo();
    const int hosts = t.world() == n ? t.hosts() : 1;  // placement unknown: one host
    if (hosts == 1) return Intra::allreduce(p);
    const int li = t.local_index(r), h = t.host_of(r);
    if (!t.uniform()) return uneven(p, t, li, h);
    const int local = t.ranks_per_host();
    if (local == 1) return Inter::allreduce(p);
    if constexpr (std::is_same_v<Intra, ring> && std::is_same_v<Inter, ring>) sliced_ring(p, t, li, h);
    else if constexpr (phased_schedule<Intra, group_primitives<P>>) three_level(p, t, li, h);
    else two_level(p, t, li, h);
  }

  /// Number of slices the sliced schedule cuts `count` elements into, with `local` ranks per host
  /// and segments of `segment_elems`: one per `local` segments, at least 1 and at most 16.
  static constexpr std::size_t slices(std::size_t count, int local, std::size_t segment_elems) noexcept {
    const std::size_t unit = static_cast<std::size_t>(local) * std::max<std::size_t>(1, segment_elems);
    return std::clamp<std::size_t>(count / unit, 1, max_slices);
  }

 private:
  static constexpr std::size_t max_slices = 16;

  // The plain three-level schedule (see file comment): `li`, this rank's index on its host, `h`
  // its host.
  template <class P>
  static void three_level(P& p, const topology& t, int li, int h) {
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

  // Hosts of different sizes (see file comment): Intra in every host, Inter among the hosts' first
  // ranks, then a chain down each host from its first rank.
  template <class P>
  static void uneven(P& p, const topology& t, int li, int h) {
    group_primitives<P> intra(p, t.ranks_on(h), li, 0, p.count(), /*on_output=*/false, /*allow_final=*/false);
    Intra::allreduce(intra);
    if (li == 0) {
      std::vector<int> firsts(static_cast<std::size_t>(t.hosts()));  // topology::cross exists for uniform placements only
      for (int k = 0; k < t.hosts(); ++k) firsts[static_cast<std::size_t>(k)] = t.ranks_on(k).front();
      group_primitives<P> inter(p, firsts, h, 0, p.count(), /*on_output=*/true, /*allow_final=*/true);
      Inter::allreduce(inter);
    }
    group_primitives<P> down(p, t.ranks_on(h), li, 0, p.count(), /*on_output=*/true, /*allow_final=*/false);
    ring::broadcast(down, 0);
    p.finish();
  }

  // The two-level schedule for an unphased `Intra` (see file comment).
  template <class P>
  static void two_level(P& p, const topology& t, int li, int h) {
    group_primitives<P> intra(p, t.ranks_on(h), li, 0, p.count(), /*on_output=*/false, /*allow_final=*/false);
    Intra::allreduce(intra);
    group_primitives<P> inter(p, t.cross(li), h, 0, p.count(), /*on_output=*/true, /*allow_final=*/true);
    Inter::allreduce(inter);
    p.finish();
  }

  // The sliced ring-in-ring schedule (see file comment). `li`: this rank's index on its host,
  // `h`: its host; the inter-host ring runs among the ranks t.cross(li), indexed by host.
  template <class P>
  static void sliced_ring(P& p, const topology& t, int li, int h) {
    const int hosts = t.hosts();
    const auto& mates = t.ranks_on(h);
    const auto& across = t.cross(li);
    const std::size_t J = slices(p.count(), t.ranks_per_host(), p.segment_elems());
    const int next = wrap(h + 1, hosts), prev = wrap(h - 1, hosts);
    std::array<range, max_slices> slice{}, own{};  // each slice, and this rank's chunk of it (absolute)
    auto inter = [&](std::size_t j) {
      return group_primitives<P>(p, across, h, own[j].offset, own[j].count, /*on_output=*/true, /*allow_final=*/true);
    };
    auto layout = [&](std::size_t j) { return ring_layout(own[j].count, hosts, p.segment_elems()); };
    // (1) Reduce each slice inside the host; queue its first inter-host step at once.
    for (std::size_t j = 0; j < J; ++j) {
      slice[j] = split(p.count(), J, j);
      group_primitives<P> intra(p, mates, li, slice[j].offset, slice[j].count, /*on_output=*/false, /*allow_final=*/false);
      ring::reduce_scatter_phase(intra, /*final=*/false);
      const range m = ring::owned_chunk(intra);
      own[j] = {slice[j].offset + m.offset, m.count};
      if (!own[j].count) continue;
      auto x = inter(j);
      const ring_layout L = layout(j);
      for (std::size_t k = 0; k < L.segments(); ++k) x.send(next, x.in(L.segment(h, k)));
    }
    // (2) The inter-host reduce-scatter steps, step by step over all slices; the last step
    // finalizes and forwards (it is the allgather's first send).
    for (int s = 0; s <= hosts - 2; ++s)
      for (std::size_t j = 0; j < J; ++j) {
        if (!own[j].count) continue;
        auto x = inter(j);
        const ring_layout L = layout(j);
        const int c = wrap(h - s - 1, hosts);
        for (std::size_t k = 0; k < L.segments(); ++k) {
          const range seg = L.segment(c, k);
          x.recv_reduce_send(prev, next, x.out(seg), x.in(seg), /*final=*/s == hosts - 2);
        }
      }
    // (3) The inter-host allgather steps over all slices; a slice's last step is followed by its
    // intra-host allgather.
    for (int s = 0; s <= hosts - 2; ++s)
      for (std::size_t j = 0; j < J; ++j) {
        if (own[j].count) {
          auto x = inter(j);
          const ring_layout L = layout(j);
          const int c = wrap(h - s, hosts);
          for (std::size_t k = 0; k < L.segments(); ++k) {
            if (s < hosts - 2) x.recv_copy_send(prev, next, x.out(L.segment(c, k)));
            else x.recv(prev, x.out(L.segment(c, k)));
          }
        }
        if (s == hosts - 2) {
          group_primitives<P> gather(p, mates, li, slice[j].offset, slice[j].count, /*on_output=*/true, /*allow_final=*/false);
          ring::allgather_phase(gather);
        }
      }
    p.finish();
  }
};

}  // namespace gsync::algo
