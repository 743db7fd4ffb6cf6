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
#include "gsync/detail/kernel_id.hpp"

namespace gsync::bootstrap {

using gsync::detail::kernel_id;  // detail/kernel_id.hpp

/// This process's host identity (see file comment): `override_id` if not empty, else
/// GSYNC_HOST_ID if set, else computed. Never empty.
inline std::string host_id(const std::string& override_id = {}) {
  if (!override_id.empty()) return override_id;
  if (auto h = detail::env_host_id(); h && !h->empty()) return *h;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  std::string id = name[0] ? name : "unknown-host";
  const std::string boot = gsync::detail::boot_id();
  id += "/" + (boot.empty() ? std::string("no-boot-id") : boot);
  struct stat st{};
  if (::stat("/proc/self/ns/net", &st) == 0) id += "/netns:" + std::to_string(static_cast<unsigned long long>(st.st_ino));
  return id;
}

}  // namespace gsync::bootstrap
