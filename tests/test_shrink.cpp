// Shrinking to the survivors (communicator::shrink, transport/mesh/shrink.ipp): ranks as threads
// over TCP and shared memory; a rank "dies" by dropping its communicator while an exception
// unwinds (no goodbye to the store, its connections and recovery listener close), which the
// others see as they would a killed process. The multi-process kills: tests/mp_shrink.sh.
#include <doctest/doctest.h>

#include <bit>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "gsync/transport/mesh/shrink_state.hpp"
#include "gsync/transport/mesh/records.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {
struct died : std::exception {};

// Makes rank `victim` (its number in the communicator shrunk) die at `stage` of its shrink
// (gsync::transport::testing::shrink_stage_hook), for one test's length.
struct die_at {
  static inline std::atomic<int> victim{-1};
  static inline std::atomic<const char*> stage{nullptr};
  static void hook(int rank, const char* st) {
    if (rank == victim.load() && std::string_view(st) == stage.load()) throw died{};
  }
  die_at(int v, const char* st) {
    victim = v;
    stage = st;
    gsync::transport::testing::shrink_stage_hook = &hook;
  }
  ~die_at() { gsync::transport::testing::shrink_stage_hook = nullptr; }
};

// Counts the ranks whose first allreduce has returned. A rank that finishes an allreduce may leave
// it before the others do, and one that dies then can fail their copy of it (a wait for a peer's
// dial fails on any lost rank); the tests below want that op completed by all, so the victim
// waits here before it dies.
struct first_op_gate {
  std::atomic<int> done{0};
  void arrive() { ++done; }
  void wait_for(int ranks) const {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (done.load() < ranks && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  }
};

// Rank r of n joins (host `host`) and takes part in one allreduce; rank `first` then dies (throws
// `died`) once the others have finished that allreduce, and the others return once an allreduce
// has failed with peer_lost for it.
gsync::tcp_communicator join_and_lose(int r, int n, std::uint16_t port, const std::string& host, const gsync::config& cfg, int first,
                                      first_op_gate& gate) {
  auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, host), cfg);
  std::vector<float> v(100, 1.0f);
  gsync::allreduce(comm, std::span<float>{v});
  if (r == first) {
    gate.wait_for(n - 1);
    throw died{};
  }
  gate.arrive();
  try {
    gsync::allreduce(comm, std::span<float>{v});
  } catch (const gsync::error& e) {
    if (e.kind() != gsync::errc::peer_lost) throw;
  }
  return comm;
}

