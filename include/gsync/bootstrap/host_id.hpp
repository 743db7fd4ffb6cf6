#pragma once
/// \file
/// Which ranks share a host? Ranks whose host identity is equal form the intra-host level: they
/// talk through shared memory and the hierarchical algorithms group them.
///
/// The identity is `hostname/boot-id/netns-inode`: the hostname alone is not enough (containers
/// and cloned VMs share names), the boot id tells two machines (or two boots) apart, and the
/// network namespace tells apart containers that share a kernel but not a network (or, in tests,
/// the fake hosts of benchmarks/netcluster.sh). `GSYNC_HOST_ID` overrides it: ranks with the same
/// value are treated as one host, ranks with different values as different hosts.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gsync/core/config.hpp"

namespace gsync::bootstrap {

namespace detail_host {
/// The kernel's boot id (first line of /proc/sys/kernel/random/boot_id), or "" where unreadable.
inline std::string boot_id() {
  const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}
}  // namespace detail_host

/// This process's host identity (see file comment): `override_id` if not empty, else
/// GSYNC_HOST_ID if set, else computed. Never empty.
inline std::string host_id(const std::string& override_id = {}) {
  if (!override_id.empty()) return override_id;
  if (auto h = detail::env_host_id(); h && !h->empty()) return *h;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  std::string id = name[0] ? name : "unknown-host";
  const std::string boot = detail_host::boot_id();
  id += "/" + (boot.empty() ? std::string("no-boot-id") : boot);
  struct stat st{};
  if (::stat("/proc/self/ns/net", &st) == 0) id += "/netns:" + std::to_string(static_cast<unsigned long long>(st.st_ino));
  return id;
}

/// Identity of the kernel (and so of the CPUs) this process runs on: the boot id, else the host
/// name. Ranks in different containers or network namespaces of one machine have different host
/// identities but the same kernel identity: they share its cores, which decides whether a waiting
/// rank may busy-poll (transport/mesh/progress.ipp, GSYNC_SPIN_US).
inline std::string kernel_id() {
  const std::string boot = detail_host::boot_id();
  if (!boot.empty()) return boot;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  return name[0] ? name : "unknown-kernel";
}

}  // namespace gsync::bootstrap
