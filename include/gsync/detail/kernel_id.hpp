#pragma once
/// \file
/// Which kernel (and so which CPUs and which GPUs' host) this process runs on: the boot id, else the
/// host name. A leaf: the host identity (bootstrap/host_id.hpp) and the CUDA IPC peer records
/// (cuda/ipc_peer.hpp) both read it.

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace gsync::detail {

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

/// Identity of the kernel (and so of the CPUs) this process runs on: the boot id, else the host
/// name. Ranks in different containers or network namespaces of one machine have different host
/// identities but the same kernel identity: they share its cores, which decides whether a waiting
/// rank may busy-poll (transport/mesh/progress.ipp, GSYNC_SPIN_US).
inline std::string kernel_id() {
  const std::string boot = boot_id();
  if (!boot.empty()) return boot;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  return name[0] ? name : "unknown-kernel";
}

}  // namespace gsync::detail
