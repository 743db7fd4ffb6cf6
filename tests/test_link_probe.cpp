// The start-up probe of the links between hosts (transport/link_probe.hpp): every rank ends with
// the same estimate, the user's GSYNC_NET_* win, GSYNC_NET_PROBE=0 skips it, one host never
// probes, no operation number is consumed, and ranks that disagree on probing fail, not hang.

#include <doctest/doctest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/env.hpp"
#include "support/world.hpp"

#include <gsync/allreduce.hpp>
#include <gsync/communicator.hpp>
#include <gsync/transport/link_probe.hpp>

namespace {

struct seen_links {
  std::mutex m;
  std::vector<gsync::link_estimate> v;
  void add(const gsync::link_estimate& l) {
    std::lock_guard lk(m);
    v.push_back(l);
  }
};

// Every rank saw exactly the same numbers.
void check_all_equal(const seen_links& s, int n) {
  REQUIRE(static_cast<int>(s.v.size()) == n);
  for (const auto& l : s.v) {
    CHECK(l.alpha_us == s.v.front().alpha_us);
    CHECK(l.beta_us_per_byte == s.v.front().beta_us_per_byte);
    CHECK(l.measured == s.v.front().measured);
    CHECK(l.intra_alpha_us == s.v.front().intra_alpha_us);
    CHECK(l.shared_msg_us == s.v.front().shared_msg_us);
  }
}

}  // namespace

TEST_CASE("link probe over in-process ranks: every rank derives the same positive estimate") {
  for (int n : {2, 3, 5}) {
    CAPTURE(n);
    seen_links seen;
    gsync_test::run_inproc(n, [&](auto& comm, auto&) {
      const auto r = gsync::transport::probe_links(comm.transport(), comm.make_deadline());
      CHECK(r.links.measured);
      CHECK(r.small_step_us > 0);
      CHECK(r.big_step_us > 0);
      CHECK(r.links.alpha_us >= 1.0);
      CHECK(r.links.beta_us_per_byte >= 8e-8);
      seen.add(r.links);
    });
    check_all_equal(seen, n);
  }
}

// One rank whose machine runs more ranks than cores is enough: every rank then records the time
// per message (the 8-byte step over the ranks), so that all make the same choices.
TEST_CASE("link probe: ranks agree that cores are shared when any of them says so") {
  for (int n : {2, 3, 4}) {
    for (int sharer : {-1, 0, n - 1}) {
      CAPTURE(n);
      CAPTURE(sharer);
      seen_links seen;
      gsync_test::run_inproc(n, [&](auto& comm, auto&) {
        const auto r = gsync::transport::probe_links(comm.transport(), comm.make_deadline(), comm.rank() == sharer);
        if (sharer < 0) CHECK(r.links.shared_msg_us == 0);
        else CHECK(r.links.shared_msg_us == doctest::Approx(r.small_step_us / n));
        seen.add(r.links);
      });
      check_all_equal(seen, n);
    }
  }
}

TEST_CASE("link probe: ranks on several hosts measure their links at start-up, before and outside the user's operations") {
  for (const auto& shape : {std::pair{4, 2}, std::pair{3, 1}}) {
    const int n = shape.first, per = shape.second;
    CAPTURE(n);
    CAPTURE(per);
    seen_links seen;
    gsync_test::run_mixed(n, per, [&](auto& comm, auto&) {
      const auto& links = comm.transport().topo().links();
      REQUIRE(links.has_value());
      CHECK(links->measured);
      CHECK(links->alpha_us >= 1.0);
      // Loopback and shared memory: far faster than 100 Mbit/s, and no faster than the floor.
      CHECK(links->gbps() > 0.1);
      CHECK(links->beta_us_per_byte >= 8e-8);
      // Several ranks per host: the messages inside a host were timed too.
      if (per > 1) CHECK(links->intra_alpha_us >= 1.0);
      else CHECK(links->intra_alpha_us == 0);
      seen.add(*links);
      // The probe is not an operation of the user's: nothing counted, and the first collective is op #1.
      CHECK(comm.counters().total().calls == 0);
      std::vector<float> v(1000, 1.0f);
      gsync::allreduce(comm, std::span<float>{v});
      CHECK(v[999] == static_cast<float>(n));
      CHECK(comm.next_seq() == 2);
    });
    check_all_equal(seen, n);
  }
}

TEST_CASE("link probe: the transport's constructor assumes the links, measure_links (as join calls it) times them") {
  const auto port = gsync_test::free_port();
  constexpr int n = 3;
  for (const auto& e : gsync_test::rank_errors(n, [&](int r) {
         gsync::transport::host_options opt;
         opt.net_probe = true;
         gsync::transport::tcp x(gsync_test::test_launch_info(r, n, port, "ml-host-" + std::to_string(r)), std::chrono::seconds(10), gsync::logger(r), opt);
         std::string e;
         const auto before = x.topo().links();
         if (!before || before->measured) e += "constructed: links not assumed; ";
         x.measure_links(std::chrono::seconds(10));
         const auto after = x.topo().links();
         if (!after || !after->measured) e += "measure_links: links not measured";
         return e;
       }))
    FAIL_CHECK(e);
}

TEST_CASE("link probe: one host never probes") {
  gsync_test::run_shm(3, [&](auto& comm, auto&) { CHECK_FALSE(comm.transport().topo().links().has_value()); });
}

