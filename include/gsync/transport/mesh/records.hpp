#pragma once
/// \file
/// What the host mesh reads from other processes outside the data frames, as pure functions
/// (tests/fuzz/fuzz_records.cpp feeds them arbitrary bytes): the data connection's hello, the
/// failure records and stall records ranks leave in the store, and failure notices. Nothing here
/// trusts its input: the store and the data ports are reachable by other processes (authenticated
/// ones, but possibly of a buggy or older build).
///
///   - hello (24 bytes, after the job-key handshake): the dialer names itself; accepted only from
///     a higher rank of this job (world size and nonce equal) not connected yet (connect.ipp).
///   - failure record, `gsync/failed/R` = "KIND TEXT": the `errc` of rank R's failure and its words
///     (failure.ipp); `gsync/failed/R/op` = the operation number it was in.
///   - stall record, `gsync/stall/R` = "SEQ TAG FPHEX" (the operation rank R waits in: number, wire
///     tag, call fingerprint in hex), or "0" once withdrawn (diagnostics.ipp).
///   - failure notice: a frame with `notice_magic` whose `tag` is the `errc`, `seq` 1 + the rank
///     lost first (0: none) and payload the text (transport/frame.hpp).

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync::transport::records {

/// The data connection's hello (see the file comment).
struct hello {
  std::uint32_t magic = 0x48595347u;  ///< "GSYH"
  std::uint32_t version = 1;          ///< of this format
  std::int32_t rank = -1;             ///< the dialing rank
  std::int32_t size = 0;              ///< its world size
  std::uint64_t nonce = 0;            ///< its job's nonce
};
static_assert(sizeof(hello) == 24);

/// True when rank `self` of a job of `size` ranks with nonce `nonce` may accept `h`: right magic
/// and version, same job, and a higher rank (the higher rank of a pair dials, connect.ipp).
constexpr bool hello_ok(const hello& h, int self, int size, std::uint64_t nonce) noexcept {
  return h.magic == hello{}.magic && h.version == 1 && h.size == size && h.nonce == nonce && h.rank >= 0 && h.rank > self && h.rank < size;
}

/// A failure record's text for `kind` and `msg`.
inline std::string failure_record(errc kind, const std::string& msg) { return std::to_string(static_cast<int>(kind)) + " " + msg; }

/// A failure record, read back.
struct failure {
  errc kind = errc::system;  ///< the kind recorded (errc::system for a kind this build does not know)
  std::string why;           ///< the words
};
/// Parses a failure record; nullopt when it is not "KIND TEXT" with KIND a number.
inline std::optional<failure> parse_failure_record(std::string_view rec) {
  const auto sp = rec.find(' ');
  if (sp == std::string_view::npos || sp == 0 || sp > 9) return std::nullopt;
  int k = 0;
  for (std::size_t i = 0; i < sp; ++i) {
    if (rec[i] < '0' || rec[i] > '9') return std::nullopt;
    k = k * 10 + (rec[i] - '0');
  }
  failure f;
  f.kind = k >= static_cast<int>(errc::timeout) && k <= errc_last ? static_cast<errc>(k) : errc::system;
  f.why = std::string(rec.substr(sp + 1));
  return f;
}

/// The stall record of operation `id` ("SEQ TAG FPHEX").
inline std::string stall_record(message_id id) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string r = std::to_string(id.seq) + " " + std::to_string(id.tag) + " ";
  unsigned char b[sizeof(fingerprint)];
  std::memcpy(b, &id.fp, sizeof b);
  for (unsigned char c : b) r += hex[c >> 4], r += hex[c & 15];
  return r;
}
/// Parses a stall record; false when it is "0" (withdrawn) or malformed.
inline bool parse_stall_record(const std::string& r, std::uint64_t& seq, std::uint32_t& tag, fingerprint& fp) {
  std::istringstream in(r);
  std::string fph;
  if (!(in >> seq >> tag >> fph) || fph.size() != 2 * sizeof(fingerprint)) return false;
  unsigned char b[sizeof(fingerprint)];
  for (std::size_t i = 0; i < sizeof b; ++i) {
    unsigned v = 0;
    const char hi = fph[2 * i], lo = fph[2 * i + 1];
    const auto nib = [](char c) -> int {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (nib(hi) < 0 || nib(lo) < 0) return false;
    v = static_cast<unsigned>(nib(hi) * 16 + nib(lo));
    b[i] = static_cast<unsigned char>(v);
  }
  std::memcpy(&fp, b, sizeof fp);
  return true;
}

/// A failure notice's header, read: what the failing rank said went wrong.
struct notice {
  errc kind = errc::peer_lost;  ///< its kind (peer_lost for a kind this build does not know)
  int first = -1;               ///< the rank it lost first, if any and in [0, size)
  std::size_t text_bytes = 0;   ///< bytes of text that follow (at most max_notice_bytes)
};
/// Reads notice header `h` from a job of `size` ranks.
constexpr notice decode_notice(const frame_header& h, int size) noexcept {
  notice n;
  n.kind = h.tag >= static_cast<std::uint32_t>(errc::timeout) && h.tag <= static_cast<std::uint32_t>(errc_last) ? static_cast<errc>(h.tag)
                                                                                                                      : errc::peer_lost;
  n.first = h.seq > 0 && h.seq <= static_cast<std::uint64_t>(size) ? static_cast<int>(h.seq) - 1 : -1;
  n.text_bytes = static_cast<std::size_t>(h.bytes < max_notice_bytes ? h.bytes : max_notice_bytes);
  return n;
}

/// The rank a store's loss record names as gone without goodbye ("rank N is lost (...)", written
/// by bootstrap/store_core.hpp), or nothing: another text, or "rank N failed: ..." (a rank that
/// failed said why: it is alive).
inline std::optional<int> rank_lost(std::string_view s) noexcept {
  constexpr std::string_view pre = "rank ", post = " is lost";
  if (!s.starts_with(pre)) return std::nullopt;
  s.remove_prefix(pre.size());
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end == s.data() || v < 0 || !std::string_view(end, static_cast<std::size_t>(s.data() + s.size() - end)).starts_with(post))
    return std::nullopt;
  return v;
}

}  // namespace gsync::transport::records
