#pragma once
/// \file
/// Which local address a rank listens on and advertises.
///
/// GSYNC_SOCKET_IFNAME=eth0 picks the (first IPv4, else IPv6) address of that interface; an unknown
/// name is an error listing the interfaces that exist. Otherwise the address the kernel would use
/// to reach the master: loopback when the master is local.

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/bootstrap/socket.hpp"

namespace gsync::bootstrap {

/// Address of interface `ifname`; throws invalid_argument listing the interfaces that exist.
inline asio::ip::address interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw error(errc::system, "getifaddrs: " + detail::errno_text(errno));
  std::set<std::string> names;
  std::optional<asio::ip::address> v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_name) continue;
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) {
      names.insert(i->ifa_name);
      continue;
    }
    names.insert(i->ifa_name);
    if (ifname != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && !v4) {
      auto* sa = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      v4 = asio::ip::address_v4(ntohl(sa->sin_addr.s_addr));
    } else if (i->ifa_addr->sa_family == AF_INET6 && !v6) {
      auto* sa = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), sa->sin6_addr.s6_addr, 16);
      v6 = asio::ip::address_v6(b, sa->sin6_scope_id);
    }
  }
  ::freeifaddrs(list);
  if (v4) return *v4;
  if (v6) return *v6;
  std::string all;
  for (auto& n : names) all += (all.empty() ? "" : ", ") + n;
  if (names.count(ifname))
    throw error(errc::invalid_argument, "GSYNC_SOCKET_IFNAME=" + ifname + ": the interface has no IP address (interfaces: " + all + ")");
  throw error(errc::invalid_argument, "GSYNC_SOCKET_IFNAME=" + ifname + ": no such interface; interfaces on this host: " + all);
}

/// The local address used to reach `master` (routing decision of the kernel, no packet sent).
inline asio::ip::address route_address(asio::io_context& io, const asio::ip::address& master) {
  if (master.is_loopback()) return master;
  detail::net::udp_socket s(io);
  asio::error_code ec;
  s.open(master.is_v4() ? asio::ip::udp::v4() : asio::ip::udp::v6(), ec);
  if (!ec) s.connect(asio::ip::udp::endpoint(master, 9), ec);
  if (ec) throw error(errc::system, "no route to the master " + master.to_string() + ": " + ec.message());
  return s.local_endpoint().address();
}

/// An address of this host that other hosts can reach, for a store with no master address given
/// (from_mpi): interface `ifname`'s when set; else the one the kernel would use to leave the host
/// (its default route; no packet sent); else the first non-loopback IPv4 address that is up.
inline asio::ip::address own_address(asio::io_context& io, const std::string& ifname) {
  if (!ifname.empty()) return interface_address(ifname);
  try {
    auto a = route_address(io, asio::ip::make_address("192.0.2.1"));  // TEST-NET-1: only a routing question
    if (!a.is_unspecified()) return a;
  } catch (const error&) {
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw error(errc::system, "getifaddrs: " + detail::errno_text(errno));
  std::optional<asio::ip::address> found;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
      found = asio::ip::address_v4(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr));
  ::freeifaddrs(list);
  return found ? *found : asio::ip::address(asio::ip::address_v4::loopback());
}

/// The address this rank listens on and advertises: interface `ifname`'s (GSYNC_SOCKET_IFNAME), or
/// when empty the one the kernel routes to `master` from (see file comment).
inline asio::ip::address pick_listen_address(asio::io_context& io, const asio::ip::address& master, const std::string& ifname) {
  if (!ifname.empty()) return interface_address(ifname);
  return route_address(io, master);
}

}  // namespace gsync::bootstrap