// n ranks (host of rank r: host_of(r)); `victim` dies after one good allreduce; the survivors
// fail their next allreduce, shrink, check the new numbering and reduce again.
void shrink_after_death(int n, int victim, std::function<std::string(int)> host_of, gsync::config cfg) {
  const auto port = gsync_test::free_port();
  std::vector<std::string> err(static_cast<std::size_t>(n));
  std::vector<int> new_rank(static_cast<std::size_t>(n), -1), new_size(static_cast<std::size_t>(n), -1);
  std::vector<float> got(static_cast<std::size_t>(n), -1);
  first_op_gate gate;
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        if (r == victim) {
          try {
            auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, host_of(r)), cfg);
            std::vector<float> v(1000, 1.0f);
            gsync::allreduce(comm, std::span<float>{v});
            gate.wait_for(n - 1);
            throw died{};  // the communicator is dropped while this unwinds: no goodbye
          } catch (const died&) {
          }
          return;
        }
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, host_of(r)), cfg);
        std::vector<float> v(1000, 1.0f);
        gsync::allreduce(comm, std::span<float>{v});
        gate.arrive();
        try {  // the victim is not there: this fails when its connections close
          gsync::allreduce(comm, std::span<float>{v});
          throw std::runtime_error("an allreduce with a dead rank returned");
        } catch (const gsync::error& e) {
          if (e.kind() != gsync::errc::peer_lost) throw;
        }
        auto next = comm.shrink();
        new_rank[static_cast<std::size_t>(r)] = next.rank();
        new_size[static_cast<std::size_t>(r)] = next.size();
        const auto& rep = next.last_shrink();  // one allreduce completed by all, the second by none
        std::vector<int> old;
        for (int q = 0; q < n; ++q)
          if (q != victim) old.push_back(q);
        if (rep.agreed_ops != 1 || rep.my_ops != 1 || rep.old_size != n || rep.old_ranks != old)
          err[static_cast<std::size_t>(r)] = "last_shrink: agreed " + std::to_string(rep.agreed_ops) + ", mine " + std::to_string(rep.my_ops) +
                                             ", old size " + std::to_string(rep.old_size) + ", " + std::to_string(rep.old_ranks.size()) + " old ranks";
        std::vector<float> w(4099, static_cast<float>(r + 1));
        gsync::allreduce(next, std::span<float>{w});
        got[static_cast<std::size_t>(r)] = w[4098];
        gsync::barrier(next);
      } catch (const std::exception& e) {
        err[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  float want = 0;
  for (int r = 0; r < n; ++r)
    if (r != victim) want += static_cast<float>(r + 1);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    CAPTURE(r);
    CAPTURE(err[static_cast<std::size_t>(r)]);
    CHECK(err[static_cast<std::size_t>(r)].empty());
    CHECK(new_size[static_cast<std::size_t>(r)] == n - 1);
    CHECK(new_rank[static_cast<std::size_t>(r)] == (r < victim ? r : r - 1));  // old order kept
    CHECK(got[static_cast<std::size_t>(r)] == want);
  }
}
}  // namespace

TEST_CASE("shrink: after a rank dies, the survivors shrink to a communicator in their old order and go on (TCP)") {
  gsync::config cfg = gsync_test::with_timeout(20000ms);
  for (int victim : {0, 2, 3}) {
    CAPTURE(victim);
    shrink_after_death(4, victim, [](int r) { return "shrink-host-" + std::to_string(r); }, cfg);
  }
}

TEST_CASE("shrink: the same over shared memory and across hosts") {
  gsync::config cfg = gsync_test::with_timeout(20000ms);
  shrink_after_death(4, 1, [](int) { return std::string("shrink-one-host"); }, cfg);
  shrink_after_death(5, 0, [](int r) { return "shrink-pair-" + std::to_string(r / 2); }, cfg);
}

TEST_CASE("shrink: a rank that fails during the shrink is left out, and the rest agree without it") {
  // Rank 1 dies; rank 3 sees the failure and then dies too, instead of shrinking. Nobody saw rank 3
  // die, so the coordinator (rank 0) waits for it twice the liveness time (1 s here), then decides
  // without it; ranks 0 and 2 go on as ranks 0 and 1.
  const int n = 4;
  gsync::config cfg = gsync_test::with_timeout(20000ms);
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  std::vector<std::string> err(n);
  std::vector<int> new_rank(n, -1), new_size(n, -1);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        try {
          auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, "late-host-" + std::to_string(r)), cfg);
          std::vector<float> v(100, 1.0f);
          gsync::allreduce(comm, std::span<float>{v});
          if (r == 1) throw died{};
          try {
            gsync::allreduce(comm, std::span<float>{v});
          } catch (const gsync::error&) {
            if (r == 3) throw died{};
          }
          auto next = comm.shrink();
          new_rank[r] = next.rank();
          new_size[r] = next.size();
          std::vector<float> w(100, static_cast<float>(r));
          gsync::allreduce(next, std::span<float>{w});
          if (w[0] != 2.0f) err[r] = "wrong sum " + std::to_string(w[0]);
        } catch (const died&) {
        }
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r : {0, 2}) {
    CAPTURE(r);
    CAPTURE(err[r]);
    CHECK(err[r].empty());
    CHECK(new_size[r] == 2);
    CHECK(new_rank[r] == r / 2);
  }
}

