// The collectives' contract beyond the sweep: point-to-point ordering and tag checks, argument
// errors, barrier synchronization, avg reduce-scatter, per-collective algorithm overrides.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "support/reference.hpp"
#include "support/errors.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

gsync::config short_config() {
  gsync::config c;
  c.timeout = 30s;
  return c;
}

template <class F>
void on_both(int n, F f) {
  SUBCASE("inproc") { gsync_test::run_inproc(n, f, short_config()); }
  SUBCASE("tcp") { gsync_test::run_tcp(n, f, short_config()); }
}

using gsync_test::kind_of;
using gsync_test::message_of;

// Message i of the p2p conversation: (tag, elements).
struct p2p_msg {
  int tag;
  std::size_t count;
};
const std::vector<p2p_msg> conversation = {{5, 0}, {0, 1}, {7, 1000}, {5, std::size_t{1} << 20}, {2147483647, 3}, {7, 0}};

float value(int from, std::size_t msg, std::size_t i) { return static_cast<float>(from * 1000 + msg) + static_cast<float>(i % 997) / 8; }

}  // namespace

TEST_CASE("collectives: send/recv deliver in order, several tags and sizes, without touching collective numbering") {
  on_both(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    // Ranks 0 and 1 talk (both directions, 0 first); rank 2 takes no part.
    if (r < 2) {
      const int peer = 1 - r;
      for (int round = 0; round < 2; ++round) {
        const bool sender = (round == 0) == (r == 0);
        for (std::size_t m = 0; m < conversation.size(); ++m) {
          std::vector<float> v(conversation[m].count);
          if (sender) {
            for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(r, m, i);
            gsync::send(comm, std::span<const float>{v}, peer, conversation[m].tag);
          } else {
            gsync::recv(comm, std::span<float>{v}, peer, conversation[m].tag);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < v.size(); ++i) wrong += v[i] != value(peer, m, i);
            CHECK(wrong == 0);
          }
        }
      }
      // Other element types share the same ordered stream.
      std::vector<std::int8_t> b(17, static_cast<std::int8_t>(r == 0 ? 42 : 0));
      if (r == 0) gsync::send(comm, std::span<const std::int8_t>{b}, 1, 9);
      else {
        gsync::recv(comm, std::span<std::int8_t>{b}, 0, 9);
        CHECK(b[16] == 42);
      }
    }
    // A collective afterwards still lines up on all three ranks (p2p did not advance its numbers).
    std::vector<double> a(5, 1.0);
    gsync::allreduce(comm, std::span<double>{a});
    CHECK(a[4] == 3.0);
  });
}

TEST_CASE("collectives: a recv with the wrong tag is a mismatch naming both tags") {
  on_both(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(8, 1.0f);
    if (comm.rank() == 0) {
      try {
        gsync::send(comm, std::span<const float>{v}, 1, 3);
      } catch (const gsync::error&) {
        // in process the receiver's failure may reach the sender as peer_lost; that is fine
      }
    } else {
      const std::string m = message_of([&] { gsync::recv(comm, std::span<float>{v}, 0, 4); });
      CHECK(m.find("tag 4") != std::string::npos);
      CHECK(m.find("tag 3") != std::string::npos);
      CHECK(kind_of([&] { gsync::recv(comm, std::span<float>{v}, 0, 4); }) != gsync::errc{});  // unusable afterwards
    }
  });
  // The kind itself.
  gsync_test::run_inproc(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<int> v(4);
    if (comm.rank() == 0) {
      try {
        gsync::send(comm, std::span<const int>{v}, 1, 1);
      } catch (const gsync::error&) {
      }
    } else {
      CHECK(kind_of([&] { gsync::recv(comm, std::span<int>{v}, 0, 2); }) == gsync::errc::mismatch);
    }
  }, short_config());
}

