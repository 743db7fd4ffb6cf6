// The verbs layer's set-up pieces: GSYNC_IB_HCA's grammar, loading libibverbs at run time, and
// discovery on a machine without RDMA (ibv_get_device_list returns NULL: "no device", no crash).
#include <doctest/doctest.h>

#include <string>

#include <gsync/verbs/discovery.hpp>
#include <gsync/verbs/hca_filter.hpp>

#include "support/errors.hpp"

using gsync::verbs::hca_filter;

TEST_CASE("GSYNC_IB_HCA: empty lets every device and port through") {
  hca_filter f("");
  CHECK(f.empty());
  CHECK(f.allows("mlx5_0", 1));
  CHECK(f.allows_device("anything"));
}

TEST_CASE("GSYNC_IB_HCA: names match as prefixes, ports narrow, as NCCL's") {
  hca_filter f("mlx5_1,mlx5_0:2");
  CHECK(f.entries().size() == 2);
  CHECK(f.allows("mlx5_1", 1));
  CHECK(f.allows("mlx5_10", 1));  // a prefix: NCCL's documented pitfall, kept for compatibility
  CHECK(f.allows("mlx5_0", 2));
  CHECK_FALSE(f.allows("mlx5_0", 1));
  CHECK(f.allows_device("mlx5_0"));
  CHECK_FALSE(f.allows_device("mlx4_0"));
  CHECK_FALSE(f.allows("rxe0", 1));
}

TEST_CASE("GSYNC_IB_HCA: '=' matches whole names") {
  hca_filter f("=mlx5_1");
  CHECK(f.exact());
  CHECK(f.allows("mlx5_1", 1));
  CHECK_FALSE(f.allows("mlx5_10", 1));
}

TEST_CASE("GSYNC_IB_HCA: '^' excludes, and a port excluded leaves the device's others") {
  hca_filter f("^mlx5_1,mlx5_0:1");
  CHECK(f.excluding());
  CHECK_FALSE(f.allows("mlx5_1", 1));
  CHECK_FALSE(f.allows("mlx5_10", 2));
  CHECK_FALSE(f.allows_device("mlx5_1"));
  CHECK(f.allows_device("mlx5_0"));
  CHECK_FALSE(f.allows("mlx5_0", 1));
  CHECK(f.allows("mlx5_0", 2));
  CHECK(f.allows("rxe0", 1));
  hca_filter g("^=mlx5_1");
  CHECK(g.excluding());
  CHECK(g.exact());
  CHECK_FALSE(g.allows("mlx5_1", 1));
  CHECK(g.allows("mlx5_10", 1));
}

TEST_CASE("GSYNC_IB_HCA: malformed lists are refused, naming the variable") {
  for (const char* bad : {"^", "=", "^=", ",mlx5_0", "mlx5_0,", "mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", "mlx5_0:1:2", ":1", "a b"}) {
    CAPTURE(bad);
    CHECK(gsync_test::kind_of([&] { hca_filter f(bad); }) == gsync::errc::invalid_argument);
    CHECK(gsync_test::message_of([&] { hca_filter f(bad); }).find("GSYNC_IB_HCA='") == 0);
  }
}

#if GSYNC_HAVE_VERBS
TEST_CASE("libibverbs loads at run time, and a library that is not there is a reason, not a crash") {
  std::string why;
  const gsync::verbs::library* none = gsync::verbs::library::load("libgsync-no-such-ibverbs.so.1", why);
  CHECK(none == nullptr);
  CHECK(why.find("cannot load libgsync-no-such-ibverbs.so.1") != std::string::npos);
  std::string why2;
  CHECK(gsync::verbs::library::load("libgsync-no-such-ibverbs.so.1", why2) == nullptr);  // tried once per name
  CHECK(why2 == why);
  // A library without the verbs calls (libm is always there) is refused by name of what it lacks.
  std::string why3;
  CHECK(gsync::verbs::library::load("libm.so.6", why3) == nullptr);
  CHECK(why3.find("libm.so.6 lacks ibv_get_device_list@IBVERBS_1.1") != std::string::npos);
}

TEST_CASE("discovery on this machine's libibverbs: without an RDMA device it says so") {
  std::string why;
  const gsync::verbs::library* lib = gsync::verbs::library::load("libibverbs.so.1", why);
  if (lib == nullptr) {
    MESSAGE("libibverbs.so.1 not loadable here: " << why);
    return;
  }
  auto d = gsync::verbs::discover(*lib, hca_filter{}, -1);
  if (!d.ports.empty()) {
    MESSAGE("this machine has RDMA ports; the no-device case is not exercised");
    return;
  }
  CHECK(d.why_none.find("RDMA") != std::string::npos);
}
#endif
