// Hierarchical allreduce on pretend and real multi-host placements: in-process worlds whose ranks
// are placed on hosts, and host-transport worlds with shared memory inside a host and TCP across.
// Every result is checked against the double reference and for bitwise equality across ranks.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "support/failures.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

#include <gsync/algo/hierarchical.hpp>
#include <gsync/algo/select.hpp>
#include <gsync/transport/links/shm_link.hpp>
#include <gsync/transport/links/tcp_link.hpp>

namespace {
// What the transport's link types declare (transport/links/): the automatic choice reads these.
constexpr gsync::link_costs shm_costs = gsync::link_traits<gsync::transport::shm_link>::costs;
constexpr gsync::link_costs tcp_costs = gsync::link_traits<gsync::transport::tcp_link>::costs;
}  // namespace

namespace {

using errors = gsync_test::failures;

template <class T, class Op, class Algo, class Comm>
void one(Comm& comm, gsync_test::world_sync& sync, errors& errs, std::size_t count, bool in_place, const std::string& where) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  if (in_place) {
    out = in;
    gsync::allreduce<Algo>(comm, std::span<T>{out}, Op{});
  } else {
    gsync::allreduce<Algo>(comm, std::span<const T>{in}, std::span<T>{out}, Op{});
  }
  const std::string what = where + " " + std::string(gsync::name(gsync::dtype_of<T>)) + " " + std::string(Op::name) +
                           " count=" + std::to_string(count) + (in_place ? " in-place" : "") + " rank " + std::to_string(r);
  for (std::size_t i = 0; i < count; ++i)
    if (!gsync_test::check_element<T, Op>(out[i], n, i)) {
      errs.add(what + ": element " + std::to_string(i) + " wrong");
      break;
    }
  sync.outputs[r] = out.data();
  sync.bar.arrive_and_wait();
  if (count && std::memcmp(out.data(), sync.outputs[0], count * sizeof(T)) != 0) errs.add(what + ": differs from rank 0");
  sync.bar.arrive_and_wait();
}

// The largest count: a prime near 10^5 in 64 KiB segments, or GSYNC_TEST_MEDIUM elements (the
// sanitizer stage sets 4099) in 2 KiB segments; several segments per host's slice either way.
const char* const medium_env = std::getenv("GSYNC_TEST_MEDIUM");
const std::size_t big_count = medium_env ? std::stoull(medium_env) : 99991;
const std::size_t big_segment = medium_env ? 2 << 10 : 64 << 10;

template <class Algo, class Comm>
void workload(Comm& comm, gsync_test::world_sync& sync, errors& errs, const std::string& where) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, std::size_t{257}, big_count}) {
    comm.set_segment_bytes(count == 257 ? 16 : count == big_count ? big_segment : 64 << 10);
    for (int ip = 0; ip < 2; ++ip) {
      one<float, gsync::op::sum, Algo>(comm, sync, errs, count, ip, where);
      one<float, gsync::op::avg, Algo>(comm, sync, errs, count, ip, where);
      one<gsync::half, gsync::op::avg, Algo>(comm, sync, errs, count, ip, where);
      one<double, gsync::op::prod, Algo>(comm, sync, errs, count, ip, where);
      one<std::int32_t, gsync::op::max, Algo>(comm, sync, errs, count, ip, where);
      one<std::int64_t, gsync::op::avg, Algo>(comm, sync, errs, count, ip, where);
    }
  }
}

using hier_ring = gsync::algo::hierarchical<>;
using hier_rd = gsync::algo::hierarchical<gsync::algo::ring, gsync::algo::recursive_doubling>;
// Two-level forms (an intra-host schedule without reduce-scatter/allgather phases).
using hier_tree_ring = gsync::algo::hierarchical<gsync::algo::tree, gsync::algo::ring>;
using hier_rd_hd = gsync::algo::hierarchical<gsync::algo::recursive_doubling, gsync::algo::halving_doubling>;
using hier_hd_direct = gsync::algo::hierarchical<gsync::algo::halving_doubling, gsync::algo::direct>;

gsync::config cfg() {
  gsync::config c;
  c.timeout = std::chrono::seconds(60);
  return c;
}

}  // namespace

