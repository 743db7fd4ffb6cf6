// The open link list: a link type defined here in tests/ (support/uds_link.hpp: Unix-domain
// sockets), named first in gsync's mesh with no edit of include/, carries the data of every
// same-host pair, TCP the others. Through it: the allreduce conformance sweep over worlds 1..8
// (every algorithm, every (dtype, operator) pair, awkward counts, against the double-precision
// reference), the collectives sweep ("collectives sweep uds world N", test_collectives_sweep.cpp),
// and the failures a user sees. The link's own calls pass the link tests (test_links.cpp).

#include "support/allreduce_sweep.hpp"
#include "support/uds_world.hpp"

namespace {

void run_uds_sweep(int n) {
  failures fails;
  const std::uint64_t before = outside::uds_bytes_sent.load();
  auto body = [&](auto& comm, world_sync& sync) { sweep_all<true>(comm, sync, fails, "uds"); };
  run_uds(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
  if (n > 1) CHECK(outside::uds_bytes_sent.load() > before);  // the data went through the outside link
}

}  // namespace

#define GSYNC_SWEEP_UDS(N) \
  TEST_CASE("outside link: allreduce sweep over a mesh whose first link is defined outside the library, world " #N) { run_uds_sweep(N); }

GSYNC_SWEEP_UDS(1)
GSYNC_SWEEP_UDS(2)
GSYNC_SWEEP_UDS(3)
GSYNC_SWEEP_UDS(4)
GSYNC_SWEEP_UDS(5)
GSYNC_SWEEP_UDS(6)
GSYNC_SWEEP_UDS(7)
GSYNC_SWEEP_UDS(8)

TEST_CASE("outside link: each pair gets the first link type of the list that connects it") {
  // One host: every pair on the outside link. Two hosts: same-host pairs on it, the others on TCP
  // (its endpoint refuses pairs on different hosts).
  for (int n : {3, 4}) {
    std::mutex m;
    std::vector<std::string> names;
    std::atomic<int> wrong{0};
    run_uds(n, [&](auto& comm, world_sync&) {
      auto& x = comm.transport();
      {
        std::lock_guard lk(m);
        names.emplace_back(x.name());
      }
      for (int p = 0; p < comm.size(); ++p)
        if (p != comm.rank() && x.is_shm_peer(p)) ++wrong;  // the outside link shares no memory
      std::vector<double> v(1000, comm.rank() + 1.0);
      gsync::allreduce(comm, std::span<double>{v});
      if (v[999] != n * (n + 1) / 2.0) ++wrong;
    }, test_config());
    for (const auto& s : names) CHECK(s == (n < 4 ? "uds" : "uds+tcp"));
    CHECK(wrong == 0);
  }
}

TEST_CASE("outside link: a mismatched call and a peer that leaves are gsync errors, not hangs") {
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(20);
  CHECK(mismatch_reports([](int n, auto body, const gsync::config& c) { run_uds(n, body, c); }, cfg) >= 1);

  const auto [lost, took] = leaver_reports([](int n, auto body, const gsync::config& c) { run_uds(n, body, c); }, cfg);
  CHECK(lost == 1);
  CHECK(took < std::chrono::seconds(15));  // noticed, not timed out
}
