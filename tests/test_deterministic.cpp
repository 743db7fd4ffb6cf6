// Deterministic mode (config::deterministic, GSYNC_DETERMINISTIC=1): the automatic choices read
// the placement, the sizes and the settings only, never what the start-up probe measured, so that
// a job's results are bitwise equal from run to run.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/env.hpp"
#include "support/world.hpp"

#include <gsync/allreduce.hpp>
#include <gsync/communicator.hpp>

using namespace std::chrono_literals;

TEST_CASE("deterministic mode: GSYNC_DETERMINISTIC is read by config::from_env, and checked") {
  CHECK_FALSE(gsync::config{}.deterministic);
  {
    gsync_test::scoped_env on("GSYNC_DETERMINISTIC", "1");
    CHECK(gsync::config::from_env().deterministic);
  }
  gsync_test::scoped_env bad("GSYNC_DETERMINISTIC", "yes");
  CHECK_THROWS_WITH_AS(gsync::config::from_env(), doctest::Contains("GSYNC_DETERMINISTIC"), gsync::error);
}

TEST_CASE("deterministic mode: the choices see assumed (or given) links even where the transport measured them") {
  // Three hosts of one rank; the transport probes its links (explicitly on), the communicator is
  // deterministic: its placement carries the assumed links, with the given latency.
  const auto port = gsync_test::free_port();
  constexpr int n = 3;
  for (const auto& e : gsync_test::rank_errors(n, [&](int r) {
         gsync::transport::host_options opt;
         opt.net_probe = true;
         opt.net_latency_us = 7;
         auto x = std::make_unique<gsync::transport::tcp>(gsync_test::test_launch_info(r, n, port, "det-host-" + std::to_string(r)),
                                                          10s, gsync::logger(r), opt);
         x->measure_links(10s);  // as join does, which a deterministic communicator's skips
         gsync::config cfg = gsync_test::with_timeout(20s);
         cfg.deterministic = true;
         cfg.transport = opt;
         gsync::tcp_communicator comm(std::move(x), cfg);
         const auto& measured = comm.transport().topo().links();
         const auto& seen = comm.placement().links();
         std::string e;
         if (!measured || !measured->measured) e = "the transport did not measure its links";
         else if (!seen || seen->measured) e = "the placement carries measured links";
         else if (seen->alpha_us != 7.0 || seen->beta_us_per_byte != gsync::link_estimate{}.beta_us_per_byte) e = "not the assumed links with the given latency";
         std::vector<float> v(1000, 1.0f);
         gsync::allreduce(comm, std::span<float>{v});
         if (v[999] != 3.0f) e += " wrong sum";
         return e;
       }))
    FAIL_CHECK(e);
}

TEST_CASE("deterministic mode: the same job run twice gives the same bits") {
  // 6 ranks on 2 fake hosts (shared memory inside, TCP across), float sums of values whose order
  // of addition shows in the last bits, at sizes where different algorithms are chosen.
  const std::vector<std::size_t> counts = {1, 3, 100, 4099, 65537, 1 << 19};
  auto run = [&] {
    std::vector<std::vector<std::uint32_t>> bits(counts.size());
    std::mutex m;
    gsync::config cfg = gsync_test::with_timeout(60s);
    cfg.deterministic = true;
    gsync_test::run_mixed(6, 3, [&](auto& comm, auto&) {
      for (std::size_t k = 0; k < counts.size(); ++k) {
        std::mt19937 gen(static_cast<unsigned>(1000 * comm.rank() + k));
        std::uniform_real_distribution<float> d(-1e3f, 1e3f);
        std::vector<float> v(counts[k]);
        for (auto& x : v) x = d(gen);
        gsync::allreduce(comm, std::span<float>{v});
        if (comm.rank() == 0) {
          std::vector<std::uint32_t> b(v.size());
          std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
          std::lock_guard lk(m);
          bits[k] = std::move(b);
        }
      }
    }, cfg);
    return bits;
  };
  const auto first = run(), second = run();
  for (std::size_t k = 0; k < counts.size(); ++k) {
    CAPTURE(counts[k]);
    REQUIRE(first[k].size() == counts[k]);
    CHECK(first[k] == second[k]);
  }
}