TEST_CASE("link probe: net_probe = false (GSYNC_NET_PROBE=0) skips it, and net_gbps / net_latency_us (GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US) win over what it measures") {
  {
    gsync_test::scoped_env off("GSYNC_NET_PROBE", "0"), rate("GSYNC_NET_GBPS", "2"), lat("GSYNC_NET_LATENCY_US", "7");
    const auto o = gsync::config::from_env().transport;
    CHECK_FALSE(o.net_probe);
    CHECK(o.net_gbps == 2.0);
    CHECK(o.net_latency_us == 7.0);
  }
  {
    gsync::config cfg;
    cfg.transport.net_probe = false;
    cfg.transport.net_gbps = 2;
    seen_links seen;
    gsync_test::run_tcp(3, [&](auto& comm, auto&) {
      const auto& links = comm.transport().topo().links();
      REQUIRE(links.has_value());
      CHECK_FALSE(links->measured);
      CHECK(links->gbps() == doctest::Approx(2.0));
      CHECK(links->alpha_us == gsync::link_estimate{}.alpha_us);  // assumed
      seen.add(*links);
    }, cfg);
    check_all_equal(seen, 3);
  }
  {
    gsync::config cfg;
    cfg.transport.net_latency_us = 7;
    seen_links seen;
    gsync_test::run_tcp(3, [&](auto& comm, auto&) {
      const auto& links = comm.transport().topo().links();
      REQUIRE(links.has_value());
      CHECK(links->measured);  // the rate is still measured
      CHECK(links->alpha_us == 7.0);
      seen.add(*links);
    }, cfg);
    check_all_equal(seen, 3);
  }
  {
    gsync_test::scoped_env bad("GSYNC_NET_PROBE", "maybe");
    CHECK_THROWS_WITH_AS(gsync::config::from_env(), doctest::Contains("GSYNC_NET_PROBE"), gsync::error);
  }
  {
    gsync::config cfg;
    cfg.transport.net_gbps = -1;
    CHECK_THROWS_WITH_AS(gsync_test::run_tcp(2, [](auto&, auto&) {}, cfg), doctest::Contains("net_gbps"), std::runtime_error);
  }
}

TEST_CASE("link probe: a rank that skips it while the others probe makes every rank fail, naming the probe") {
  const auto port = gsync_test::free_port();
  constexpr int n = 3;
  std::vector<std::string> msg(n);
  std::vector<gsync::errc> kind(n, gsync::errc{});
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      gsync::bootstrap::launch_info li;
      li.rank = r;
      li.size = n;
      li.master_port = port;
      li.host_id = "probe-host-" + std::to_string(r);
      gsync::transport::host_options opt;
      opt.net_probe = r != 1;
      try {
        gsync::config cfg;
        cfg.timeout = std::chrono::seconds(10);
        cfg.transport = opt;
        auto comm = gsync::tcp_communicator::join(li, cfg);
        std::vector<float> v(1000, 1.0f);
        gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v});
      } catch (const gsync::error& e) {
        kind[r] = e.kind();
        msg[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank ", r, ": ", msg[r]);
    CHECK(!msg[r].empty());
  }
  // Rank 1 reads rank 0's probe where it expects the ring's first message; rank 2 reads rank 1's
  // allreduce where it expects the probe. Both say what each side called.
  for (int r : {1, 2}) {
    INFO("rank ", r, ": ", msg[r]);
    CHECK(kind[r] == gsync::errc::mismatch);
    CHECK(msg[r].find("start-up network probe") != std::string::npos);
    CHECK(msg[r].find("allreduce") != std::string::npos);
  }
}

TEST_CASE("link probe fit: the slower of the two slopes, alpha kept within the 8-byte step") {
  using gsync::transport::fit_links;
  // 4 fake hosts x 1 rank at 1 Gbit/s (measured): both slopes agree, about 0.96 Gbit/s.
  const gsync::link_estimate a = fit_links(104.6, 625.4, 8832.6);
  CHECK(a.gbps() == doctest::Approx(0.958).epsilon(0.01));
  CHECK(a.alpha_us == doctest::Approx(625.4 - a.beta_us_per_byte * 65536));  // 78 us: within [52.3, 104.6]
  CHECK(a.measured);
  // 2 fake hosts x 4 ranks (measured: benchmarks/results/from_code_comments.md): the 64 KiB step
  // came out slow, so 64 KiB -> 1 MiB alone would overstate the rate; 8 B -> 1 MiB does not.
  const gsync::link_estimate b = fit_links(125.9, 3693.2, 8713.3);
  CHECK(b.gbps() == doctest::Approx(0.977).epsilon(0.01));
  CHECK(b.alpha_us == doctest::Approx(125.9));  // the intercept (3.2 ms) is clamped to the 8-byte step
  // A 64 KiB step at its bytes' time (token-bucket credit): alpha floored at half of 8 B.
  const gsync::link_estimate c = fit_links(100, 500, 8400);
  CHECK(c.alpha_us == doctest::Approx(50));
  // In between: the intercept itself.
  const gsync::link_estimate e = fit_links(100, 600, 8400);
  CHECK(e.alpha_us == doctest::Approx(600 - e.beta_us_per_byte * 65536));
  CHECK(e.alpha_us > 50);
  CHECK(e.alpha_us < 100);
  // Nonsense times (a free network) stay at the floors.
  const gsync::link_estimate d = fit_links(0, 0, 0);
  CHECK(d.beta_us_per_byte == doctest::Approx(8e-8));
  CHECK(d.alpha_us == 1.0);
}
