#pragma once
/// \file
/// What each rank publishes about itself at set-up, once, under `gsync/rank/R`: where it listens
/// for data connections and which kernel and host it runs on. Every rank reads all records in one
/// store round trip (`store_client::get_many`), so set-up asks the store O(1) times per rank,
/// whatever the number of ranks, and a connection made later needs no store request.
///
/// Text, three lines: `ADDRESS PORT RECOVERY_PORT HEARTBEAT_PORT`, the kernel identity, the host
/// identity (bootstrap/host_id.hpp; the host identity may contain anything but is last, so it is
/// read as the rest of the record). Records of older writers, with fewer ports, still parse.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "gsync/core/error.hpp"

namespace gsync::bootstrap {

/// One rank's set-up record (see the file comment).
struct rank_record {
  std::string address;     ///< the data listener's address, as text (IPv4 or IPv6)
  std::uint16_t port = 0;  ///< the data listener's port
  std::string kernel;      ///< bootstrap::kernel_id() of the rank's machine
  std::string host;        ///< bootstrap::host_id() of the rank
  /// The rank's recovery listener on `address` (0: none), where it serves the store of a shrink
  /// it coordinates (transport/mesh/shrink.ipp).
  std::uint16_t recovery_port = 0;
  /// The rank's heartbeat listener on `address` (0: none; transport/mesh/heartbeat.hpp).
  std::uint16_t heartbeat_port = 0;

  /// The record as stored.
  std::string encode() const {
    return address + " " + std::to_string(port) + " " + std::to_string(recovery_port) + " " + std::to_string(heartbeat_port) + "\n" +
           kernel + "\n" + host;
  }

  /// Parses a stored record of rank `rank`; throws `errc::mismatch` naming the rank on anything
  /// malformed (the store is reachable by other processes: its values are not trusted).
  static rank_record parse(std::string_view s, int rank) {
    const auto bad = [&](const char* why) -> rank_record {
      throw error(errc::mismatch, "bad set-up record of rank " + std::to_string(rank) + " in the store (" + why + "): '" +
                                      std::string(s.substr(0, 200)) + "'");
    };
    const auto nl1 = s.find('\n');
    if (nl1 == std::string_view::npos) return bad("no kernel line");
    const auto nl2 = s.find('\n', nl1 + 1);
    if (nl2 == std::string_view::npos) return bad("no host line");
    const std::string_view where = s.substr(0, nl1);
    // "ADDRESS PORT [RECOVERY_PORT [HEARTBEAT_PORT]]": an address without spaces, then 1 to 3 numbers.
    const auto number = [](std::string_view t, bool zero_ok) -> int {
      if (t.empty() || t.size() > 5) return -1;
      std::uint32_t p = 0;
      for (char c : t) {
        if (c < '0' || c > '9') return -1;
        p = p * 10 + static_cast<std::uint32_t>(c - '0');
      }
      return (p == 0 && !zero_ok) || p > 65535 ? -1 : static_cast<int>(p);
    };
    std::string_view fields[4];
    std::size_t nf = 0;
    for (std::size_t at = 0; at <= where.size();) {
      const std::size_t sp = std::min(where.find(' ', at), where.size());
      if (nf == 4) return bad("too many fields");
      fields[nf++] = where.substr(at, sp - at);
      at = sp + 1;
    }
    if (nf < 2) return bad("no address and port");
    rank_record r;
    const int p = number(fields[1], false);
    if (p < 0) return bad("bad port");
    const int rport = nf > 2 ? number(fields[2], true) : 0;
    if (rport < 0) return bad("bad recovery port");
    const int hport = nf > 3 ? number(fields[3], true) : 0;
    if (hport < 0) return bad("bad heartbeat port");
    r.address = std::string(fields[0]);
    r.port = static_cast<std::uint16_t>(p);
    r.recovery_port = static_cast<std::uint16_t>(rport);
    r.heartbeat_port = static_cast<std::uint16_t>(hport);
    r.kernel = std::string(s.substr(nl1 + 1, nl2 - nl1 - 1));
    r.host = std::string(s.substr(nl2 + 1));
    if (r.kernel.empty() || r.host.empty()) return bad("empty kernel or host identity");
    if (r.address.empty() || r.address.find(' ') != std::string::npos) return bad("bad address");
    return r;
  }
};

/// The store key of rank `rank`'s record.
inline std::string rank_record_key(int rank) { return "gsync/rank/" + std::to_string(rank); }

}  // namespace gsync::bootstrap