TEST_CASE("hierarchical allreduce, in-process ranks placed on hosts") {
  // (world, ranks per host): uniform placements, one host, one rank per host, and irregular ones
  // (the last host smaller), which run the uneven two-level form.
  for (auto [n, per] : {std::pair{4, 2}, std::pair{6, 2}, std::pair{6, 3}, std::pair{8, 4}, std::pair{8, 2}, std::pair{3, 3},
                        std::pair{3, 1}, std::pair{5, 2}, std::pair{7, 3}, std::pair{1, 1}}) {
    errors errs;
    const std::string where = "inproc N=" + std::to_string(n) + " L=" + std::to_string(per);
    auto comms = gsync::make_inproc_world(n, cfg(), per);
    gsync_test::run_threads<gsync::inproc_communicator>(
        n, [&](int r) { return std::move(comms[r]); },
        [&](auto& comm, gsync_test::world_sync& sync) {
          workload<hier_ring>(comm, sync, errs, where + " hier<ring,ring>");
          workload<hier_rd>(comm, sync, errs, where + " hier<ring,rd>");
          workload<hier_tree_ring>(comm, sync, errs, where + " hier<tree,ring>");
          workload<hier_rd_hd>(comm, sync, errs, where + " hier<rd,hd>");
          one<float, gsync::op::avg, hier_hd_direct>(comm, sync, errs, big_count, false, where + " hier<hd,direct>");
          one<std::int32_t, gsync::op::sum, hier_hd_direct>(comm, sync, errs, 5, true, where + " hier<hd,direct>");
        });
    for (auto& e : errs.list) FAIL_CHECK(e);
  }
}

TEST_CASE("hierarchical allreduce over shared memory inside hosts and TCP across") {
  for (const auto& shape : {std::pair{4, 2}, std::pair{6, 3}, std::pair{6, 2}}) {
    const int n = shape.first, per = shape.second;  // (not a structured binding: clang 14 cannot capture those)
    errors errs;
    const std::string where = "host N=" + std::to_string(n) + " L=" + std::to_string(per);
    gsync_test::run_mixed(n, per, [&](auto& comm, gsync_test::world_sync& sync) {
      CHECK(comm.transport().topo().hosts() == n / per);
      workload<hier_ring>(comm, sync, errs, where);
      workload<hier_rd_hd>(comm, sync, errs, where + " hier<rd,hd>");
    }, cfg());
    for (auto& e : errs.list) FAIL_CHECK(e);
  }
}

TEST_CASE("automatic choice: hierarchical for large buffers when ranks span hosts evenly") {
  using namespace gsync::algo;
  const gsync::topology two_by_four = gsync::topology::blocks(8, 4);
  CHECK(choose_allreduce(std::size_t{64} << 20, 8, shm_costs, "", &two_by_four).id == allreduce_id_of<hierarchical_default>);
  CHECK(choose_allreduce(8, 8, shm_costs, "", &two_by_four).id != allreduce_id_of<hierarchical_default>);
  const std::string why = choose_allreduce(std::size_t{64} << 20, 8, shm_costs, "", &two_by_four).reason();
  CHECK(why.find("several hosts") != std::string::npos);
  // Uneven placement (hosts of 3, 3, 2 ranks), one host, or one rank per host: never hierarchical.
  const gsync::topology uneven = gsync::topology::blocks(8, 3), one = gsync::topology::single_host(8),
                        spread = gsync::topology::blocks(8, 1);
  for (std::size_t bytes = 8; bytes <= (std::size_t{256} << 20); bytes *= 4)
    for (const auto* t : {&uneven, &one, &spread}) CHECK(choose_allreduce(bytes, 8, tcp_costs, "", t).id != allreduce_id_of<hierarchical_default>);
  // Forced by name, whatever the placement.
  CHECK(choose_allreduce(8, 8, tcp_costs, "hierarchical", &one).id == allreduce_id_of<hierarchical_default>);
  // On the network, large buffers go to the pipelined ring rather than halving-doubling.
  const gsync::topology four_hosts = gsync::topology::blocks(4, 1);
  CHECK(choose_allreduce(std::size_t{64} << 20, 4, tcp_costs, "", &four_hosts).id == allreduce_id_of<ring>);
  // The communicator's segment size, when given, is the one the estimate uses (it sets the ring's
  // pipelining and the hierarchical schedule's slices): 64 MiB in 64 KiB segments.
  const std::size_t big = std::size_t{64} << 20, seg = 64 << 10;
  const auto ch = choose_allreduce(big, 8, shm_costs, "", &two_by_four, nullptr, seg);
  REQUIRE(ch.id == allreduce_id_of<hierarchical_default>);
  cost_model intra = intra_model(shm_costs, two_by_four), net = network_of(two_by_four);
  intra.segment_bytes = net.segment_bytes = seg;
  CHECK(ch.cost_us == doctest::Approx(estimate_hierarchical_us(big, 2, 4, intra, net)));
  CHECK(ch.cost_us != doctest::Approx(choose_allreduce(big, 8, shm_costs, "", &two_by_four).cost_us));
}