TEST_CASE("shrink: the rank a store's loss record names as gone, and no other") {
  using gsync::transport::records::rank_lost;
  CHECK(rank_lost("rank 12 is lost (its connection to the store closed without goodbye)") == 12);
  CHECK(rank_lost("rank 0 is lost") == 0);
  CHECK_FALSE(rank_lost("rank 3 failed: rank 3: timed out"));  // alive: it said why it failed
  CHECK_FALSE(rank_lost("rank -1 is lost"));
  CHECK_FALSE(rank_lost("rank x is lost"));
  CHECK_FALSE(rank_lost("the store (rank 0) failed: out of memory"));
  CHECK_FALSE(rank_lost(""));
}

namespace {
// Rank 1 dies; the survivors shrink, and rank `victim` dies at `stage` of that shrink (after its
// join is recorded, or once the members are decided, before the new communicator is set up).
// The set-up finds it missing, and the others agree again without it: ranks 0..n-1 but 1 and
// `victim` go on, in their old order.
void die_during_shrink(int n, int victim, const char* stage) {
  gsync::config cfg = gsync_test::with_timeout(30000ms);
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  die_at hook(victim, stage);
  std::vector<std::string> err(static_cast<std::size_t>(n));
  std::vector<int> new_rank(static_cast<std::size_t>(n), -1), new_size(static_cast<std::size_t>(n), -1);
  std::vector<float> got(static_cast<std::size_t>(n), -1);
  first_op_gate gate;
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = join_and_lose(r, n, port, "dshrink-host-" + std::to_string(r), cfg, 1, gate);
        std::optional<gsync::tcp_communicator> next;
        try {
          next.emplace(comm.shrink());
        } catch (const gsync::error& e) {
          if (r == victim) return;  // it "died" in the hook: its communicators close while this unwinds
          throw;
        }
        new_rank[static_cast<std::size_t>(r)] = next->rank();
        new_size[static_cast<std::size_t>(r)] = next->size();
        std::vector<float> w(333, static_cast<float>(r + 1));
        gsync::allreduce(*next, std::span<float>{w});
        got[static_cast<std::size_t>(r)] = w[332];
      } catch (const died&) {
      } catch (const std::exception& e) {
        err[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  float want = 0;
  int rank = 0;
  for (int r = 0; r < n; ++r) {
    if (r == 1 || r == victim) continue;
    want += static_cast<float>(r + 1);
  }
  for (int r = 0; r < n; ++r) {
    if (r == 1 || r == victim) continue;
    CAPTURE(r);
    CAPTURE(err[static_cast<std::size_t>(r)]);
    CHECK(err[static_cast<std::size_t>(r)].empty());
    CHECK(new_size[static_cast<std::size_t>(r)] == n - 2);
    CHECK(new_rank[static_cast<std::size_t>(r)] == rank++);
    CHECK(got[static_cast<std::size_t>(r)] == want);
  }
}
}  // namespace

TEST_CASE("shrink: a member that dies after the agreement, before the new communicator is set up, is left out in a second attempt") {
  for (const char* stage : {"slot", "joined", "agreed"}) {
    CAPTURE(stage);
    die_during_shrink(5, 3, stage);  // a member
  }
  die_during_shrink(5, 0, "agreed");  // the coordinator: the others move on to rank 2
}

TEST_CASE("shrink: communicators made by split shrink to their own survivors") {
  // Six ranks; colours r % 2 make {0, 2, 4} and {1, 3, 5}. Rank 3 dies. Every survivor shrinks its
  // half, then the world: {0, 2, 4} stays whole, {1, 5} loses rank 3, the world has 5 ranks.
  const int n = 6;
  gsync::config cfg = gsync_test::with_timeout(30000ms);
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  std::vector<std::string> err(n);
  std::vector<int> half_rank(n, -1), half_size(n, -1), world_rank(n, -1), world_size(n, -1);
  std::vector<float> half_sum(n, -1), world_sum(n, -1);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, "split-host-" + std::to_string(r / 2)), cfg);
        auto half = comm.split(r % 2, r);
        std::vector<float> v(100, 1.0f);
        gsync::allreduce(half, std::span<float>{v});
        gsync::allreduce(comm, std::span<float>{v});
        if (r == 3) throw died{};
        try {
          gsync::allreduce(comm, std::span<float>{v});
        } catch (const gsync::error& e) {
          if (e.kind() != gsync::errc::peer_lost) throw;
        }
        auto half2 = half.shrink();
        auto world2 = comm.shrink();
        half_rank[r] = half2.rank();
        half_size[r] = half2.size();
        world_rank[r] = world2.rank();
        world_size[r] = world2.size();
        std::vector<float> w(1000, static_cast<float>(r + 1));
        gsync::allreduce(half2, std::span<float>{w});
        half_sum[r] = w[999];
        std::vector<float> x(1000, static_cast<float>(r + 1));
        gsync::allreduce(world2, std::span<float>{x});
        world_sum[r] = x[999];
      } catch (const died&) {
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r : {0, 1, 2, 4, 5}) {
    CAPTURE(r);
    CAPTURE(err[r]);
    CHECK(err[r].empty());
    CHECK(half_size[r] == (r % 2 == 0 ? 3 : 2));
    CHECK(half_rank[r] == (r % 2 == 0 ? r / 2 : r / 4));
    CHECK(half_sum[r] == (r % 2 == 0 ? 1.0f + 3 + 5 : 2.0f + 6));
    CHECK(world_size[r] == 5);
    CHECK(world_rank[r] == (r < 3 ? r : r - 1));
    CHECK(world_sum[r] == 1.0f + 2 + 3 + 5 + 6);
  }
}

