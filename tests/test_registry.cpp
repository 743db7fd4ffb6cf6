// The algorithm registries (algo/registry.hpp) and the traits the automatic choice reads
// (core/cost_model.hpp, transport/links/): names, aliases and identities come from the lists;
// each algorithm's bytes-sent formula is what a transport counts; the choice follows the costs a
// transport declares, never its name.

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <vector>

#include "support/mailbox_transport.hpp"
#include "support/world.hpp"

#include <gsync/algo/registry.hpp>
#include <gsync/algo/select.hpp>
#include <gsync/algo/select_collectives.hpp>
#include <gsync/allreduce.hpp>
#include <gsync/transport/inproc.hpp>
#include <gsync/transport/links/shm_link.hpp>
#include <gsync/transport/links/tcp_link.hpp>

namespace {

constexpr gsync::link_costs shm_costs = gsync::link_traits<gsync::transport::shm_link>::costs;
constexpr gsync::link_costs tcp_costs = gsync::link_traits<gsync::transport::tcp_link>::costs;

// A transport that declares nothing about its costs: the mailbox transport under another type.
struct undeclared_transport : gsync_test::mailbox_transport {
  using mailbox_transport::mailbox_transport;
};

// A transport whose costs are registered through transport_traits (a user's way).
struct registered_transport : gsync_test::mailbox_transport {
  using mailbox_transport::mailbox_transport;
};

gsync::config test_config() {
  gsync::config c;
  c.timeout = std::chrono::seconds(120);
  return c;
}

}  // namespace

template <>
struct gsync::transport_traits<registered_transport> : gsync::transport_traits<void> {
  static constexpr gsync::link_costs local_costs{"registered", gsync::cost_model::shared_memory_cores_shared(), true};
};

TEST_CASE("registry: every allreduce algorithm round-trips through its name, aliases and identity") {
  using namespace gsync::algo;
  const std::string names = allreduce_names();
  int count = 0;
  allreduce_registry::for_each([&](auto a, allreduce_id id) {
    using A = decltype(a);
    CAPTURE(std::string(A::name));
    const auto parsed = parse_allreduce(A::name, "test");
    REQUIRE(parsed);
    CHECK(*parsed == id);
    CHECK(name(id) == A::name);
    CHECK(visit(id, [](auto b) { return std::string(decltype(b)::name); }) == std::string(A::name));
    CHECK(names.find(std::string(A::name)) != std::string::npos);
    CHECK(gsync::algo_code(A::name) != 255);  // has a wire code (core/fingerprint.hpp)
    ++count;
  });
  CHECK(count == static_cast<int>(allreduce_registry::size));
  CHECK(names.rfind("auto", 0) == 0);
  CHECK(*parse_allreduce("rd", "t") == allreduce_id_of<recursive_doubling>);
  CHECK(*parse_allreduce("hd", "t") == allreduce_id_of<halving_doubling>);
  CHECK(*parse_allreduce("rabenseifner", "t") == allreduce_id_of<halving_doubling>);
  CHECK(*parse_allreduce("hier", "t") == allreduce_id_of<hierarchical_default>);
  CHECK_THROWS_WITH_AS(parse_allreduce("r", "GSYNC_ALGO"), doctest::Contains("valid: auto, ring"), gsync::error);
  // The flat list leaves out what only exists across hosts.
  CHECK(all_allreduce_ids.size() + 1 == allreduce_registry::size);
  for (allreduce_id id : all_allreduce_ids) CHECK(id != allreduce_id_of<hierarchical_default>);
}

TEST_CASE("registry: which collectives an algorithm serves is read from its schedules") {
  using namespace gsync::algo;
  CHECK(valid_names("broadcast") == "auto, ring, binomial_tree");
  CHECK(valid_names("reduce") == "auto, ring, binomial_tree");
  CHECK(valid_names("reduce_scatter") == "auto, ring, dissemination");
  CHECK(valid_names("allgather") == "auto, ring, dissemination");
  CHECK(valid_names("alltoall") == "auto, pairwise");
  CHECK(*parse_collective("broadcast", "tree", "t") == collective_id_of<binomial_tree>);
  CHECK(*parse_collective("allgather", "dissemination", "t") == collective_id_of<dissemination>);
  CHECK_THROWS_WITH_AS(parse_collective("alltoall", "ring", "GSYNC_ALGO_ALLTOALL"), doctest::Contains("valid: auto, pairwise"),
                       gsync::error);
  CHECK_THROWS_AS(parse_collective("broadcast", "dissemination", "t"), gsync::error);
  collective_registry::for_each([](auto a, collective_id id) {
    CHECK(name(id) == decltype(a)::name);
    CHECK(gsync::algo_code(decltype(a)::name) != 255);
  });
}