TEST_CASE("automatic choice: a slow message inside hosts (timed at start-up) keeps small buffers off the hierarchical schedule") {
  using namespace gsync::algo;
  // 2 hosts x 4 ranks on 1 Gbit/s links with 100 us per message between hosts.
  gsync::topology t = gsync::topology::blocks(8, 4);
  gsync::link_estimate l;
  l.alpha_us = 100;
  l.beta_us_per_byte = 8e-3;
  l.measured = true;
  l.intra_alpha_us = 5;  // a core per rank: a message inside a host is cheap
  t.set_links(l);
  CHECK(intra_model(shm_costs, t).alpha_us == 5);
  CHECK(choose_allreduce(std::size_t{64} << 20, 8, shm_costs, "", &t).id == allreduce_id_of<hierarchical_default>);
  CHECK(choose_allreduce(std::size_t{64} << 10, 8, shm_costs, "", &t).id == allreduce_id_of<hierarchical_default>);
  // 4 KiB: recursive doubling crosses hosts once (its steps at distance 1 and 2 stay inside), the
  // hierarchical ring twice; the link carries 4 x 4 KiB, about 130 us.
  CHECK(choose_allreduce(std::size_t{4} << 10, 8, shm_costs, "", &t).id == allreduce_id_of<recursive_doubling>);
  l.intra_alpha_us = 400;  // an oversubscribed host: every message inside it waits for a wake-up
  t.set_links(l);
  CHECK(choose_allreduce(std::size_t{64} << 20, 8, shm_costs, "", &t).id == allreduce_id_of<hierarchical_default>);
  CHECK(choose_allreduce(std::size_t{4} << 10, 8, shm_costs, "", &t).id != allreduce_id_of<hierarchical_default>);
  CHECK(choose_allreduce(8, 8, shm_costs, "", &t).id != allreduce_id_of<hierarchical_default>);
  // Not measured (0): the assumed cost.
  l.intra_alpha_us = 0;
  t.set_links(l);
  CHECK(intra_model(shm_costs, t).alpha_us == cost_model::shared_memory().alpha_us);
}

TEST_CASE("topology: how many ranks of a host cross to other hosts in each step of the flat schedules") {
  using gsync::topology;
  const topology two_by_four = topology::blocks(8, 4);
  CHECK(two_by_four.xor_load(0) == 0);  // partners r^1 and r^2 on the same host
  CHECK(two_by_four.xor_load(1) == 0);
  CHECK(two_by_four.xor_load(2) == 4);  // r^4: all four ranks of a host cross at once
  CHECK(two_by_four.xor_load(3) == 0);  // no such step
  CHECK(two_by_four.fold_load() == 0);
  CHECK(two_by_four.ring_load() == 1);
  CHECK(two_by_four.all_to_all_load() == 16);
  const topology spread = topology::blocks(8, 1);
  for (int k = 0; k < 3; ++k) CHECK(spread.xor_load(k) == 1);
  CHECK(spread.ring_load() == 1);
  CHECK(spread.all_to_all_load() == 7);
  // Round robin over two hosts: neighbours are always on the other host.
  const topology rr({0, 1, 0, 1, 0, 1, 0, 1});
  CHECK(rr.xor_load(0) == 4);
  CHECK(rr.xor_load(1) == 0);
  CHECK(rr.xor_load(2) == 0);
  CHECK(rr.ring_load() == 4);
  // 6 ranks on 2 hosts of 3: core ranks 0..3, folded 4, 5 onto 0, 1 (all crossing).
  const topology six = topology::blocks(6, 3);
  CHECK(six.xor_load(0) == 1);  // 2 <-> 3
  CHECK(six.xor_load(1) == 1);  // 1 <-> 3
  CHECK(six.fold_load() == 2);
  CHECK(six.ring_load() == 1);
  const topology one = topology::single_host(4);
  CHECK(one.xor_load(0) == 0);
  CHECK(one.ring_load() == 0);
}