TEST_CASE("collectives: invalid sizes, roots, peers, tags and overlaps are invalid_argument") {
  gsync_test::run_inproc(3, [](auto& comm, gsync_test::world_sync&) {
    using gsync::errc;
    std::vector<float> a(30), b(30);
    std::span<float> A{a}, B{b};
    auto ca = [&](std::size_t off, std::size_t n) { return std::span<const float>(a.data() + off, n); };
    const int r = comm.rank();
    // reduce_scatter: input must be N x output; output may alias only block r.
    CHECK(kind_of([&] { gsync::reduce_scatter(comm, ca(0, 10), B.first(4)); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::reduce_scatter(comm, ca(0, 30), A.subspan(r == 0 ? 1 : 0, 10)); }) == errc::invalid_argument);
    // allgather: output must be N x input; input may alias only block r.
    CHECK(kind_of([&] { gsync::allgather(comm, ca(0, 10), B.first(29)); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::allgather(comm, ca(r == 0 ? 5 : 0, 10), A); }) == errc::invalid_argument);
    // broadcast / reduce: root out of range; reduce root output size and partial overlap.
    CHECK(kind_of([&] { gsync::broadcast(comm, A, 3); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::broadcast(comm, A, -1); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::reduce(comm, ca(0, 10), B.first(10), gsync::op::sum{}, 7); }) == errc::invalid_argument);
    if (r == 0) {
      CHECK(kind_of([&] { gsync::reduce(comm, ca(0, 10), B.first(9), gsync::op::sum{}, 0); }) == errc::invalid_argument);
      CHECK(kind_of([&] { gsync::reduce(comm, ca(0, 10), A.subspan(3, 10), gsync::op::max{}, 0); }) == errc::invalid_argument);
    }
    // alltoall: sizes equal and a multiple of N, no overlap at all (not even in place).
    CHECK(kind_of([&] { gsync::alltoall(comm, ca(0, 30), B.first(27)); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::alltoall(comm, ca(0, 10), B.first(10)); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::alltoall(comm, ca(0, 30), A); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::alltoall(comm, ca(0, 15), A.subspan(3, 15)); }) == errc::invalid_argument);
    // send / recv: peer out of range or self, negative tag.
    CHECK(kind_of([&] { gsync::send(comm, ca(0, 1), 3, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::send(comm, ca(0, 1), r, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::send(comm, ca(0, 1), (r + 1) % 3, -1); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::recv(comm, A.first(1), -2, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::recv(comm, A.first(1), (r + 1) % 3, -5); }) == errc::invalid_argument);
    CHECK(message_of([&] { gsync::broadcast(comm, A, 3); }).find("root") != std::string::npos);
    // None of the above consumed an operation: the ranks still agree.
    std::vector<float> v(3, 1.0f);
    gsync::allreduce(comm, std::span<float>{v});
    CHECK(v[0] == 3.0f);
  }, short_config());
}

TEST_CASE("collectives: barrier holds every rank until the last one arrives") {
  on_both(4, [](auto& comm, gsync_test::world_sync& sync) {
    static std::atomic<int> arrived{0};
    if (comm.rank() == 0) {
      arrived = 0;
    }
    sync.bar.arrive_and_wait();  // reset seen by all
    for (int round = 1; round <= 3; ++round) {
      if (comm.rank() == round % 4) std::this_thread::sleep_for(200ms);  // the late rank
      arrived.fetch_add(1);
      gsync::barrier(comm);
      CHECK(arrived.load() >= 4 * round);  // nobody left before everyone of this round arrived
      gsync::barrier(comm);                // nobody starts the next round before all checked
    }
    sync.bar.arrive_and_wait();
  });
}

TEST_CASE("collectives: reduce_scatter avg divides by the world size") {
  on_both(4, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<float> in(4 * 3);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1) * static_cast<float>(i + 1);
    std::vector<float> out(3);
    gsync::reduce_scatter(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::avg{});
    for (std::size_t i = 0; i < 3; ++i) CHECK(out[i] == doctest::Approx(2.5 * static_cast<double>(r * 3 + i + 1)));
    std::vector<std::int32_t> ii(8, r * 3), io(2);
    gsync::reduce_scatter(comm, std::span<const std::int32_t>{ii}, std::span<std::int32_t>{io}, gsync::op::avg{});
    CHECK(io[0] == 4);  // (0 + 3 + 6 + 9) / 4 = 4.5, truncated
  });
}

TEST_CASE("collectives: broadcast and reduce weigh a message latency by the links timed at start-up when ranks span hosts") {
  using gsync::algo::collective_id_of;
  // 8 ranks, 256 KiB in 16 KiB segments: with the one-host ratio (a latency is worth 32 KiB) the
  // tree's 3 whole-buffer hops beat the chain's 22 segment hops; over 1 Gbit/s links with 30 us per
  // message (about 3.75 KB) the chain wins.
  gsync::topology hosts = gsync::topology::blocks(8, 1);
  const std::size_t bytes = 256 << 10, seg = 16 << 10;
  CHECK(gsync::algo::choose_broadcast(bytes, 8, seg, "").id == collective_id_of<gsync::algo::binomial_tree>);
  CHECK(gsync::algo::choose_broadcast(bytes, 8, seg, "", &hosts).id == collective_id_of<gsync::algo::binomial_tree>);  // no links recorded
  gsync::link_estimate gig;
  gig.alpha_us = 30;
  gig.beta_us_per_byte = 8e-3;
  hosts.set_links(gig);
  const auto b = gsync::algo::choose_broadcast(bytes, 8, seg, "", &hosts);
  CHECK(b.id == collective_id_of<gsync::algo::ring>);
  CHECK(b.reason().find("from the links timed at start-up") != std::string::npos);
  CHECK(gsync::algo::choose_reduce(bytes, 8, seg, "", &hosts).id == collective_id_of<gsync::algo::ring>);
  // One host: the links do not apply.
  gsync::topology one = gsync::topology::single_host(8);
  one.set_links(gig);
  CHECK(gsync::algo::choose_reduce(bytes, 8, seg, "", &one).id == collective_id_of<gsync::algo::binomial_tree>);
}

TEST_CASE("collectives: GSYNC_ALGO_* overrides are parsed, forced, and invalid names list the valid ones") {
  CHECK(gsync::algo::choose_broadcast(1 << 30, 8, 512 << 10, "binomial_tree").id == gsync::algo::collective_id_of<gsync::algo::binomial_tree>);
  CHECK(gsync::algo::choose_reduce(8, 8, 512 << 10, "ring").id == gsync::algo::collective_id_of<gsync::algo::ring>);
  CHECK(gsync::algo::choose_broadcast(8, 8, 512 << 10, "").id == gsync::algo::collective_id_of<gsync::algo::binomial_tree>);
  CHECK(gsync::algo::choose_broadcast(std::size_t{64} << 20, 8, 512 << 10, "auto").id == gsync::algo::collective_id_of<gsync::algo::ring>);
  // Blocks that make a small whole buffer: dissemination from 3 ranks; large ones or 2 ranks: the ring.
  CHECK(gsync::algo::choose_reduce_scatter(8, 4, 512 << 10, "").id == gsync::algo::collective_id_of<gsync::algo::dissemination>);
  CHECK(gsync::algo::choose_allgather(64 << 10, 4, 512 << 10, "").id == gsync::algo::collective_id_of<gsync::algo::dissemination>);
  CHECK(gsync::algo::choose_allgather((64 << 10) + 4, 4, 512 << 10, "").id == gsync::algo::collective_id_of<gsync::algo::ring>);
  CHECK(gsync::algo::choose_reduce_scatter(8, 2, 512 << 10, "").id == gsync::algo::collective_id_of<gsync::algo::ring>);
  CHECK(gsync::algo::choose_reduce_scatter(8, 4, 512 << 10, "ring").id == gsync::algo::collective_id_of<gsync::algo::ring>);
  CHECK(gsync::algo::choose_allgather(1 << 20, 4, 512 << 10, "dissemination").id == gsync::algo::collective_id_of<gsync::algo::dissemination>);
  CHECK(gsync::algo::choose_alltoall(8, 4, 512 << 10, "pairwise").id == gsync::algo::collective_id_of<gsync::algo::pairwise>);
  const auto bad = [](auto f) {
    try {
      f();
    } catch (const gsync::error& e) {
      return e.kind() == gsync::errc::invalid_argument ? std::string(e.what()) : std::string();
    }
    return std::string();
  };
  const std::string m = bad([] { gsync::algo::choose_allgather(8, 4, 512 << 10, "binomial_tree"); });
  CHECK(m.find("GSYNC_ALGO_ALLGATHER") != std::string::npos);
  CHECK(m.find("auto, ring") != std::string::npos);
  CHECK(bad([] { gsync::algo::choose_alltoall(8, 4, 512 << 10, "ring"); }).find("pairwise") != std::string::npos);
  CHECK(bad([] { gsync::algo::choose_reduce(8, 4, 512 << 10, "nope"); }).find("binomial_tree") != std::string::npos);

  ::setenv("GSYNC_ALGO_BROADCAST", "ring", 1);
  ::setenv("GSYNC_ALGO_REDUCE_SCATTER", "bogus", 1);
  const gsync::config c = gsync::config::from_env();
  ::unsetenv("GSYNC_ALGO_BROADCAST");
  ::unsetenv("GSYNC_ALGO_REDUCE_SCATTER");
  CHECK(c.algo_broadcast == "ring");
  // A forced algorithm is used (and works); an invalid one fails the call with invalid_argument.
  gsync_test::run_inproc(3, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(4, static_cast<float>(comm.rank()));
    gsync::broadcast(comm, std::span<float>{v}, 2);
    CHECK(v[3] == 2.0f);
    std::vector<float> in(6, 1.0f), out(2);
    CHECK(kind_of([&] { gsync::reduce_scatter(comm, std::span<const float>{in}, std::span<float>{out}); }) ==
          gsync::errc::invalid_argument);
  }, c);
}
