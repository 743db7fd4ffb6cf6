#pragma once
/// \file
/// The frame header that precedes every message on a byte-stream transport, and its check.
///
/// 24 bytes, host byte order (all ranks of a job share an architecture): magic, tag, sequence
/// number, payload byte count. The receiver states what it expects; any difference (a frame from
/// another operation, another size, or garbage) raises `errc::mismatch` naming both sides, rather
/// than mixing the bytes into the result.

#include <cstdint>
#include <iterator>
#include <string>

#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"

namespace gsync::transport {

/// Magic of a data frame ("GSYF").
inline constexpr std::uint32_t frame_magic = 0x46595347u;

/// Header of one message.
struct frame_header {
  std::uint32_t magic = frame_magic;  ///< always frame_magic
  std::uint32_t tag = 0;              ///< message_id::tag
  std::uint64_t seq = 0;              ///< message_id::seq
  std::uint64_t bytes = 0;            ///< payload length
};
static_assert(sizeof(frame_header) == 24);

/// The header a sender writes for message `id` of `bytes` bytes.
inline frame_header make_header(message_id id, std::size_t bytes) {
  return frame_header{frame_magic, id.tag, id.seq, static_cast<std::uint64_t>(bytes)};
}

/// Name of the operation kind a wire tag belongs to, for logs (the tags are assigned in
/// detail/collective.hpp: one per collective kind, point-to-point above 2^31).
inline std::string tag_kind(std::uint32_t tag) {
  static constexpr const char* kinds[] = {"?", "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "barrier"};
  if (tag >= 0x80000000u) return "send/recv (tag " + std::to_string(tag - 0x80000000u) + ")";
  return tag < std::size(kinds) ? kinds[tag] : "tag " + std::to_string(tag);
}

/// Throws `errc::mismatch` unless `h` is the frame the receiver expects.
inline void check_header(const frame_header& h, message_id want, std::size_t want_bytes, int self, int peer) {
  if (h.magic == frame_magic && h.tag == want.tag && h.seq == want.seq && h.bytes == want_bytes) return;
  std::string m = "rank " + std::to_string(self) + " expected from rank " + std::to_string(peer) + " a message (tag " +
                  std::to_string(want.tag) + ", op #" + std::to_string(want.seq) + ", " + std::to_string(want_bytes) +
                  " bytes) but received ";
  if (h.magic != frame_magic) m += "bytes that are not a gsync frame (bad magic)";
  else
    m += "(tag " + std::to_string(h.tag) + ", op #" + std::to_string(h.seq) + ", " + std::to_string(h.bytes) +
         " bytes): the ranks are not running the same sequence of operations";
  throw error(errc::mismatch, m);
}

}  // namespace gsync::transport