TEST_CASE("placed cost model: one rank per host is the flat network model, and ranks of a host share its link") {
  using namespace gsync::algo;
  gsync::link_estimate l;
  l.alpha_us = 100;
  l.beta_us_per_byte = 8e-3;
  l.intra_alpha_us = 300;
  const cost_model net = cost_model::network(l);
  cost_model intra = cost_model::shared_memory();
  intra.alpha_us = 300;
  for (int n = 2; n <= 8; ++n) {
    const gsync::topology t = gsync::topology::blocks(n, 1);
    for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, std::size_t{1} << 20, std::size_t{64} << 20})
      for (allreduce_id id : all_allreduce_ids) {
        INFO("n=" << n << " bytes=" << bytes << " " << name(id));
        CHECK(estimate_placed_us(id, bytes, t, intra, net) == doctest::Approx(estimate_us(id, bytes, n, net)));
      }
  }
  // 2 hosts x 4 ranks, 64 KiB: recursive doubling's two steps inside the hosts cost the shared
  // memory's hop, the crossing step carries 4 x 64 KiB on each link.
  const gsync::topology t = gsync::topology::blocks(8, 4);
  const double s = 65536;
  const double rd = 2 * (300 + s * intra.beta_us_per_byte) + (100 + 4 * s * 8e-3);
  CHECK(estimate_placed_us(allreduce_id_of<recursive_doubling>, 65536, t, intra, net) == doctest::Approx(rd));
  CHECK(estimate_placed_us(allreduce_id_of<recursive_doubling>, 65536, t, intra, net) >
        estimate_us(allreduce_id_of<recursive_doubling>, 65536, 8, net));
  // Round robin: the ring's every hop crosses, four senders per link.
  const gsync::topology rr({0, 1, 0, 1, 0, 1, 0, 1});
  CHECK(estimate_placed_us(allreduce_id_of<ring>, std::size_t{64} << 20, rr, intra, net) ==
        doctest::Approx(4 * estimate_placed_us(allreduce_id_of<ring>, std::size_t{64} << 20, t, intra, net)).epsilon(0.01));
  // With those links (the shaped cluster's, an oversubscribed host), 64 KiB goes hierarchical:
  // recursive doubling's crossing step alone is about 2.2 ms there.
  gsync::topology placed = t;
  placed.set_links(l);
  CHECK(choose_allreduce(65536, 8, shm_costs, "", &placed).id == allreduce_id_of<hierarchical_default>);
  CHECK(choose_allreduce(8, 8, shm_costs, "", &placed).id == allreduce_id_of<recursive_doubling>);
}