// The bytes-sent formula each algorithm carries (used by the gradient layer where a transport
// does not count) against what the transport was handed, summed over every rank.
TEST_CASE("registry: each allreduce algorithm's bytes-sent formula matches the bytes the transport counts") {
  using namespace gsync::algo;
  for (int n = 1; n <= 8; ++n) {
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{40001}}) {
      allreduce_registry::for_each([&](auto a, allreduce_id id) {
        using A = decltype(a);
        CAPTURE(n);
        CAPTURE(count);
        CAPTURE(std::string(A::name));
        std::atomic<std::uint64_t> total{0};
        gsync_test::run_mailbox(n, [&](auto& comm, gsync_test::world_sync&) {
          std::vector<double> v(count, comm.rank() + 1.0);
          const std::uint64_t before = comm.transport().payload_bytes_posted();
          gsync::allreduce<A>(comm, std::span<double>{v}, gsync::op::sum{});
          total += comm.transport().payload_bytes_posted() - before;
          CHECK(v[0] == n * (n + 1) / 2.0);
        }, test_config());
        const double formula = bytes_sent(id, count * sizeof(double), n) * n;
        CHECK(static_cast<double>(total.load()) == doctest::Approx(formula));
      });
    }
  }
}

TEST_CASE("traits: the automatic choice follows the costs the links declare, never a transport's name") {
  using namespace gsync::algo;
  // The same model under another name chooses the same; the shared-memory model chooses
  // differently from loopback TCP's somewhere, so the model is what is read.
  const gsync::link_costs tcp_named_shm{"shm", tcp_costs.model, false};
  const gsync::link_costs shm_named_tcp{"tcp", shm_costs.model, true};
  int differ = 0;
  for (int n = 2; n <= 16; ++n)
    for (std::size_t bytes = 8; bytes <= (std::size_t{64} << 20); bytes *= 4) {
      CHECK(choose_allreduce(bytes, n, tcp_named_shm, "").id == choose_allreduce(bytes, n, tcp_costs, "").id);
      CHECK(choose_allreduce(bytes, n, shm_named_tcp, "").id == choose_allreduce(bytes, n, shm_costs, "").id);
      if (choose_allreduce(bytes, n, shm_costs, "").id != choose_allreduce(bytes, n, tcp_costs, "").id) ++differ;
    }
  CHECK(differ > 0);
  // The measured table for ranks that outnumber the cores applies to links that share memory.
  gsync::topology shared = gsync::topology::single_host(4);
  shared.set_cores_shared(true);
  CHECK(choose_allreduce(8, 4, shm_named_tcp, "", &shared).id == allreduce_id_of<direct>);
  CHECK(choose_allreduce(8, 4, shm_named_tcp, "", &shared).reason().find("measured table") != std::string::npos);
  CHECK(choose_allreduce(8, 4, tcp_named_shm, "", &shared).reason().find("measured table") == std::string::npos);
}

TEST_CASE("traits: a transport's costs come from its member, its traits, or are marked as assumed") {
  auto w = std::make_shared<gsync_test::mailbox_world>(2);
  const gsync_test::mailbox_transport mailbox(w, 0);
  const undeclared_transport bare(w, 0);
  const registered_transport registered(w, 0);
  CHECK(gsync::local_costs_of(mailbox).declared);
  CHECK(gsync::local_costs_of(mailbox).name == "mailbox");
  CHECK(gsync::local_costs_of(registered).name == "registered");
  CHECK(gsync::local_costs_of(registered).shared_memory);
  CHECK(gsync::local_costs_of(registered).model.alpha_us == gsync::cost_model::shared_memory_cores_shared().alpha_us);
  const gsync::link_costs assumed = gsync::local_costs_of(bare);
  CHECK(!assumed.declared);
  CHECK(assumed.name == "mailbox");
  CHECK(assumed.model.alpha_us == gsync::cost_model::tcp_loopback().alpha_us);
  const auto ch = gsync::algo::choose_allreduce(1 << 20, 2, assumed, "");
  CHECK(ch.reason().find("declares no cost model") != std::string::npos);
  CHECK(gsync::algo::choose_allreduce(1 << 20, 2, gsync::local_costs_of(mailbox), "").reason().find("declares no cost model") ==
        std::string::npos);
  // The in-process transport declares its own through a member (costed_transport).
  static_assert(gsync::costed_transport<gsync::transport::inproc>);
  auto world = std::make_shared<gsync::transport::inproc_world>(2);
  gsync::transport::inproc ip(world, 0);
  CHECK(gsync::local_costs_of(ip).name == "inproc");
  CHECK(gsync::local_costs_of(ip).shared_memory);
  ip.leave();
}
