#pragma once
/// \file
/// The frame header that precedes every message on a byte-stream transport, and its check.
///
/// 48 bytes, host byte order (all ranks of a job share an architecture): magic, tag, sequence
/// number, payload byte count, and the sender's call fingerprint (core/fingerprint.hpp). The
/// receiver states what it expects; any difference raises `errc::mismatch` rather than mixing the
/// bytes into the result: another call (kind, sequence number or arguments) is reported as both
/// calls spelled out, another size within the same call as the sizes, garbage as garbage.

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/op_numbering.hpp"

namespace gsync::transport {

/// Magic of a data frame ("GSYF").
inline constexpr std::uint32_t frame_magic = 0x46595347u;

/// Header of one message.
struct frame_header {
  std::uint32_t magic = frame_magic;  ///< always frame_magic
  std::uint32_t tag = 0;              ///< message_id::tag
  std::uint64_t seq = 0;              ///< message_id::seq
  std::uint64_t bytes = 0;            ///< payload length
  fingerprint fp{};                   ///< message_id::fp, the sender's call
};
static_assert(sizeof(frame_header) == 48);

/// Magic of a failure notice ("GSYX"): the last frame a failing rank writes to a peer whose stream
/// is at a message boundary: `tag` holds the `gsync::errc` value, `seq` 1 + the rank whose loss
/// caused the failure (0: none), `bytes` the length of the message text that follows (at most
/// `max_notice_bytes`).
inline constexpr std::uint32_t notice_magic = 0x58595347u;
/// Magic of a checksum frame ("GSYK"), sent after every data frame when GSYNC_CHECKSUM is on: no
/// payload; `tag`, `seq` and `fp` as the data frame's except `fp.count`, which holds the CRC32C of
/// the data frame's payload (detail/crc32c.hpp).
inline constexpr std::uint32_t check_magic = 0x4b595347u;
/// Longest failure-notice text.
inline constexpr std::size_t max_notice_bytes = 4000;

/// A frame posted on a link: header, payload (the caller's bytes, valid until the frame has been
/// handed over) and how many bytes of header + payload have been handed over so far.
struct send_op {
  frame_header h;
  const std::byte* p;
  std::size_t n;
  std::size_t done;  ///< bytes handed over, header included
  std::uint64_t ref = 0;  ///< a by-reference message's number on its link (shared memory single copy), else 0
};

/// The header a sender writes for message `id` of `bytes` bytes.
inline frame_header make_header(message_id id, std::size_t bytes) {
  return frame_header{frame_magic, id.tag, id.seq, static_cast<std::uint64_t>(bytes), id.fp};
}

/// Name of the operation kind a wire tag belongs to, for logs (the tags are assigned in
/// dispatch/collective.hpp: one per collective kind, point-to-point above 2^31; 8 is the start-up
/// probe of transport/link_probe.hpp, 9 the int8 compressed allreduce of grad/int8_exchange.hpp).
inline std::string tag_kind(std::uint32_t tag) {
  static constexpr const char* kinds[] = {"?",      "allreduce", "reduce_scatter", "allgather",       "broadcast",
                                         "reduce", "alltoall",  "barrier",        "start-up network probe",
                                         "compressed_allreduce", "gather", "scatter", "allgatherv", "reduce_scatterv",
                                         "alltoallv"};
  if (is_p2p_tag(tag)) return "send/recv (tag " + std::to_string(tag & ~tag_p2p) + ")";
  return tag < std::size(kinds) ? kinds[tag] : "tag " + std::to_string(tag);
}

/// "allreduce(float32, 1048576, sum) [ring] as op #17", "send(float32, 10, tag 3) as message #2
/// between the pair": the call a message belongs to (`p2p_role` names the point-to-point side).
inline std::string describe_message(std::uint32_t tag, std::uint64_t seq, const fingerprint& fp,
                                    std::string_view p2p_role = "send/recv") {
  if (is_p2p_tag(tag)) {
    fingerprint f = fp;
    f.algo = 0;
    std::string c = describe_call(p2p_role, f);
    c.insert(c.size() - 1, (f.dtype ? ", tag " : "tag ") + std::to_string(tag & ~tag_p2p));
    return c + " as message #" + std::to_string(seq) + " between the pair";
  }
  return describe_call(tag_kind(tag), fp) + " as " + gsync::detail::op_label(seq);
}

/// Throws `errc::mismatch` unless `h` is the frame the receiver expects (`want`, `want_bytes`).
/// A frame of another call names both calls and what differs; a frame of the same call with
/// another length (ranks disagree on a setting such as the segment size) names both lengths.
inline void check_header(const frame_header& h, message_id want, std::size_t want_bytes, int self, int peer) {
  if (h.magic == frame_magic && h.tag == want.tag && h.seq == want.seq && h.fp == want.fp && h.bytes == want_bytes) return;
  const std::string me = "rank " + std::to_string(self), them = "rank " + std::to_string(peer);
  std::string m;
  const std::string in = want.fp.comm ? " in " + comm_label(want.fp.comm) : std::string();
  if (h.magic == check_magic) {
    m = me + " expected from " + them + " a message of " + describe_message(want.tag, want.seq, want.fp) + " but received a checksum frame: " +
        them + " runs with GSYNC_CHECKSUM=1 and this rank without (set it alike on every rank)";
  } else if (h.magic != frame_magic) {
    m = me + " expected from " + them + " a message of " + describe_message(want.tag, want.seq, want.fp) +
        " but received bytes that are not a gsync frame (bad magic)";
  } else if (h.tag != want.tag || h.seq != want.seq || !(h.fp == want.fp)) {
    m = me + " called " + describe_message(want.tag, want.seq, want.fp, "recv") + ", " + them + " called " +
        describe_message(h.tag, h.seq, h.fp, "send");
    m += in;
    if (h.tag != want.tag) m += ": different operations";
    else if (h.seq != want.seq) m += ": the ranks are not running the same sequence of operations";
    else m += ": they disagree on the " + fingerprint_difference(want.fp, h.fp);
  } else {
    const std::string kind = tag_kind(want.tag);
    m = me + " expected from " + them + " a " + std::to_string(want_bytes) + "-byte message of " +
        describe_message(want.tag, want.seq, want.fp) + in + " but received " + std::to_string(h.bytes) + " bytes: ";
    if (kind == "alltoallv") m += "the two ranks' counts disagree (rank i's send_counts[j] must equal rank j's recv_counts[i])";
    else if (kind == "allgatherv" || kind == "reduce_scatterv") m += "the ranks passed different counts (they must be the same on every rank)";
    else m += "the ranks split the call differently (settings such as GSYNC_SEGMENT_BYTES differ between ranks?)";
  }
  throw error(errc::mismatch, m);
}

}  // namespace gsync::transport