// Ranks that share cores (the probe's shared_msg_us): every message costs the machines' time,
// wherever it is in the schedule, so the fewest messages win small buffers (star), recursive
// doubling the next sizes, then the bandwidth-optimal schedules; without sharing, star's rank 0
// works through 2(N-1) messages in a row and never beats recursive doubling.
TEST_CASE("placed cost model: ranks that share cores pay for every message") {
  using namespace gsync::algo;
  const cost_model m = cost_model::tcp_loopback();
  CHECK(total_messages(allreduce_id_of<ring>, 8, 8, m) == 112);
  CHECK(total_messages(allreduce_id_of<recursive_doubling>, 8, 8, m) == 24);
  CHECK(total_messages(allreduce_id_of<recursive_doubling>, 8, 6, m) == 12);  // 4 x 2 in the core, 2 x 2 folded
  CHECK(total_messages(allreduce_id_of<halving_doubling>, 8, 8, m) == 48);
  CHECK(total_messages(allreduce_id_of<direct>, 8, 8, m) == 56);
  CHECK(total_messages(allreduce_id_of<star>, 8, 8, m) == 14);
  CHECK(total_messages(allreduce_id_of<tree>, 8, 8, m) == 28);
  CHECK(total_messages(allreduce_id_of<star>, 8, 1, m) == 0);
  // The 8 fake hosts of benchmarks/netcluster.sh on 2 cores, as the probe measured them.
  gsync::link_estimate l;
  l.alpha_us = 27.6;
  l.beta_us_per_byte = 8.0 / (0.952 * 1e3);
  l.shared_msg_us = 6.9;
  const cost_model net = cost_model::network(l);
  CHECK(net.shared_msg_us == 6.9);
  const cost_model intra = cost_model::shared_memory();
  gsync::topology t = gsync::topology::blocks(8, 1);
  for (allreduce_id id : all_allreduce_ids) {
    INFO(name(id));
    cost_model bare = net;
    bare.alpha_us = 0;
    bare.shared_msg_us = 0;
    // The cores and the links work at once: the busier of the two sets the time, and a quarter
    // of the other's is added. Halving-doubling's bytes without its step penalty up to 2 MiB.
    for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, std::size_t{1} << 20}) {
      const double w = id == allreduce_id_of<halving_doubling> ? 1.75 * static_cast<double>(bytes) * net.beta_us_per_byte
                                                            : estimate_us(id, bytes, 8, bare);
      const double c = total_messages(id, bytes, 8, net) * 6.9;
      CHECK(estimate_placed_us(id, bytes, t, intra, net) == doctest::Approx(std::max(w, c) + 0.25 * std::min(w, c)));
    }
  }
  t.set_links(l);
  CHECK(choose_allreduce(8, 8, tcp_costs, "", &t).id == allreduce_id_of<star>);
  CHECK(choose_allreduce(4096, 8, tcp_costs, "", &t).id == allreduce_id_of<recursive_doubling>);
  CHECK(choose_allreduce(65536, 8, tcp_costs, "", &t).id == allreduce_id_of<halving_doubling>);
  CHECK(choose_allreduce(std::size_t{4} << 20, 8, tcp_costs, "", &t).id == allreduce_id_of<ring>);
  const std::string why = choose_allreduce(8, 8, tcp_costs, "", &t).reason();
  CHECK(why.find("fewest messages") != std::string::npos);
  // Above 2 MiB halving-doubling pays its step penalty again.
  {
    cost_model bare = net;
    bare.alpha_us = 0;
    bare.shared_msg_us = 0;
    const std::size_t big = std::size_t{4} << 20;
    const double w = estimate_us(allreduce_id_of<halving_doubling>, big, 8, bare);
    const double c = total_messages(allreduce_id_of<halving_doubling>, big, 8, net) * 6.9;
    CHECK(w == doctest::Approx(hd_step_penalty * 1.75 * static_cast<double>(big) * net.beta_us_per_byte));
    CHECK(estimate_placed_us(allreduce_id_of<halving_doubling>, big, t, intra, net) == doctest::Approx(w + 0.25 * c));
  }
  // The fake hosts as the probe timed them, and the choices their forced runs favour (select.hpp,
  // estimate_placed_us; benchmarks/results/cluster/A_mid_sizes.md,
  // benchmarks/results/from_code_comments.md).
  {
    const auto placed = [](int hosts, double alpha, double gbps, double msg) {
      gsync::link_estimate e;
      e.alpha_us = alpha;
      e.beta_us_per_byte = 8.0 / (gbps * 1e3);
      e.shared_msg_us = msg;
      e.measured = true;
      gsync::topology p = gsync::topology::blocks(hosts, 1);
      p.set_links(e);
      return p;
    };
    const gsync::topology four = placed(4, 27, 0.955, 13.5), eight = placed(8, 38, 0.945, 9.5);
    CHECK(choose_allreduce(8192, 4, tcp_costs, "", &four).id == allreduce_id_of<recursive_doubling>);
    CHECK(choose_allreduce(16384, 4, tcp_costs, "", &four).id == allreduce_id_of<halving_doubling>);
    CHECK(choose_allreduce(32768, 4, tcp_costs, "", &four).id == allreduce_id_of<halving_doubling>);
    CHECK(choose_allreduce(std::size_t{4} << 20, 4, tcp_costs, "", &four).id == allreduce_id_of<ring>);
    CHECK(choose_allreduce(16384, 8, tcp_costs, "", &eight).id == allreduce_id_of<recursive_doubling>);
    CHECK(choose_allreduce(32768, 8, tcp_costs, "", &eight).id == allreduce_id_of<halving_doubling>);
    CHECK(choose_allreduce(65536, 8, tcp_costs, "", &eight).id == allreduce_id_of<halving_doubling>);
    CHECK(choose_allreduce(std::size_t{4} << 20, 8, tcp_costs, "", &eight).id == allreduce_id_of<ring>);
  }
  // The same links with cores of their own: star is never the choice.
  l.shared_msg_us = 0;
  for (int n = 2; n <= 8; ++n) {
    gsync::topology own = gsync::topology::blocks(n, 1);
    own.set_links(l);
    for (std::size_t bytes = 1; bytes <= (std::size_t{64} << 20); bytes *= 4) {
      INFO("n=" << n << " bytes=" << bytes);
      CHECK(choose_allreduce(bytes, n, tcp_costs, "", &own).id != allreduce_id_of<star>);
    }
  }
}

