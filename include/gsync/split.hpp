#pragma once
/// \file
/// `communicator::split(color, key)`: carving sub-communicators out of a communicator, as
/// `MPI_Comm_split` / `ncclCommSplit` (declared in core/communicator.hpp).
///
/// \code
///   auto row = comm.split(comm.rank() / 4, comm.rank());  // ranks 0-3, 4-7, ... form one each
///   gsync::allreduce(row, std::span<float>{grad});        // among the row only
///   auto none = comm.split(-1);                           // a null communicator: none.valid() == false
/// \endcode
///
/// How: the ranks allgather their (color, key) over the parent (one collective, numbered as any
/// other); each rank keeps those of its color, sorted by key, then parent rank. The new
/// communicator's identity, stamped on every frame it sends (`fingerprint::comm`), is a hash of the
/// parent's identity, the parent's split count and the color: the same on every member, different
/// for every communicator of the job (0 stays the world's). The transport makes a view of its
/// connections over the members (`splittable_transport`); nothing new is connected.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/dispatch/host_allgather.hpp"

namespace gsync {

namespace detail {
/// The identity of the communicator of color `color` made by split number `seq` of the
/// communicator with identity `parent` (splitmix64 over the three; never 0).
constexpr std::uint64_t split_id(std::uint64_t parent, std::uint64_t seq, std::int64_t color) noexcept {
  std::uint64_t x = parent;
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  x = mix(x ^ mix(seq));
  x = mix(x ^ mix(static_cast<std::uint64_t>(color) + 0x632be59bd9b4e019ull));
  return x == 0 ? 1 : x;
}
}  // namespace detail

template <transport_policy X>
communicator<X> communicator<X>::split(int color, int key)
  requires splittable_transport<X>
{
  const int n = size();
  const std::int64_t mine[2] = {color < 0 ? -1 : static_cast<std::int64_t>(color), static_cast<std::int64_t>(key)};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(n));
  detail::allgather_impl<algo::automatic>(*this, mine, all.data(), 2);
  const std::uint64_t seq = ++splits_;
  if (color < 0) return communicator(null_tag{}, cfg_);
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (all[2 * static_cast<std::size_t>(r)] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * static_cast<std::size_t>(a) + 1] < all[2 * static_cast<std::size_t>(b) + 1]; });
  std::unique_ptr<X> x = x_->split(members, detail::split_id(id(), seq, color));
  const int local = x->topo().local_index(x->rank());
  // One timeline per process: a split's own would open (and overwrite) another rank's file.
  communicator sub(std::move(x), cfg_, local, trace_, false);
  sub.log_ = log_;  // log lines name the rank in the job, as messages do
  return sub;
}

}  // namespace gsync
