#pragma once
/// \file
/// What a staged operation moves and how it is cut (cuda/staging.hpp runs it): the device buffers
/// as blocks, the windows that fit the staging mirrors, and the copy pieces of a window. Plain
/// arithmetic, no CUDA call: the staging's plan, tested on its own.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gsync::cuda::detail {

/// Bytes per copy-in piece: the unit a schedule can start on before the rest has arrived.
inline constexpr std::size_t copy_piece_bytes = std::size_t{1} << 20;
/// Alignment of the mirrors' parts (enough for any element type and the SIMD loops).
inline constexpr std::size_t mirror_align = 256;

/// One device buffer of an operation, as `blocks` consecutive blocks of `block_elems` elements
/// of `elem` bytes (one block for most collectives; world-size blocks for reduce-scatter's input,
/// allgather's output and alltoall's). `copy_in`: its contents go to the mirror first; `copy_out`:
/// the mirror's result goes back to it. A window holds `window_elems` elements of each block.
struct staged_buffer {
  std::byte* dev = nullptr;      ///< device address of block 0
  std::size_t blocks = 0;        ///< blocks (0: the operation has no such buffer)
  std::size_t block_elems = 0;   ///< elements per block
  std::size_t elem = 1;          ///< element size in bytes
  bool copy_in = false;          ///< copied device -> mirror before the schedule
  bool copy_out = false;         ///< copied mirror -> device after the schedule
  std::size_t window_elems = 1;  ///< elements per block in one window (set by the plan's cut)
  /// Block sizes where they differ (the v-collectives): block b holds sizes[b] elements, the
  /// blocks packed, `blocks` = sizes.size() and `block_elems` the largest; a window holds the
  /// same columns of every block, packed in the mirror. Null: `blocks` blocks of `block_elems`.
  std::shared_ptr<const std::vector<std::size_t>> sizes;

  /// Elements of block `b` in window `w` (0 past its end).
  std::size_t block_elems_of(std::size_t b, std::size_t w) const noexcept {
    const std::size_t n = sizes ? (*sizes)[b] : block_elems, first = w * window_elems;
    return first >= n ? 0 : std::min(window_elems, n - first);
  }
  /// Elements per block in window `w` (0 past the end); the largest block's for varied sizes.
  std::size_t elems_of(std::size_t w) const noexcept {
    const std::size_t first = w * window_elems;
    return first >= block_elems ? 0 : std::min(window_elems, block_elems - first);
  }
  /// Windows this buffer needs.
  std::size_t windows() const noexcept { return blocks == 0 ? 0 : (block_elems + window_elems - 1) / window_elems; }
};

/// What one staged operation moves and how it is cut into windows.
struct staged_plan {
  staged_buffer in;              ///< the input (the schedule's `in`)
  staged_buffer out;             ///< the output (the schedule's `out`)
  bool alias = false;            ///< in and out share one mirror part (in-place schedules)
  std::size_t windows = 0;       ///< number of windows (0 for an empty operation)

  /// Bytes of the mirror part of buffer `b` in a full window, rounded to mirror_align.
  static std::size_t part_bytes(const staged_buffer& b) noexcept {
    std::size_t n = b.blocks * std::min(b.window_elems, b.block_elems) * b.elem;
    if (b.sizes) {
      n = 0;
      for (std::size_t x : *b.sizes) n += std::min(b.window_elems, x) * b.elem;
    }
    return (n + mirror_align - 1) / mirror_align * mirror_align;
  }
  /// Offset of the output part in the mirror.
  std::size_t out_offset() const noexcept { return alias ? 0 : part_bytes(in); }
  /// Bytes of one mirror.
  std::size_t mirror_bytes() const noexcept { return alias ? std::max(part_bytes(in), part_bytes(out)) : part_bytes(in) + part_bytes(out); }

  /// For collectives (buffers cut alike): windows of the same elements of every block, the
  /// mirror holding at most `staging_bytes` (at least one element per block).
  void cut(std::size_t staging_bytes) {
    const std::size_t per = alias ? std::max(in.blocks * in.elem, out.blocks * out.elem) : in.blocks * in.elem + out.blocks * out.elem;
    const std::size_t longest = std::max(in.blocks ? in.block_elems : 0, out.blocks ? out.block_elems : 0);
    const std::size_t we = std::max<std::size_t>(1, std::min(per ? staging_bytes / per : longest, std::max<std::size_t>(longest, 1)));
    in.window_elems = out.window_elems = we;
    windows = std::max(in.windows(), out.windows());
  }
  /// For point-to-point messages: each buffer in windows of half the staging size, so that a
  /// message is cut alike by a send, a recv and a sendrecv on either side.
  void cut_messages(std::size_t staging_bytes) {
    in.window_elems = std::max<std::size_t>(1, staging_bytes / 2 / in.elem);
    out.window_elems = std::max<std::size_t>(1, staging_bytes / 2 / out.elem);
    windows = std::max(in.windows(), out.windows());
  }
};

/// One copy between device memory and a mirror.
struct piece {
  std::size_t mirror_off;  ///< offset in the mirror
  std::byte* dev;          ///< device address
  std::size_t bytes;       ///< length
};

/// The pieces of window `w` of buffer `b` whose mirror part starts at `part`, each at most `max` bytes.
inline void pieces_of(const staged_buffer& b, std::size_t part, std::size_t w, std::size_t max, std::vector<piece>& outv) {
  if (b.sizes) {  // varied blocks: each block's row of the window, packed
    std::size_t at = 0, dev_at = 0;
    for (std::size_t blk = 0; blk < b.blocks; ++blk) {
      const std::size_t row = b.block_elems_of(blk, w) * b.elem;
      std::byte* src = b.dev + (dev_at + w * b.window_elems) * b.elem;
      for (std::size_t off = 0; off < row; off += max) outv.push_back({part + at + off, src + off, std::min(max, row - off)});
      at += row;
      dev_at += (*b.sizes)[blk];
    }
    return;
  }
  const std::size_t row = b.elems_of(w) * b.elem;
  for (std::size_t blk = 0; blk < b.blocks && row; ++blk) {
    std::byte* src = b.dev + (blk * b.block_elems + w * b.window_elems) * b.elem;
    for (std::size_t off = 0; off < row; off += max)
      outv.push_back({part + blk * row + off, src + off, std::min(max, row - off)});
  }
}

}  // namespace gsync::cuda::detail