TEST_CASE("hierarchical schedule: slices per buffer") {
  using H = gsync::algo::hierarchical_default;
  CHECK(H::slices(0, 4, 1024) == 1);
  CHECK(H::slices(4 * 1024 - 1, 4, 1024) == 1);
  CHECK(H::slices(3 * 4 * 1024, 4, 1024) == 3);
  CHECK(H::slices(std::size_t{1} << 30, 4, 1024) == 16);
  CHECK(H::slices(100, 2, 0) == 16);  // a zero segment counts as one element
}

TEST_CASE("network model: GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US move the crossovers of the automatic choice") {
  using namespace gsync::algo;
  const cost_model assumed = cost_model::network();
  const cost_model same = network_model(std::nullopt, std::nullopt);
  CHECK(same.alpha_us == assumed.alpha_us);
  CHECK(same.beta_us_per_byte == assumed.beta_us_per_byte);
  const cost_model gig = network_model(std::string("1"), std::string("40"));
  CHECK(gig.beta_us_per_byte == doctest::Approx(8e-3));  // 1 Gbit/s: 8 ns per byte
  CHECK(gig.alpha_us == 40.0);
  CHECK(network_model(std::string("100"), std::nullopt).beta_us_per_byte == doctest::Approx(8e-5));
  for (const char* bad : {"0", "-1", "fast", "10G", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(network_model(std::string(bad), std::nullopt), doctest::Contains("GSYNC_NET_GBPS"), gsync::error);
    CHECK_THROWS_WITH_AS(network_model(std::nullopt, std::string(bad)), doctest::Contains("GSYNC_NET_LATENCY_US"), gsync::error);
  }
  // 4 hosts x 1 rank, 64 KiB: the assumed 10 Gbit/s keeps the latency-bound recursive doubling,
  // 1 Gbit/s makes the bytes dominate (recursive doubling sends the whole buffer log2(N) times).
  const gsync::topology four_hosts = gsync::topology::blocks(4, 1);
  const std::size_t mid = std::size_t{64} << 10;
  CHECK(choose_allreduce(mid, 4, tcp_costs, "", &four_hosts, &assumed).id == allreduce_id_of<recursive_doubling>);
  CHECK(choose_allreduce(mid, 4, tcp_costs, "", &four_hosts, &gig).id != allreduce_id_of<recursive_doubling>);
  // Tiny messages stay latency-bound, large ones bandwidth-bound, on either network.
  for (const cost_model* m : {&assumed, &gig}) {
    CHECK(choose_allreduce(8, 4, tcp_costs, "", &four_hosts, m).id == allreduce_id_of<recursive_doubling>);
    CHECK(choose_allreduce(std::size_t{64} << 20, 4, tcp_costs, "", &four_hosts, m).id == allreduce_id_of<ring>);
  }
  // The model only applies across hosts: one host keeps its own constants.
  const gsync::topology one = gsync::topology::single_host(4);
  CHECK(choose_allreduce(mid, 4, tcp_costs, "", &one, &gig).id == choose_allreduce(mid, 4, tcp_costs, "", &one).id);
}

TEST_CASE("automatic choice: one machine whose ranks share cores takes direct, star, halving-doubling and ring sooner") {
  using namespace gsync::algo;
  gsync::topology one = gsync::topology::blocks(4, 4), shared = gsync::topology::blocks(4, 4);
  shared.set_cores_shared(true);
  CHECK_FALSE(one.cores_shared());
  // Cores to spare (the shared-memory model fitted with a core per rank): recursive doubling for
  // tiny buffers; from a few KiB, where its whole-buffer reductions cost more than the extra
  // hops, halving-doubling, then the ring.
  CHECK(choose_allreduce(8, 4, shm_costs, "", &one).id == allreduce_id_of<recursive_doubling>);
  CHECK(choose_allreduce(std::size_t{16} << 10, 4, shm_costs, "", &one).id == allreduce_id_of<halving_doubling>);
  CHECK(choose_allreduce(std::size_t{128} << 10, 4, shm_costs, "", &one).id == allreduce_id_of<ring>);
  // 4 ranks on fewer cores (fitted on 2): direct for tiny buffers (the measured table: one wait
  // instead of two), recursive doubling, then halving-doubling, then the ring.
  const auto tiny = choose_allreduce(8, 4, shm_costs, "", &shared);
  CHECK(tiny.id == allreduce_id_of<direct>);
  CHECK(tiny.runner_up == allreduce_id_of<recursive_doubling>);
  CHECK(tiny.reason().find("measured table") != std::string::npos);
  CHECK(choose_allreduce(1024, 4, shm_costs, "", &shared).id == allreduce_id_of<direct>);
  CHECK(choose_allreduce(1025, 4, shm_costs, "", &shared).id == allreduce_id_of<recursive_doubling>);
  CHECK(choose_allreduce(std::size_t{16} << 10, 4, shm_costs, "", &shared).id == allreduce_id_of<recursive_doubling>);
  CHECK(choose_allreduce(std::size_t{128} << 10, 4, shm_costs, "", &shared).id == allreduce_id_of<halving_doubling>);
  // up to shared_hd_even_bytes halving-doubling's steps lose nothing to the ring's pipeline
  CHECK(choose_allreduce(std::size_t{2} << 20, 4, shm_costs, "", &shared).id == allreduce_id_of<halving_doubling>);
  CHECK(choose_allreduce(std::size_t{4} << 20, 4, shm_costs, "", &shared).id == allreduce_id_of<ring>);
  // 6..8 ranks on 2 cores: direct up to 1 KiB, star from there to 512 KiB, the model beyond;
  // more than 8 ranks were not measured: the model decides.
  for (int n : {6, 8}) {
    gsync::topology t = gsync::topology::blocks(n, n);
    t.set_cores_shared(true);
    CAPTURE(n);
    CHECK(choose_allreduce(8, n, shm_costs, "", &t).id == allreduce_id_of<direct>);
    CHECK(choose_allreduce(std::size_t{32} << 10, n, shm_costs, "", &t).id == allreduce_id_of<star>);
    CHECK(choose_allreduce(std::size_t{512} << 10, n, shm_costs, "", &t).id == allreduce_id_of<star>);
    CHECK(choose_allreduce(std::size_t{2} << 20, n, shm_costs, "", &t).id != allreduce_id_of<star>);
    // a forced algorithm still wins over the table
    CHECK(choose_allreduce(8, n, shm_costs, "ring", &t).id == allreduce_id_of<ring>);
  }
  gsync::topology nine = gsync::topology::blocks(9, 9);
  nine.set_cores_shared(true);
  CHECK(choose_allreduce(8, 9, shm_costs, "", &nine).reason().find("measured table") == std::string::npos);
  // 3 ranks: the table has no row, the model already picks direct for small buffers.
  gsync::topology three = gsync::topology::blocks(3, 3);
  three.set_cores_shared(true);
  CHECK(choose_allreduce(8, 3, shm_costs, "", &three).reason().find("measured table") == std::string::npos);
  // Only the shared-memory transport's model changes: loopback TCP keeps its fitted one.
  for (std::size_t b : {std::size_t{8}, std::size_t{128} << 10})
    CHECK(choose_allreduce(b, 4, tcp_costs, "", &shared).id == choose_allreduce(b, 4, tcp_costs, "", &one).id);
}
