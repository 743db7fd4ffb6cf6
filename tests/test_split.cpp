// communicator::split: membership and ordering, every collective inside sub-communicators, nested
// splits, null communicators, sibling communicators used at the same time from several threads
// (traffic of several communicators on one connection), mismatches naming the communicator, and a
// rank failing while several communicators are open.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gsync/gsync.hpp"
#include "support/errors.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

gsync::config cfg(std::chrono::milliseconds t = 60s) {
  gsync::config c;
  c.timeout = t;
  return c;
}

// Runs f on n ranks over every transport: in-process threads, TCP (one host per rank), shared
// memory (one host), and hosts of 2 ranks (shared memory inside, TCP across).
template <class F>
void on_all(int n, F f, gsync::config c = cfg()) {
  SUBCASE("inproc") { gsync_test::run_inproc(n, f, c); }
  SUBCASE("tcp") { gsync_test::run_tcp(n, f, c); }
  SUBCASE("shm") { gsync_test::run_shm(n, f, c); }
  SUBCASE("mixed") { gsync_test::run_mixed(n, 2, f, c); }
}

// Members of `color` in the split of n ranks by color(r) with key(r), as split orders them.
template <class C, class K>
std::vector<int> expected_members(int n, int color, C colour, K key) {
  std::vector<int> m;
  for (int r = 0; r < n; ++r)
    if (colour(r) == color) m.push_back(r);
  std::stable_sort(m.begin(), m.end(), [&](int a, int b) { return key(a) < key(b); });
  return m;
}

// Runs every collective on `sub` whose ranks are `members` (their ranks in the parent) and checks
// each result against one computed from the members' parent ranks.
template <class Comm>
void every_collective(Comm& sub, const std::vector<int>& members, int salt) {
  const int k = sub.size(), me = sub.rank();
  const int parent = members[static_cast<std::size_t>(me)];
  auto val = [&](int r, std::size_t i) { return static_cast<std::int64_t>(members[static_cast<std::size_t>(r)] * 1000 + i * 7 + salt); };
  for (std::size_t c : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{70001}}) {
    std::vector<std::int64_t> v(c), want(c, 0);
    for (std::size_t i = 0; i < c; ++i) {
      v[i] = val(me, i);
      for (int r = 0; r < k; ++r) want[i] += val(r, i);
    }
    gsync::allreduce(sub, std::span<std::int64_t>{v});
    REQUIRE(v == want);
    std::vector<float> f(c);
    for (std::size_t i = 0; i < c; ++i) f[i] = static_cast<float>(parent + 1);
    gsync::allreduce(sub, std::span<float>{f}, gsync::op::max{});
    const int top = *std::max_element(members.begin(), members.end());
    for (std::size_t i = 0; i < c; i += c / 3 + 1) REQUIRE(f[i] == static_cast<float>(top + 1));

    std::vector<std::int64_t> in(c), all(c * static_cast<std::size_t>(k));
    for (std::size_t i = 0; i < c; ++i) in[i] = val(me, i);
    gsync::allgather(sub, std::span<const std::int64_t>{in}, std::span<std::int64_t>{all});
    for (int r = 0; r < k; ++r)
      for (std::size_t i = 0; i < c; i += c / 5 + 1) REQUIRE(all[static_cast<std::size_t>(r) * c + i] == val(r, i));

    std::vector<std::int64_t> blocks(c * static_cast<std::size_t>(k)), mine(c);
    for (std::size_t j = 0; j < blocks.size(); ++j) blocks[j] = val(me, j);
    gsync::reduce_scatter(sub, std::span<const std::int64_t>{blocks}, std::span<std::int64_t>{mine});
    for (std::size_t i = 0; i < c; i += c / 5 + 1) {
      std::int64_t s = 0;
      for (int r = 0; r < k; ++r) s += val(r, static_cast<std::size_t>(me) * c + i);
      REQUIRE(mine[i] == s);
    }

    const int root = k - 1;
    std::vector<std::int64_t> b(c, me == root ? 42 + salt : -1);
    gsync::broadcast(sub, std::span<std::int64_t>{b}, root);
    REQUIRE(b[c - 1] == 42 + salt);

    std::vector<std::int64_t> rin(c, parent), rout(c, 0);
    gsync::reduce(sub, std::span<const std::int64_t>{rin}, std::span<std::int64_t>{rout}, gsync::op::sum{}, 0);
    if (me == 0) REQUIRE(rout[0] == std::accumulate(members.begin(), members.end(), std::int64_t{0}));

    std::vector<std::int64_t> a2a_in(c * static_cast<std::size_t>(k)), a2a_out(c * static_cast<std::size_t>(k));
    for (int r = 0; r < k; ++r)
      for (std::size_t i = 0; i < c; ++i) a2a_in[static_cast<std::size_t>(r) * c + i] = parent * 100000 + r * 10 + static_cast<std::int64_t>(i % 7);
    gsync::alltoall(sub, std::span<const std::int64_t>{a2a_in}, std::span<std::int64_t>{a2a_out});
    for (int r = 0; r < k; ++r) REQUIRE(a2a_out[static_cast<std::size_t>(r) * c] == members[static_cast<std::size_t>(r)] * 100000 + me * 10);
  }
  if (k > 1) {  // a ring of point-to-point messages
    std::vector<std::int64_t> out(17, parent), in(17, -1);
    gsync::sendrecv(sub, std::span<const std::int64_t>{out}, (me + 1) % k, 3, std::span<std::int64_t>{in}, (me + k - 1) % k, 3);
    REQUIRE(in[16] == members[static_cast<std::size_t>((me + k - 1) % k)]);
  }
  gsync::barrier(sub);
}

}  // namespace

