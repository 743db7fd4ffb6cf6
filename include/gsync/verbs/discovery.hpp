#pragma once
/// \file
/// Which RDMA ports this rank can use: every device libibverbs lists, every port that
/// `GSYNC_IB_HCA` allows (verbs/hca_filter.hpp), ACTIVE, with a LID on InfiniBand or a usable GID
/// on Ethernet (RoCE). For the ports left out it keeps the reason, so that the set-up log says
/// why a rank runs on TCP ("no device", "mlx5_0:1 DOWN", "excluded by GSYNC_IB_HCA"). Set-up
/// code, non-templated; opens each device for the query and closes it again.

#include "gsync/verbs/library.hpp"

#if GSYNC_HAVE_VERBS
#include <arpa/inet.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gsync/verbs/hca_filter.hpp"

namespace gsync::verbs {

/// One usable port.
struct port_info {
  std::string device;          ///< libibverbs device name ("mlx5_0", "rxe0")
  int port = 0;                ///< port number (1-based)
  bool ethernet = false;       ///< RoCE (addressed by GID, GRH required) rather than InfiniBand (LID)
  int active_mtu = 0;          ///< ibv_mtu value (IBV_MTU_1024 = 3 ...)
  std::uint16_t lid = 0;       ///< InfiniBand LID (0 on Ethernet)
  int gid_index = -1;          ///< the GID used as source address (-1: none, InfiniBand without GRH)
  ibv_gid gid{};               ///< that GID
  /// "mlx5_0:1" for logs.
  std::string name() const { return device + ":" + std::to_string(port); }
};

/// What `discover` found.
struct discovery {
  std::vector<port_info> ports;  ///< usable ports, in the library's device order
  std::vector<std::string> left_out;  ///< "name:port: why" for every port or device not usable
  std::string why_none;  ///< when `ports` is empty: why, in one line
};

/// Bytes of an MTU enum (256 .. 4096; 0 for an unknown value).
inline int mtu_bytes(int mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0; }

/// The GID as text (IPv6 notation; an IPv4-mapped GID shows its address as ::ffff:a.b.c.d).
inline std::string gid_text(const ibv_gid& g) {
  char b[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, g.raw, b, sizeof b);
  return b;
}

namespace detail {

inline bool gid_zero(const ibv_gid& g) {
  for (unsigned char c : g.raw)
    if (c) return false;
  return true;
}
inline bool gid_ipv4_mapped(const ibv_gid& g) {
  static constexpr unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, prefix, 12) == 0;
}
// The kernel's type of GID `index` ("RoCE v2", "IB/RoCE v1"), from sysfs; "" where it cannot be read
// (no sysfs entry: a test stand-in, or a kernel without the attribute).
inline std::string gid_type(const std::string& dev, int port, int index) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/gid_attrs/types/" + std::to_string(index));
  std::string t;
  std::getline(f, t);
  return t;
}

// The GID index for a RoCE port: the one asked for (gid_index >= 0), else a RoCE v2 IPv4-mapped
// GID, else any IPv4-mapped one, else the first non-zero one (NCCL's preference: v2 routes over
// IP networks). -1 with `why` when none fits.
inline int pick_gid(const library& lib, ibv_context* ctx, const std::string& dev, int port, int table, int wanted,
                    ibv_gid& out, std::string& why) {
  if (wanted >= 0) {
    if (wanted >= table) {
      why = "GSYNC_IB_GID_INDEX=" + std::to_string(wanted) + " is past the port's " + std::to_string(table) + " GIDs";
      return -1;
    }
    if (lib.query_gid(ctx, static_cast<std::uint8_t>(port), wanted, &out) != 0 || gid_zero(out)) {
      why = "GID index " + std::to_string(wanted) + " (GSYNC_IB_GID_INDEX) is empty";
      return -1;
    }
    return wanted;
  }
  int v2_ipv4 = -1, ipv4 = -1, any = -1;
  ibv_gid g2{}, g4{}, ga{};
  for (int i = 0; i < table && i < 256; ++i) {
    ibv_gid g{};
    if (lib.query_gid(ctx, static_cast<std::uint8_t>(port), i, &g) != 0 || gid_zero(g)) continue;
    if (any < 0) any = i, ga = g;
    if (gid_ipv4_mapped(g)) {
      if (ipv4 < 0) ipv4 = i, g4 = g;
      if (v2_ipv4 < 0 && gid_type(dev, port, i) == "RoCE v2") v2_ipv4 = i, g2 = g;
    }
  }
  if (v2_ipv4 >= 0) return out = g2, v2_ipv4;
  if (ipv4 >= 0) return out = g4, ipv4;
  if (any >= 0) return out = ga, any;
  why = "no GID configured (an Ethernet port needs an IP address for RoCE)";
  return -1;
}