TEST_CASE("shrink: a rank that arrives after the others went on is told it is out, at once") {
  // Rank 0 dies. Ranks 1, 2, 3, 5, 6 shrink; rank 1, their coordinator, dies once the members are
  // decided, so ranks 2, 3, 5, 6 (a majority of 7) agree again with rank 2 coordinating (attempt
  // 1). Rank 4 calls shrink only when they are done and rank 1 is gone: its attempt 0 finds rank 1
  // gone, then rank 2, which answered its own attempt 0 with the decision of attempt 1, so rank 4
  // fails with errc::excluded at once instead of waiting for its deadline (a timeout, 30 s here).
  const int n = 7;
  gsync::config cfg = gsync_test::with_timeout(30000ms);
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  die_at hook(1, "agreed");
  std::vector<std::string> err(n);
  std::vector<int> new_size(n, -1);
  std::atomic<int> done{0};
  std::atomic<bool> one_gone{false};
  gsync::errc late_kind = gsync::errc::system;
  std::string late_msg;
  first_op_gate gate;
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = join_and_lose(r, n, port, "late2-host-" + std::to_string(r), cfg, 0, gate);
        if (r == 4) {
          while (done.load() < n - 3 || !one_gone.load()) std::this_thread::yield();
          try {
            auto next = comm.shrink();
            err[r] = "a late rank was let in";
          } catch (const gsync::error& e) {
            late_kind = e.kind();
            late_msg = e.what();
          }
        } else if (r == 1) {
          try {
            auto next = comm.shrink();
            err[r] = "rank 1 did not die in its shrink";
          } catch (const gsync::error&) {  // it "died" there; its communicator closes below
          }
        } else {
          try {
            auto next = comm.shrink();
            new_size[r] = next.size();
            ++done;
            std::vector<float> w(100, 1.0f);
            gsync::allreduce(next, std::span<float>{w});
            if (w[0] != static_cast<float>(n - 3)) err[r] = "wrong sum " + std::to_string(w[0]);
            while (done.load() < n - 2) std::this_thread::yield();  // the new communicator lives until rank 4 is through
          } catch (const gsync::error&) {
            ++done;  // rank 4 must not wait for a rank that failed (the checks below report it)
            throw;
          }
        }
      } catch (const died&) {
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
      if (r == 1) one_gone = true;  // its communicators are closed
      if (r == 4) ++done;
    });
  for (auto& t : th) t.join();
  for (int r : {2, 3, 5, 6}) {
    CAPTURE(r);
    CAPTURE(err[r]);
    CHECK(err[r].empty());
    CHECK(new_size[r] == n - 3);
  }
  CAPTURE(late_msg);
  CHECK(err[1].empty());
  CHECK(err[4].empty());
  CHECK(late_kind == gsync::errc::excluded);
  CHECK(late_msg.find("excluded") != std::string::npos);
}