TEST_CASE("split: members ordered by key then rank, every collective inside, nested splits, null communicators") {
#ifdef GSYNC_TEST_SANITIZE
  // Under the sanitizers the same splits with 5 ranks at most (8 threads' worlds under TSan cost
  // most of this file's run there); the plain build goes to 8.
  const std::initializer_list<int> sizes = {1, 2, 3, 5};
#else
  const std::initializer_list<int> sizes = {1, 2, 3, 5, 8};
#endif
  for (int n : sizes) {
    CAPTURE(n);
    on_all(n, [n](auto& comm, gsync_test::world_sync&) {
      const int r = comm.rank();
      auto colour = [](int x) { return x % 2; };
      auto key = [n](int x) { return (n - x) / 2; };  // reverses each color's order, with ties
      auto sub = comm.split(colour(r), key(r));
      const auto members = expected_members(n, colour(r), colour, key);
      REQUIRE(sub.valid());
      REQUIRE(sub.size() == static_cast<int>(members.size()));
      REQUIRE(members[static_cast<std::size_t>(sub.rank())] == r);
      CHECK(sub.id() != 0);
      CHECK(sub.id() != comm.id());
      every_collective(sub, members, 1);
      // the parent still works, between uses of the child
      std::vector<std::int64_t> x(5, r), want(5, static_cast<std::int64_t>(n) * (n - 1) / 2);
      gsync::allreduce(comm, std::span<std::int64_t>{x});
      CHECK(x == want);
      // nested: the child split again, in halves
      const int half = sub.rank() < (sub.size() + 1) / 2 ? 0 : 1;
      auto inner = sub.split(half, sub.rank());
      std::vector<int> inner_members;
      for (int i = 0; i < sub.size(); ++i)
        if ((i < (sub.size() + 1) / 2 ? 0 : 1) == half) inner_members.push_back(members[static_cast<std::size_t>(i)]);
      REQUIRE(inner.size() == static_cast<int>(inner_members.size()));
      every_collective(inner, inner_members, 2);
      // a negative color: a null communicator
      auto none = comm.split(r == 0 ? -1 : 0);
      if (r == 0) {
        CHECK_FALSE(none.valid());
        CHECK(gsync_test::kind_of([&] { (void)none.size(); }) == gsync::errc::invalid_argument);
        std::vector<float> v(3);
        CHECK(gsync_test::kind_of([&] { gsync::allreduce(none, std::span<float>{v}); }) == gsync::errc::invalid_argument);
      } else {
        REQUIRE(none.size() == n - 1);
        CHECK(none.rank() == r - 1);
        every_collective(none, [n] { std::vector<int> m(static_cast<std::size_t>(n - 1)); std::iota(m.begin(), m.end(), 1); return m; }(), 3);
      }
    });
  }
}

TEST_CASE("split: sibling communicators used at once from several threads, with the parent") {
  // 8 ranks in a 2 x 4 grid: each rank runs its row's and its column's allreduces on two threads
  // of its own while the main thread runs the world's: three communicators' frames interleave on
  // the same connections. Sizes differ per communicator and step, so a frame taken by the wrong
  // communicator fails the check (or the size check of the transport).
  const int n = 8;
  on_all(n, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    auto row = comm.split(r / 4, r);
    auto col = comm.split(r % 4, r);
    std::atomic<int> bad{0};
    std::string why;
    auto work = [&](auto& c, int base, std::size_t count) {
      try {
        for (int step = 0; step < 30; ++step) {
          const std::size_t len = count + static_cast<std::size_t>(step) * 13;
          std::vector<std::int64_t> v(len, c.rank() + base + step), want(len, 0);
          std::int64_t s = 0;
          for (int q = 0; q < c.size(); ++q) s += q + base + step;
          std::fill(want.begin(), want.end(), s);
          gsync::allreduce(c, std::span<std::int64_t>{v});
          if (v != want) ++bad;
        }
      } catch (const std::exception& e) {
        ++bad;
        why = e.what();
      }
    };
    std::thread t1([&] { work(row, 100, 50000); });
    std::thread t2([&] { work(col, 200, 3); });
    work(comm, 300, 2000);
    t1.join();
    t2.join();
    INFO(why);
    CHECK(bad.load() == 0);
  });
}

