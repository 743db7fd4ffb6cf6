// The allreduce sweep in process (support/allreduce_sweep.hpp says what it covers; the TCP half
// is in test_allreduce_sweep_tcp.cpp), and the GSYNC_ALGO and automatic-choice tests.

#include "support/allreduce_sweep.hpp"

#include <gsync/transport/links/tcp_link.hpp>

#define GSYNC_SWEEP(N) \
  TEST_CASE("allreduce sweep inproc world " #N) { run_sweep<false>(N); }

GSYNC_SWEEP(1)
GSYNC_SWEEP(2)
GSYNC_SWEEP(3)
GSYNC_SWEEP(4)
GSYNC_SWEEP(5)
GSYNC_SWEEP(6)
GSYNC_SWEEP(7)
GSYNC_SWEEP(8)

// GSYNC_ALGO (config.algo) forces each algorithm by name for the automatic policy; an unknown
// name is an invalid_argument that lists the valid names.
TEST_CASE("GSYNC_ALGO forces every allreduce algorithm, unknown names list the valid ones") {
  using namespace gsync::algo;
  const std::pair<const char*, allreduce_id> forced[] = {
      {"ring", allreduce_id_of<ring>},   {"recursive_doubling", allreduce_id_of<recursive_doubling>},
      {"halving_doubling", allreduce_id_of<halving_doubling>}, {"tree", allreduce_id_of<tree>},
      {"direct", allreduce_id_of<direct>}, {"star", allreduce_id_of<star>}};
  for (const auto& entry : forced) {
    const char* const algo_name = entry.first;  // (not a structured binding: clang 14 cannot capture those)
    const allreduce_id id = entry.second;
    CAPTURE(algo_name);
    gsync::config cfg = test_config();
    cfg.algo = algo_name;
    for (int n : {3, 4}) {
      run_inproc(n, [&](auto& comm, world_sync&) {
        REQUIRE(comm.settings().algo == algo_name);
        for (std::size_t count : {std::size_t{5}, std::size_t{100000}}) {
          const auto ch = gsync::algo::choose_allreduce(count * sizeof(double), comm.size(), gsync::local_costs_of(comm.transport()),
                                                        comm.settings().algo);
          REQUIRE(ch.id == id);
          REQUIRE(ch.reason() == "forced by GSYNC_ALGO=" + std::string(algo_name));
          std::vector<double> v(count, comm.rank() + 1.0);
          gsync::allreduce(comm, std::span<double>{v}, gsync::op::avg{});
          for (double x : v) REQUIRE(x == (n + 1) / 2.0);
        }
      }, cfg);
    }
  }
  gsync::config cfg = test_config();
  cfg.algo = "bogus_tree";
  run_inproc(2, [](auto& comm, world_sync&) {
    std::vector<float> v(4);
    try {
      gsync::allreduce(comm, std::span<float>{v});
      FAIL("unknown algorithm accepted");
    } catch (const gsync::error& e) {
      REQUIRE(e.code() == gsync::errc::invalid_argument);
      const std::string what = e.what();
      CHECK(what.find("bogus_tree") != std::string::npos);
      for (const char* valid : {"ring", "recursive_doubling", "halving_doubling", "tree", "direct", "star"})
        CHECK(what.find(valid) != std::string::npos);
    }
  }, cfg);
}

// The automatic choice is the cheapest estimate, the reason names the runner-up, and every
// algorithm name round-trips through parse_allreduce and visit.
TEST_CASE("automatic allreduce choice follows the cost model") {
  using namespace gsync::algo;
  const link_costs tcp = gsync::link_traits<gsync::transport::tcp_link>::costs;
  const auto m = tcp.model;
  for (int n = 1; n <= 64; ++n) {
    for (std::size_t bytes = 1; bytes <= (std::size_t{256} << 20); bytes *= 2) {
      const choice ch = choose_allreduce(bytes, n, tcp, "");
      for (allreduce_id id : all_allreduce_ids) CHECK(estimate_us(ch.id, bytes, n, m) <= estimate_us(id, bytes, n, m));
      if (n > 1) {
        CHECK(ch.runner_up != ch.id);
        CHECK(ch.runner_up_us >= ch.cost_us);
      }
    }
  }
  const choice ch = choose_allreduce(8, 4, tcp, "auto");
  const std::string why = ch.reason();
  CHECK(why.find(std::string(name(ch.runner_up))) != std::string::npos);
  CHECK(why.find("8 B on 4 ranks over tcp") != std::string::npos);
  for (allreduce_id id : all_allreduce_ids) {
    const auto parsed = parse_allreduce(name(id), "test");
    REQUIRE(parsed);
    CHECK(*parsed == id);
    CHECK(visit(id, [](auto a) { return std::string(decltype(a)::name); }) == name(id));
  }
  CHECK(!parse_allreduce("auto", "test"));
  CHECK(!parse_allreduce("", "test"));
}