TEST_CASE("shrink: the quorum rule, and the records of the agreement") {
  using gsync::detail::shrink_quorum;
  CHECK(shrink_quorum(3, false, 4, 0));   // a majority
  CHECK(shrink_quorum(2, true, 4, 0));    // half, with rank 0
  CHECK_FALSE(shrink_quorum(2, false, 4, 0));  // the other half
  CHECK_FALSE(shrink_quorum(1, true, 4, 0));
  CHECK(shrink_quorum(1, true, 2, 0));
  CHECK_FALSE(shrink_quorum(1, false, 2, 0));
  CHECK(shrink_quorum(1, true, 1, 0));
  CHECK(shrink_quorum(3, false, 5, 0));
  CHECK_FALSE(shrink_quorum(2, true, 5, 0));
  CHECK(shrink_quorum(1, false, 4, 1));   // the caller's minimum replaces the rule
  CHECK_FALSE(shrink_quorum(3, true, 4, 4));
  CHECK_FALSE(shrink_quorum(0, true, 4, 1));
  for (int size = 1; size <= 9; ++size)  // no two disjoint groups both qualify
    for (unsigned a = 1; a < (1u << size); ++a)
      for (unsigned b = 1; b < (1u << size); ++b)
        if (!(a & b))
          REQUIRE_FALSE((shrink_quorum(std::popcount(a), a & 1, size, 0) && shrink_quorum(std::popcount(b), b & 1, size, 0)));
  std::uint64_t h[3];
  std::string_view rest;
  REQUIRE(gsync::transport::detail_shrink::parse_head("3 17 0 1 2", 3, h, rest));
  CHECK(h[0] == 3);
  CHECK(h[1] == 17);
  CHECK(h[2] == 0);
  CHECK(rest == "1 2");
  REQUIRE(gsync::transport::detail_shrink::parse_head("3 17 0", 3, h, rest));
  CHECK(rest.empty());
  CHECK_FALSE(gsync::transport::detail_shrink::parse_head("3 17", 3, h, rest));
  CHECK_FALSE(gsync::transport::detail_shrink::parse_head("3 x 0", 3, h, rest));
  CHECK_FALSE(gsync::transport::detail_shrink::parse_head("-3 1 0", 3, h, rest));
}

namespace {
// n ranks; the ranks in `lost` die after one allreduce; the others shrink with `opt`. Returns,
// per rank, the new size, or -(errc) when its shrink failed (0 for the lost ones).
std::vector<int> shrink_without(int n, std::set<int> lost, gsync::shrink_options opt, std::vector<std::string>& msg) {
  gsync::config cfg = gsync_test::with_timeout(30000ms);
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  std::vector<int> out(static_cast<std::size_t>(n), 0);
  msg.assign(static_cast<std::size_t>(n), "");
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, "quorum-host-" + std::to_string(r)), cfg);
        std::vector<float> v(100, 1.0f);
        gsync::allreduce(comm, std::span<float>{v});
        if (lost.count(r)) throw died{};
        try {
          gsync::allreduce(comm, std::span<float>{v});
        } catch (const gsync::error& e) {
          if (e.kind() != gsync::errc::peer_lost) throw;
        }
        try {
          auto next = comm.shrink(opt);
          std::vector<float> w(100, 1.0f);
          gsync::allreduce(next, std::span<float>{w});
          out[static_cast<std::size_t>(r)] = w[0] == static_cast<float>(next.size()) ? next.size() : -100;
        } catch (const gsync::error& e) {
          out[static_cast<std::size_t>(r)] = -static_cast<int>(e.kind());
          msg[static_cast<std::size_t>(r)] = e.what();
        }
      } catch (const died&) {
      } catch (const std::exception& e) {
        out[static_cast<std::size_t>(r)] = -1000;
        msg[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  return out;
}
}  // namespace