TEST_CASE("split: a mismatch inside a sub-communicator names it and the failure reaches the other communicators") {
  on_all(4, [](auto& comm, gsync_test::world_sync& sync) {
    const int r = comm.rank();
    std::string m;
    gsync::errc k{};
    bool split = false;
    try {
      auto pair = comm.split(r / 2, r);  // {0,1}, {2,3}
      split = true;
      std::vector<float> v(r == 1 ? 9 : 8, 1.0f);
      gsync::allreduce(pair, std::span<float>{v});  // rank 1 passes 9 elements
    } catch (const gsync::error& e) {
      k = e.kind();
      m = e.what();
    }
    // Ranks 2 and 3 may finish their split and their pair's allreduce, or hear of the failure
    // first: ranks 0 and 1 leave the world's split (its allgather) as soon as they have every
    // piece, and may fail while ranks 2 and 3 still take their last ones.
    if (r < 2) {
      CHECK(split);
      CHECK(k == gsync::errc::mismatch);
      INFO(m);
      CHECK(m.find("communicator ") != std::string::npos);
    }
    sync.bar.arrive_and_wait();
    // The failed ranks' other communicators fail too: the world's next collective fails on every
    // rank (ranks 2 and 3 hear of the failure from the dead peers), instead of hanging.
    if (r >= 2) {
      std::vector<float> w(4, 1.0f);
      CHECK_THROWS_AS(gsync::allreduce(comm, std::span<float>{w}), gsync::error);
    }
  }, cfg(20s));
}

TEST_CASE("grid: data x pipeline x tensor groups in Megatron order") {
  struct shape {
    int d, p, t;
  };
  for (shape s : {shape{2, 2, 2}, shape{1, 2, 4}, shape{4, 1, 2}, shape{2, 4, 1}, shape{8, 1, 1}}) {
    CAPTURE(s.d);
    CAPTURE(s.p);
    CAPTURE(s.t);
    on_all(8, [s](auto& comm, gsync_test::world_sync&) {
      const int r = comm.rank();
      auto g = gsync::make_grid(comm, s.d, s.p, s.t);
      REQUIRE(g.tensor.size() == s.t);
      REQUIRE(g.data.size() == s.d);
      REQUIRE(g.pipeline.size() == s.p);
      CHECK(r == (g.stage * s.d + g.replica) * s.t + g.shard);
      CHECK(g.tensor.rank() == g.shard);
      CHECK(g.data.rank() == g.replica);
      CHECK(g.pipeline.rank() == g.stage);
      // Each group's members, as world ranks, gathered inside the group.
      auto members = [&](auto& c) {
        std::vector<std::int32_t> mine{r}, all(static_cast<std::size_t>(c.size()));
        gsync::allgather(c, std::span<const std::int32_t>{mine}, std::span<std::int32_t>{all});
        return all;
      };
      const auto t = members(g.tensor), d = members(g.data), p = members(g.pipeline);
      for (int i = 0; i < s.t; ++i) CHECK(t[static_cast<std::size_t>(i)] == (g.stage * s.d + g.replica) * s.t + i);
      for (int i = 0; i < s.d; ++i) CHECK(d[static_cast<std::size_t>(i)] == (g.stage * s.d + i) * s.t + g.shard);
      for (int i = 0; i < s.p; ++i) CHECK(p[static_cast<std::size_t>(i)] == (i * s.d + g.replica) * s.t + g.shard);
    });
  }
  gsync_test::run_inproc(4, [](auto& comm, gsync_test::world_sync&) {
    CHECK(gsync_test::kind_of([&] { (void)gsync::make_grid(comm, 2, 2, 2); }) == gsync::errc::invalid_argument);
  });
}

TEST_CASE("split: a rank aborting while several communicators are open fails the others' calls promptly") {
  // 4 ranks; rows {0,1} {2,3} and columns {0,2} {1,3}, each driven by its own thread in a loop,
  // plus the world on the main thread. Rank 3 aborts after a few steps: every call that needs it,
  // in any communicator, fails (aborted or peer lost), long before the 60 s timeout.
  on_all(4, [](auto& comm, gsync_test::world_sync& sync) {
    const int r = comm.rank();
    auto row = comm.split(r / 2, r);
    auto col = comm.split(r % 2, r);
    sync.bar.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<int> failed{0}, timeouts{0};
    auto loop = [&](auto& c) {
      try {
        for (int step = 0; step < 100000; ++step) {
          std::vector<float> v(100, 1.0f);
          gsync::allreduce(c, std::span<float>{v});
          if (r == 3 && &c == &comm && step == 20) comm.abort("test: rank 3 goes down");
        }
      } catch (const gsync::error& e) {
        ++failed;
        if (e.kind() == gsync::errc::timeout) ++timeouts;
      }
    };
    std::thread a([&] { loop(row); });
    std::thread b([&] { loop(col); });
    loop(comm);
    a.join();
    b.join();
    CHECK(failed.load() == 3);  // every communicator of every rank ends in an error
    CHECK(timeouts.load() == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 30s);
  });
}
