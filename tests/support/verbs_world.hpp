#pragma once
// Worlds of threads over the mesh with the verbs link between "hosts": shared memory inside a
// host, verbs across hosts, TCP otherwise. libibverbs is the test stand-in
// (tests/support/ibv_emu/, GSYNC_TEST_IBV_EMU: its path), on a fabric of this process's own
// (GSYNC_IBV_EMU), so that no real adapter is needed and each test program has its fabric.
// With GSYNC_TEST_VERBS_DEVICES set ("rxe1 rxe2": what tools/rxe_guest.sh says in
// RXE_GUEST_DEVICES), the same tests run on the real libibverbs instead, the first "host" on the
// first device and the second on the second (or the same one); the stand-in's fault hooks are
// then absent, and tests that need them skip.

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <functional>
#include <string>
#include <vector>

#include <gsync/transport/links/verbs_endpoint.hpp>
#include <gsync/transport/mesh.hpp>

#include "support/world.hpp"

using verbs_mesh = gsync::transport::mesh<gsync::transport::shm_link, gsync::transport::verbs_link, gsync::transport::tcp_link>;
using verbs_communicator = gsync::communicator<verbs_mesh>;

namespace gsync_test {

/// The real devices to run on (GSYNC_TEST_VERBS_DEVICES), or none: the stand-in.
inline const std::vector<std::string>& real_verbs_devices() {
  static const std::vector<std::string> d = [] {
    std::vector<std::string> v;
    std::istringstream in(std::getenv("GSYNC_TEST_VERBS_DEVICES") ? std::getenv("GSYNC_TEST_VERBS_DEVICES") : "");
    for (std::string w; in >> w;) v.push_back(w);
    return v;
  }();
  return d;
}
inline bool on_real_verbs() { return !real_verbs_devices().empty(); }

/// The libibverbs the tests load: the stand-in this test program was built with, or the real one.
inline std::string ibv_emu_path() { return on_real_verbs() ? "libibverbs.so.1" : GSYNC_TEST_IBV_EMU; }

/// The device filter (GSYNC_IB_HCA's grammar) of "host" h (0 or 1): empty on the stand-in.
inline std::string hca_of_host(int h) {
  const auto& d = real_verbs_devices();
  return d.empty() ? std::string() : "=" + d[std::min<std::size_t>(static_cast<std::size_t>(h), d.size() - 1)];
}

/// Names this process's fabric (once, before the stand-in is first asked for devices).
/// Its segment is removed when the program exits. Every rank (a thread) gets a LID of its own, as on
/// hosts of their own, and the locked-memory limit is raised where it can be (each rank registers a
/// ring and a mirror per verbs peer).
inline void ibv_emu_fabric() {
  static const bool once = [] {
    if (on_real_verbs()) return true;
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
  if (on_real_verbs()) return -2;
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
  c.transport.ib.hca = hca_of_host(0);
  return c;
}

/// n ranks over `verbs_mesh` through a store on loopback. Unless `host_of` says otherwise, ranks
/// below (n + 1) / 2 are on host "ib-a", the others on "ib-b": pairs across the two go over verbs.
template <class F>
void run_verbs(int n, F f, gsync::config cfg, std::function<std::string(int)> host_of = {}) {
  const auto port = free_port();
  if (!host_of) host_of = [n](int r) { return std::string(r < (n + 1) / 2 ? "ib-a" : "ib-b"); };
  cfg = verbs_config(cfg);
  run_threads<verbs_communicator>(n, [&](int r) {
    gsync::config c = cfg;
    const std::string host = host_of(r);
    c.transport.ib.hca = hca_of_host(host == host_of(0) ? 0 : 1);
    return verbs_communicator::join(test_launch_info(r, n, port, host), c);
  }, f);
}

}  // namespace gsync_test