TEST_CASE("shrink: a minority does not go on, half with rank 0 does, and the caller's minimum replaces the rule") {
  const int excluded = -static_cast<int>(gsync::errc::excluded);
  std::vector<std::string> msg;
  {  // ranks 0 and 1 lost: ranks 2 and 3 are half of 4 without rank 0
    auto got = shrink_without(4, {0, 1}, {}, msg);
    for (int r : {2, 3}) {
      CAPTURE(r);
      CAPTURE(msg[r]);
      CHECK(got[r] == excluded);
      CHECK(msg[r].find("excluded") != std::string::npos);
    }
  }
  {  // ranks 2 and 3 lost: ranks 0 and 1 are half of 4 with rank 0
    auto got = shrink_without(4, {2, 3}, {}, msg);
    CHECK(got[0] == 2);
    CHECK(got[1] == 2);
  }
  {  // 2 of 5: a minority
    auto got = shrink_without(5, {1, 3, 4}, {}, msg);
    CHECK(got[0] == excluded);
    CHECK(got[2] == excluded);
  }
  {  // the same with min_size 2: they go on
    auto got = shrink_without(4, {0, 1}, gsync::shrink_options{2}, msg);
    CHECK(got[2] == 2);
    CHECK(got[3] == 2);
  }
  {  // min_size above what is left
    auto got = shrink_without(4, {3}, gsync::shrink_options{4}, msg);
    for (int r : {0, 1, 2}) CHECK(got[r] == excluded);
  }
}

TEST_CASE("shrink: the survivors agree on the collectives every one of them completed") {
  // Three ranks, one allreduce, then a binomial-tree reduce to rank 0: rank 1 only sends (it
  // completes), rank 0 waits for rank 2, which dies once rank 1 is through (rank 0 fails). Rank 1
  // fails its next allreduce.
  const int n = 3;
  gsync::config cfg = gsync_test::with_timeout(30000ms);
  cfg.transport.liveness_ms = 1000;
  const auto port = gsync_test::free_port();
  std::vector<gsync::shrink_report> rep(n);
  std::atomic<bool> sent{false};
  std::vector<std::string> err(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, "ops-host-" + std::to_string(r)), cfg);
        std::vector<float> v(8, 1.0f), out(8);
        gsync::allreduce(comm, std::span<float>{v});
        struct raise_at_end {  // rank 1's part is over, however it ended: rank 2 may die
          std::atomic<bool>* f;
          ~raise_at_end() { if (f) *f = true; }
        } raise{r == 1 ? &sent : nullptr};
        if (r == 2) {
          while (!sent.load()) std::this_thread::sleep_for(1ms);
          throw died{};
        }
        try {
          gsync::reduce<gsync::algo::binomial_tree>(comm, std::span<const float>{v}, std::span<float>{out}, gsync::op::sum{}, 0);
          if (r == 1) sent = true;
          if (r == 1) gsync::allreduce(comm, std::span<float>{v});
          err[r] = "no failure";
          return;
        } catch (const gsync::error& e) {
          if (e.kind() != gsync::errc::peer_lost) throw;
        }
        auto next = comm.shrink();
        rep[r] = next.last_shrink();
      } catch (const died&) {
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r : {0, 1}) {
    CAPTURE(r);
    CAPTURE(err[r]);
    CHECK(err[r].empty());
    CHECK(rep[r].agreed_ops == 1);
    CHECK(rep[r].old_size == 3);
    CHECK(rep[r].old_ranks == std::vector<int>{0, 1});
  }
  CHECK(rep[0].my_ops == 1);
  CHECK(rep[1].my_ops == 2);
}