inline const char* port_state_text(int s) {
  switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

}  // namespace detail

/// The ports of `lib`'s devices that `filter` allows and that can carry traffic now; `gid_index`:
/// GSYNC_IB_GID_INDEX (-1: chosen per port).
inline discovery discover(const library& lib, const hca_filter& filter, int gid_index) {
  discovery d;
  int n = 0;
  errno = 0;
  ibv_device** list = lib.get_device_list(&n);
  if (list == nullptr) {  // ENOSYS: no RDMA in this kernel; never passed to free_device_list (it crashes)
    const int e = errno;
    d.why_none = "no RDMA device (ibv_get_device_list: " + std::string(e ? std::strerror(e) : "no list") + ")";
    return d;
  }
  for (int i = 0; i < n; ++i) {
    const std::string dev = lib.get_device_name(list[i]) ? lib.get_device_name(list[i]) : "?";
    if (!filter.allows_device(dev)) {
      d.left_out.push_back(dev + ": excluded by GSYNC_IB_HCA");
      continue;
    }
    ibv_context* ctx = lib.open_device(list[i]);
    if (ctx == nullptr) {
      d.left_out.push_back(dev + ": cannot open (" + std::string(std::strerror(errno)) + ")");
      continue;
    }
    ibv_device_attr da{};
    if (lib.query_device(ctx, &da) != 0) {
      d.left_out.push_back(dev + ": ibv_query_device failed");
      lib.close_device(ctx);
      continue;
    }
    for (int p = 1; p <= da.phys_port_cnt; ++p) {
      const std::string name = dev + ":" + std::to_string(p);
      if (!filter.allows(dev, p)) {
        d.left_out.push_back(name + ": excluded by GSYNC_IB_HCA");
        continue;
      }
      ibv_port_attr pa{};
      if (lib.query_port(ctx, static_cast<std::uint8_t>(p), &pa) != 0) {
        d.left_out.push_back(name + ": ibv_query_port failed");
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        d.left_out.push_back(name + ": " + detail::port_state_text(pa.state));
        continue;
      }
      port_info pi;
      pi.device = dev;
      pi.port = p;
      pi.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      pi.active_mtu = pa.active_mtu;
      if (pi.ethernet) {
        std::string why;
        pi.gid_index = detail::pick_gid(lib, ctx, dev, p, pa.gid_tbl_len, gid_index, pi.gid, why);
        if (pi.gid_index < 0) {
          d.left_out.push_back(name + ": " + why);
          continue;
        }
      } else {
        if (pa.lid == 0) {
          d.left_out.push_back(name + ": no LID (is a subnet manager running?)");
          continue;
        }
        pi.lid = pa.lid;
        if (gid_index >= 0) {  // asked for: a GRH with this source GID (routed InfiniBand)
          std::string why;
          pi.gid_index = detail::pick_gid(lib, ctx, dev, p, pa.gid_tbl_len, gid_index, pi.gid, why);
          if (pi.gid_index < 0) {
            d.left_out.push_back(name + ": " + why);
            continue;
          }
        }
      }
      d.ports.push_back(std::move(pi));
    }
    lib.close_device(ctx);
  }
  lib.free_device_list(list);
  if (d.ports.empty()) {
    if (n == 0) d.why_none = "no RDMA device";
    else {
      d.why_none = "no usable RDMA port:";
      for (const auto& s : d.left_out) d.why_none += " " + s + ";";
      d.why_none.pop_back();
    }
  }
  return d;
}

}  // namespace gsync::verbs

#endif  // GSYNC_HAVE_VERBS
