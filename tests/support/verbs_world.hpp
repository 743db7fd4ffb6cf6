#pragma once
// Worlds of threads over the mesh with the verbs link between "hosts": shared memory inside a
// host, verbs across hosts, TCP otherwise. libibverbs is the test stand-in
// (tests/support/ibv_emu/, GSYNC_TEST_IBV_EMU: its path), on a fabric of this process's own
// (GSYNC_IBV_EMU), so that no real adapter is needed and each test program has its fabric.

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include <gsync/transport/links/verbs_endpoint.hpp>
#include <gsync/transport/mesh.hpp>

#include "support/world.hpp"

using verbs_mesh = gsync::transport::mesh<gsync::transport::shm_link, gsync::transport::verbs_link, gsync::transport::tcp_link>;
using verbs_communicator = gsync::communicator<verbs_mesh>;

namespace gsync_test {

/// The stand-in libibverbs this test program was built with.
inline std::string ibv_emu_path() { return GSYNC_TEST_IBV_EMU; }

/// Names this process's fabric (once, before the stand-in is first asked for devices).
/// Its segment is removed when the program exits. Every rank (a thread) gets a LID of its own, as on
/// hosts of their own, and the locked-memory limit is raised where it can be (each rank registers a
/// ring and a mirror per verbs peer).
inline void ibv_emu_fabric() {
  static const bool once = [] {
    ::setenv("GSYNC_IBV_EMU_LID", "auto", 0);
    rlimit r{RLIM_INFINITY, RLIM_INFINITY};
    if (::setrlimit(RLIMIT_MEMLOCK, &r) != 0) ::setenv("GSYNC_IBV_EMU_LAX", "memlock", 0);
    static const std::string name = "gsync-ibv-emu-test-" + std::to_string(::getpid());
    if (::setenv("GSYNC_IBV_EMU", name.c_str(), 0) == 0 && std::getenv("GSYNC_IBV_EMU") == name)
      std::atexit([] { ::shm_unlink(("/" + name).c_str()); });
    return true;
  }();
  (void)once;
}

/// The stand-in's fault hook (`gsync_ibv_emu_control`, tests/support/ibv_emu/README.md).
inline int ibv_emu_control(const std::string& command) {
  void* h = ::dlopen(ibv_emu_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -2;
  auto* f = reinterpret_cast<int (*)(const char*)>(::dlsym(h, "gsync_ibv_emu_control"));
  const int r = f ? f(command.c_str()) : -2;
  ::dlclose(h);
  return r;
}

/// A configuration whose verbs link loads the stand-in.
inline gsync::config verbs_config(gsync::config c) {
  ibv_emu_fabric();
  c.transport.ib.library = ibv_emu_path();
  return c;
}

/// n ranks over `verbs_mesh` through a store on loopback. Unless `host_of` says otherwise, ranks
/// below (n + 1) / 2 are on host "ib-a", the others on "ib-b": pairs across the two go over verbs.
template <class F>
void run_verbs(int n, F f, gsync::config cfg, std::function<std::string(int)> host_of = {}) {
  const auto port = free_port();
  if (!host_of) host_of = [n](int r) { return std::string(r < (n + 1) / 2 ? "ib-a" : "ib-b"); };
  cfg = verbs_config(cfg);
  run_threads<verbs_communicator>(n, [&](int r) { return verbs_communicator::join(test_launch_info(r, n, port, host_of(r)), cfg); }, f);
}

}  // namespace gsync_test
