#pragma once
/// \file
/// The arithmetic of the CUDA IPC collectives, apart from any CUDA call so that it is tested
/// everywhere: the arena each rank exports, how a message is cut into chunks that fit one of its
/// two slots, how a chunk is cut into the per-rank slices of the two-shot schedule, and which
/// schedule a message size gets.
///
/// Arena of one rank: [slot 0: S bytes][slot 1: S bytes], rounded up to 2 MiB (CUDA IPC shares the
/// whole underlying block, and the programming guide recommends 2 MiB-aligned sizes). Chunk k of a
/// message uses slot k mod 2, so copying chunk k+1 in overlaps peers still reading chunk k.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gsync/core/error.hpp"

namespace gsync::cuda::ipc {

/// Default bytes of one arena slot (GSYNC_CUDA_IPC_BUFFER).
inline constexpr std::size_t default_slot_bytes = std::size_t{8} << 20;
/// Smallest slot accepted (a chunk must hold at least one element of every type, slices 256 B).
inline constexpr std::size_t min_slot_bytes = std::size_t{64} << 10;
/// Granularity of an arena's size.
inline constexpr std::size_t arena_granularity = std::size_t{2} << 20;
/// Alignment, in bytes, of every two-shot slice start (vectorised kernels, 16-byte loads).
inline constexpr std::size_t slice_align_bytes = 256;

/// The arena of one rank.
struct arena_layout {
  std::size_t slot_bytes = default_slot_bytes;  ///< S: bytes of one slot
  /// Bytes allocated: both slots, rounded up to `arena_granularity`.
  std::size_t bytes() const noexcept {
    return (2 * slot_bytes + arena_granularity - 1) / arena_granularity * arena_granularity;
  }
  /// Byte offset of slot `k` mod 2.
  std::size_t slot_offset(std::uint64_t k) const noexcept { return (k & 1) * slot_bytes; }
};

/// A range of elements.
struct range {
  std::size_t first = 0;  ///< first element
  std::size_t count = 0;  ///< elements
  friend bool operator==(const range&, const range&) = default;
};

/// Elements of size `elem` one chunk holds in a slot of `slot_bytes`.
inline std::size_t chunk_elems(std::size_t slot_bytes, std::size_t elem) noexcept {
  return std::max<std::size_t>(1, slot_bytes / std::max<std::size_t>(1, elem));
}

/// Number of chunks of `per` elements in `count` (0 for an empty message).
inline std::size_t chunks(std::size_t count, std::size_t per) noexcept { return count == 0 ? 0 : (count + per - 1) / per; }

/// Chunk `k` of `count` elements cut into chunks of `per`.
inline range chunk(std::size_t count, std::size_t per, std::size_t k) noexcept {
  const std::size_t first = std::min(count, k * per);
  return {first, std::min(per, count - first)};
}

/// Slice of rank `r` of `n` in a chunk of `count` elements of size `elem` (two-shot): consecutive,
/// each (but the last non-empty one) a whole number of `slice_align_bytes`, as equal as that allows;
/// trailing ranks get empty slices when the chunk is small.
inline range slice(std::size_t count, int n, int r, std::size_t elem) noexcept {
  const std::size_t align = std::max<std::size_t>(1, slice_align_bytes / std::max<std::size_t>(1, elem));
  const std::size_t per_rank = (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
  const std::size_t part = (per_rank + align - 1) / align * align;
  const std::size_t first = std::min(count, part * static_cast<std::size_t>(r));
  return {first, std::min(part, count - first)};
}

/// How the ranks of an IPC group reduce a chunk (the algorithms algo::one_shot and algo::two_shot;
/// algo/cuda_ipc.hpp holds their models, algo/select.hpp the choice).
enum class schedule : std::uint8_t {
  one_shot,  ///< every rank reads every rank's chunk and reduces all of it
  two_shot,  ///< every rank reduces its slice, then gathers the others' reduced slices
};

/// Name of a schedule ("one-shot", "two-shot").
inline std::string_view name(schedule s) noexcept { return s == schedule::one_shot ? "one-shot" : "two-shot"; }

}  // namespace gsync::cuda::ipc
