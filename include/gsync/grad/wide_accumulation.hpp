#pragma once
/// \file
/// Allreduce of 16-bit gradients (bfloat16, half) with float32 accumulation across ranks: every
/// element is rounded to 16 bits once, after all N contributions are summed in float32, instead
/// of once per hop (a ring rounds each partial sum back to 16 bits N-1 times, so its error grows
/// with N and depends on the element's chunk).
///
/// How the chunks move: the bucket is cut into N blocks of ceil(count / N) elements (the last
/// padded with zeros in a scratch copy). An alltoall hands block r of every rank to rank r, still
/// in 16 bits; rank r converts the N blocks to float32, sums them in rank order 0, 1, ..., N-1
/// (averaging in float32 when asked), rounds once, and an allgather returns the owners' blocks to
/// every rank. Wire bytes are the ring's, 2 (N-1)/N of the bucket per rank; every rank gets the
/// owner's bits, so the result is bitwise identical everywhere and independent of the placement.
///
/// Scratch: two buffers of N blocks, kept by the caller between calls (`wide_scratch`).

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "gsync/allgather.hpp"
#include "gsync/alltoall.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/half.hpp"
#include "gsync/grad/nonfinite.hpp"

namespace gsync::grad {

/// Scratch of `allreduce_wide`, reused from call to call (grow-only).
struct wide_scratch {
  std::vector<std::byte> send, recv;  ///< N blocks each
};

/// In-place allreduce (sum, or average with `average`) of 16-bit `data` over `comm` with float32
/// accumulation (see the file comment). Every rank calls it with the same size.
/// \tparam X transport. \tparam W bfloat16 or half.
template <transport_policy X, class W>
void allreduce_wide(communicator<X>& comm, std::span<W> data, bool average, wide_scratch& s) {
  static_assert(std::is_same_v<W, bfloat16> || std::is_same_v<W, half>, "allreduce_wide: 16-bit gradients only");
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t count = data.size(), block = (count + n - 1) / n;
  if (count == 0) return;
  const std::size_t bytes = n * block * sizeof(W);
  if (s.send.size() < bytes) s.send.resize(bytes);
  if (s.recv.size() < bytes) s.recv.resize(bytes);
  W* send = reinterpret_cast<W*>(s.send.data());
  W* recv = reinterpret_cast<W*>(s.recv.data());
  std::memcpy(send, data.data(), count * sizeof(W));
  std::fill(send + count, send + n * block, W{});  // padding: zeros, summed harmlessly and never copied back
  alltoall(comm, std::span<const W>(send, n * block), std::span<W>(recv, n * block));
  // rank r owns block r: recv holds block r of every rank, in rank order
  W* own = send + r * block;
  const float inv = 1.0f / static_cast<float>(n);
  for (std::size_t i = 0; i < block; ++i) {
    float acc = detail::to_f(recv[i]);
    for (std::size_t q = 1; q < n; ++q) acc += detail::to_f(recv[q * block + i]);
    own[i] = detail::from_f<W>(average ? acc * inv : acc);
  }
  allgather(comm, std::span<const W>(own, block), std::span<W>(send, n * block));
  std::memcpy(data.data(), send, count * sizeof(W));
}

}  // namespace gsync::grad
