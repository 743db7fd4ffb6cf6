// The verbs link (transport/links/verbs_link.hpp) in gsync's mesh, through the stand-in
// libibverbs (tests/support/ibv_emu/): shared memory inside a "host", verbs across, TCP where a
// rank has no port. The allreduce conformance sweep over worlds 2..8, every collective, the choice
// of medium per pair, and the failures a user sees: a completion in error named with its status
// and vendor code, a peer that leaves, a device or library that is not there (TCP, with the reason
// at INFO). Skipped (as skips) where the stand-in was not built.

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "support/allreduce_sweep.hpp"
#include "support/verbs_world.hpp"

using namespace gsync_test;

namespace {

void run_verbs_sweep(int n) {
  failures fails;
  std::atomic<int> over_verbs{0};
  auto body = [&](auto& comm, world_sync& sync) {
    sweep_all<true>(comm, sync, fails, "verbs");
    for (int p = 0; p < comm.size(); ++p)
      if (comm.transport().link_name(p) == "verbs") ++over_verbs;
  };
  run_verbs(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
  const int hosts_a = (n + 1) / 2, hosts_b = n - hosts_a;
  CHECK(over_verbs == 2 * hosts_a * hosts_b);  // every pair across the two hosts, seen from both ends
}

}  // namespace

#define GSYNC_SWEEP_VERBS(N) \
  TEST_CASE("verbs link: allreduce sweep across two hosts, world " #N) { run_verbs_sweep(N); }

GSYNC_SWEEP_VERBS(2)
GSYNC_SWEEP_VERBS(3)
GSYNC_SWEEP_VERBS(4)
GSYNC_SWEEP_VERBS(5)
GSYNC_SWEEP_VERBS(8)

TEST_CASE("verbs link: each pair gets shared memory, verbs or TCP as its hosts and ports say") {
  std::mutex m;
  std::vector<std::string> names, wrong;
  run_verbs(4, [&](auto& comm, world_sync&) {
    auto& x = comm.transport();
    std::lock_guard lk(m);
    names.emplace_back(x.name());
    for (int p = 0; p < comm.size(); ++p) {
      if (p == comm.rank()) continue;
      const bool same = (p < 2) == (comm.rank() < 2);
      const std::string_view want = same ? "shm" : "verbs";
      if (x.link_name(p) != want)
        wrong.push_back("rank " + std::to_string(comm.rank()) + " -> " + std::to_string(p) + ": " + std::string(x.link_name(p)));
    }
  }, test_config());
  for (const auto& s : names) CHECK(s == "shm+verbs");
  for (const auto& w : wrong) FAIL_CHECK(w);
}

TEST_CASE("verbs link: large and odd-sized messages, every collective, stay exact across hosts") {
  // More than the ring holds (64 KiB rings): frames go in pieces as the peer frees room.
  gsync::config cfg = test_config();
  cfg.transport.ib.ring_bytes = 64 << 10;
  std::atomic<int> bad{0};
  run_verbs(2, [&](auto& comm, world_sync&) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{4099}, std::size_t{1} << 20}) {
      std::vector<double> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<double>(i % 977) + comm.rank();
      gsync::allreduce(comm, std::span<double>{v});
      for (std::size_t i = 0; i < count; ++i)
        if (v[i] != 2.0 * static_cast<double>(i % 977) + 1.0) {
          ++bad;
          break;
        }
      std::vector<int> b(count, comm.rank() == 0 ? 7 : 0);
      gsync::broadcast(comm, std::span<int>{b}, 0);
      for (int x : b)
        if (x != 7) {
          ++bad;
          break;
        }
    }
  }, cfg);
  CHECK(bad == 0);
}

TEST_CASE("verbs link: a mismatched call and a peer that leaves are gsync errors, not hangs") {
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(20);
  CHECK(mismatch_reports([](int n, auto body, const gsync::config& c) { run_verbs(n, body, c); }, cfg) >= 1);

  std::atomic<int> lost{0};
  const auto t0 = std::chrono::steady_clock::now();
  run_verbs(2, [&](auto& comm, world_sync& sync) {
    sync.bar.arrive_and_wait();
    if (comm.rank() == 1) return;  // leaves: its communicator closes its links
    std::vector<float> v(4, 1.0f);
    if (kind_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); }) == gsync::errc::peer_lost) lost++;
  }, cfg);
  CHECK(lost == 1);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));  // noticed, not timed out
}

TEST_CASE("verbs link: a queue pair in error loses the link, naming the peer, the status and the vendor code") {
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(20);
  std::mutex m;
  std::vector<std::string> msgs;
  run_verbs(2, [&](auto& comm, world_sync& sync) {
    std::vector<float> v(1000, 1.0f);
    gsync::allreduce(comm, std::span<float>{v});  // the link works
    sync.bar.arrive_and_wait();
    if (comm.rank() == 0) {
      // The fault: every queue pair of this process (both ranks are threads of it) to ERR.
      CHECK(ibv_emu_control("device_fatal") == 0);
    }
    sync.bar.arrive_and_wait();
    const std::string e = message_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); });
    std::lock_guard lk(m);
    msgs.push_back(e);
  }, cfg);
  REQUIRE(msgs.size() == 2);
  bool named = false;
  for (const auto& e : msgs) {
    CAPTURE(e);
    CHECK_FALSE(e.empty());
    if (e.find("verbs: ") != std::string::npos && (e.find("vendor error") != std::string::npos || e.find("fatal") != std::string::npos)) named = true;
  }
  CHECK(named);
}

TEST_CASE("verbs link: without a library or a device the ranks use TCP, and say why at INFO") {
  SUBCASE("no library") {
    gsync::config cfg = test_config();
    std::mutex m;
    std::vector<std::string> names;
    const auto port = free_port();
    auto c = verbs_config(cfg);
    c.transport.ib.library = "libgsync-no-such-ibverbs.so.1";
    run_threads<verbs_communicator>(2, [&](int r) { return verbs_communicator::join(test_launch_info(r, 2, port, r == 0 ? "a" : "b"), c); },
                                    [&](auto& comm, world_sync&) {
                                      std::vector<float> v(10, 1.0f);
                                      gsync::allreduce(comm, std::span<float>{v});
                                      std::lock_guard lk(m);
                                      names.emplace_back(comm.transport().name());
                                      CHECK(v[9] == 2.0f);
                                    });
    for (const auto& n : names) CHECK(n == "tcp");
  }
  SUBCASE("GSYNC_IB_DISABLE") {
    gsync::config cfg = test_config();
    cfg.transport.ib.enabled = false;
    std::mutex m;
    std::vector<std::string> names;
    run_verbs(2, [&](auto& comm, world_sync&) {
      std::lock_guard lk(m);
      names.emplace_back(comm.transport().name());
    }, cfg);
    for (const auto& n : names) CHECK(n == "tcp");
  }
}
