#pragma once
/// \file
/// `GSYNC_IB_HCA`: which RDMA devices and ports a rank may use, in NCCL's grammar (NCCL_IB_HCA), so
/// that a cluster's existing setting carries over:
///   `mlx5_0:1,mlx5_1`   use these: a name, optionally `:port`; names match as prefixes
///                       (`mlx5_1` also matches `mlx5_10`), as NCCL's do;
///   `=mlx5_1`           exact names only (`=` before the list applies to all of it);
///   `^mlx5_1`           every device except these (`^=` for exact exclusion).
/// Empty: every device and port. Parsing is strict: a malformed list is an invalid_argument that
/// names the variable, never a silently empty selection.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "gsync/core/error.hpp"

namespace gsync::verbs {

/// A parsed `GSYNC_IB_HCA` (see the file comment).
class hca_filter {
 public:
  /// One entry of the list: a device name and a port (0: any port).
  struct entry {
    std::string name;
    int port = 0;
  };

  /// The filter that lets every device and port through.
  hca_filter() = default;

  /// Parses `spec`; throws error(invalid_argument) naming `what` (the variable) when it is malformed.
  explicit hca_filter(std::string_view spec, std::string_view what = "GSYNC_IB_HCA") {
    std::string_view s = spec;
    if (!s.empty() && s.front() == '^') exclude_ = true, s.remove_prefix(1);
    if (!s.empty() && s.front() == '=') exact_ = true, s.remove_prefix(1);
    if (s.empty()) {
      if (exclude_ || exact_) bad(spec, what, "a list of device names must follow '^' or '='");
      return;
    }
    while (true) {
      const std::size_t comma = s.find(',');
      std::string_view item = s.substr(0, comma);
      entry e;
      const std::size_t colon = item.find(':');
      e.name = std::string(item.substr(0, colon));
      if (e.name.empty()) bad(spec, what, "an entry has no device name");
      for (char c : e.name)
        if (c == ' ' || c == '^' || c == '=') bad(spec, what, "'" + e.name + "' is not a device name");
      if (colon != std::string_view::npos) {
        const std::string_view p = item.substr(colon + 1);
        int v = 0;
        if (p.empty() || p.size() > 3) bad(spec, what, "port '" + std::string(p) + "' of " + e.name + " is not a number from 1 to 255");
        for (char c : p) {
          if (c < '0' || c > '9') bad(spec, what, "port '" + std::string(p) + "' of " + e.name + " is not a number from 1 to 255");
          v = v * 10 + (c - '0');
        }
        if (v < 1 || v > 255) bad(spec, what, "port '" + std::string(p) + "' of " + e.name + " is not a number from 1 to 255");
        e.port = v;
      }
      entries_.push_back(std::move(e));
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
  }

  /// True when port `port` of device `device` may be used.
  bool allows(std::string_view device, int port) const {
    if (entries_.empty()) return true;
    bool listed = false;
    for (const entry& e : entries_)
      if (names_match(e.name, device) && (e.port == 0 || e.port == port)) {
        listed = true;
        break;
      }
    return exclude_ ? !listed : listed;
  }
  /// True when some port of `device` may be used (a device is opened only then).
  bool allows_device(std::string_view device) const {
    if (entries_.empty()) return true;
    for (const entry& e : entries_)
      if (names_match(e.name, device)) return exclude_ ? e.port != 0 : true;  // a device excluded port by port keeps its others
    return exclude_;
  }

  bool empty() const noexcept { return entries_.empty(); }          ///< lets everything through
  bool excluding() const noexcept { return exclude_; }              ///< `^`: the list is what is left out
  bool exact() const noexcept { return exact_; }                    ///< `=`: names match whole
  const std::vector<entry>& entries() const noexcept { return entries_; }  ///< the list, in order

 private:
  bool names_match(std::string_view listed, std::string_view device) const {
    return exact_ ? device == listed : device.substr(0, listed.size()) == listed;
  }
  [[noreturn]] static void bad(std::string_view spec, std::string_view what, const std::string& why) {
    throw error(errc::invalid_argument, std::string(what) + "='" + std::string(spec) + "': " + why +
                                            " (the form is [^][=]name[:port],name[:port],...)");
  }

  std::vector<entry> entries_;
  bool exclude_ = false;
  bool exact_ = false;
};

}  // namespace gsync::verbs
