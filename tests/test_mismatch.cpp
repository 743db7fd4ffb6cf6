// Mismatch detection (issue 5): ranks that call different collectives, or the same one with a
// different count, element type, operator, root or algorithm, all raise errc::mismatch with both
// calls spelled out; never a hang, never mixed data. Also abort() and per-call timeouts.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gsync/core/op_numbering.hpp"
#include "support/errors.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;
using gsync_test::kind_of;
using gsync_test::message_of;

namespace {

gsync::config cfg_with(std::chrono::milliseconds t) {
  gsync::config c;
  c.timeout = t;
  return c;
}

// What each rank saw.
struct outcome {
  std::mutex m;
  std::vector<gsync::errc> kinds;
  std::vector<std::string> msgs;
  explicit outcome(int n) : kinds(static_cast<std::size_t>(n)), msgs(static_cast<std::size_t>(n)) {}
  void set(int r, gsync::errc k, const std::string& s) {
    std::lock_guard lk(m);
    kinds[static_cast<std::size_t>(r)] = k;
    msgs[static_cast<std::size_t>(r)] = s;
  }
};

// Runs `call(comm)` on every rank of an n-rank world of each transport; every rank must fail with
// `want`, and at least one message must contain every string of `needles`.
template <class Call>
void expect_all_fail(int n, gsync::errc want, std::vector<std::string> needles, Call call) {
  auto body = [&](auto& comm, outcome& out) {
    try {
      call(comm);
      out.set(comm.rank(), gsync::errc{}, "no error");
    } catch (const gsync::error& e) {
      out.set(comm.rank(), e.kind(), e.what());
    }
  };
  auto check = [&](outcome& out, const char* transport) {
    bool found = false;
    for (int r = 0; r < n; ++r) {
      INFO(transport << " rank " << r << ": " << out.msgs[static_cast<std::size_t>(r)]);
      CHECK(out.kinds[static_cast<std::size_t>(r)] == want);
      bool all = true;
      for (auto& s : needles) all = all && out.msgs[static_cast<std::size_t>(r)].find(s) != std::string::npos;
      found = found || all;
    }
    INFO(transport << " rank 0 said: " << out.msgs[0]);
    CHECK(found);
  };
  {
    outcome out(n);
    gsync_test::run_inproc(n, [&](auto& comm, gsync_test::world_sync&) { body(comm, out); }, cfg_with(20s));
    check(out, "inproc");
  }
  {
    outcome out(n);
    gsync_test::run_tcp(n, [&](auto& comm, gsync_test::world_sync&) { body(comm, out); }, cfg_with(20s));
    check(out, "tcp");
  }
  {
    outcome out(n);
    gsync_test::run_shm(n, [&](auto& comm, gsync_test::world_sync&) { body(comm, out); }, cfg_with(20s));
    check(out, "shm");
  }
}

}  // namespace

TEST_CASE("mismatch: allreduce counts differ (one element) -> every rank raises mismatch naming both calls") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    expect_all_fail(n, gsync::errc::mismatch, {"allreduce(float32, 1000, sum)", "allreduce(float32, 999, sum)", "count"},
                    [n](auto& comm) {
                      std::vector<float> v(comm.rank() == n - 1 ? 999 : 1000, 1.0f);
                      gsync::allreduce(comm, std::span<float>{v});
                    });
  }
}

TEST_CASE("mismatch: same bytes, different element type (float32 vs int32) is caught") {
  expect_all_fail(3, gsync::errc::mismatch, {"float32", "int32", "element type"}, [](auto& comm) {
    if (comm.rank() == 1) {
      std::vector<std::int32_t> v(64, 1);
      gsync::allreduce(comm, std::span<std::int32_t>{v});
    } else {
      std::vector<float> v(64, 1.0f);
      gsync::allreduce(comm, std::span<float>{v});
    }
  });
}

TEST_CASE("mismatch: different operators (sum vs max) are caught") {
  expect_all_fail(4, gsync::errc::mismatch, {"sum", "max", "operator"}, [](auto& comm) {
    std::vector<double> v(100, 1.0);
    if (comm.rank() == 2) gsync::allreduce(comm, std::span<double>{v}, gsync::op::max{});
    else gsync::allreduce(comm, std::span<double>{v}, gsync::op::sum{});
  });
}

TEST_CASE("mismatch: different collectives (allreduce vs broadcast) are caught") {
  expect_all_fail(3, gsync::errc::mismatch, {"allreduce(", "broadcast(", "different operations"}, [](auto& comm) {
    std::vector<float> v(32, 1.0f);
    if (comm.rank() == 0) gsync::broadcast(comm, std::span<float>{v}, 0);  // only sends: hears of it at its next call
    else gsync::allreduce(comm, std::span<float>{v});
    gsync::barrier(comm);
  });
}

TEST_CASE("mismatch: different roots of a broadcast are caught (at the latest by the next call)") {
  // Two ranks that both believe they are the root only send: nobody reads their message within
  // the call, so the next call that reads from them reports the stale broadcast instead. Which
  // stale broadcast is read first depends on timing (rank 1's, "root 1", or, when rank 1 has
  // already moved on to the allreduce, rank 0's "root 0" as an earlier operation), so the check is
  // that the report names a broadcast and its root.
  expect_all_fail(3, gsync::errc::mismatch, {"broadcast(int32, 10, root "}, [](auto& comm) {
    std::vector<int> v(10, comm.rank());
    gsync::broadcast(comm, std::span<int>{v}, comm.rank() == 1 ? 1 : 0);
    gsync::allreduce(comm, std::span<int>{v});
  });
  expect_all_fail(3, gsync::errc::mismatch, {"root 0", "root 2", "root"}, [](auto& comm) {
    std::vector<int> v(10, comm.rank());
    gsync::broadcast(comm, std::span<int>{v}, comm.rank() == 1 ? 2 : 0);  // rank 1 waits for 2, which sends to 0 and 1
    gsync::barrier(comm);
  });
}

TEST_CASE("mismatch: a rank that wrongly takes itself for a broadcast's root fails in that broadcast, not only at the next call") {
  // Rank 1 passes root 1, the others root 0: the wrong root must not return with its own data
  // (the broadcast may be the last call: final weights before saving). With 2 ranks both take
  // themselves for the root and both fail in it; otherwise the true root's side may return, and
  // fails at its next call. Over shared memory, and over TCP (where, with 4 ranks, the wrong
  // root's data for a rank that never dials it stays queued: a timeout, not a silent success).
  using namespace std::chrono_literals;
  for (bool tcp : {false, true})
    for (int n : {2, 3, 4}) {
      if (tcp && n == 4) continue;
      CAPTURE(tcp);
      CAPTURE(n);
      std::vector<gsync::errc> kind(static_cast<std::size_t>(n), gsync::errc{}), next(static_cast<std::size_t>(n), gsync::errc{});
      std::vector<std::string> msg(static_cast<std::size_t>(n));
      auto body = [&](auto& comm, gsync_test::world_sync&) {
        const int r = comm.rank();
        std::vector<int> v(10, 100 + r);
        try {
          gsync::broadcast(comm, std::span<int>{v}, r == 1 ? 1 : 0);
        } catch (const gsync::error& e) {
          kind[static_cast<std::size_t>(r)] = e.kind();
          msg[static_cast<std::size_t>(r)] = e.what();
          return;
        }
        try {
          gsync::barrier(comm);
        } catch (const gsync::error& e) {
          next[static_cast<std::size_t>(r)] = e.kind();
        }
      };
      if (tcp) gsync_test::run_tcp(n, body, gsync_test::with_timeout(20000ms));
      else gsync_test::run_shm(n, body, gsync_test::with_timeout(20000ms));
      CAPTURE(msg[1]);
      CHECK(kind[1] == gsync::errc::mismatch);
      CHECK(msg[1].find("disagree on the root") != std::string::npos);
      if (n == 2) CHECK(kind[0] == gsync::errc::mismatch);
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK((kind[static_cast<std::size_t>(r)] != gsync::errc{} || next[static_cast<std::size_t>(r)] != gsync::errc{}));
      }
    }
}

TEST_CASE("mismatch: different algorithms are caught") {
  expect_all_fail(4, gsync::errc::mismatch, {"[ring]", "[recursive_doubling]", "algorithm"}, [](auto& comm) {
    std::vector<float> v(64, 1.0f);
    if (comm.rank() == 3) gsync::allreduce<gsync::algo::recursive_doubling>(comm, std::span<float>{v});
    else gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v});
  });
}

TEST_CASE("mismatch: a rank that skipped a collective is caught at the next one") {
  expect_all_fail(3, gsync::errc::mismatch, {"allreduce(float32, 16, sum)", "allgather(float32, 4)", "different operations"},
                  [](auto& comm) {
    std::vector<float> v(16, 1.0f), w(12);
    if (comm.rank() != 2) gsync::allreduce(comm, std::span<float>{v});
    gsync::allgather(comm, std::span<const float>{v.data(), 4}, std::span<float>{w});
  });
}

// Over TCP with a deadlock that no frame reveals: with 3 ranks, recursive doubling's rank 0 first
// waits for rank 2 (which folds in), while rank 2, having skipped the allreduce, waits in a
// broadcast for rank 0. Neither sends the other anything; the stall records in the store show both
// calls under op #1, and every rank fails with mismatch (from half the timeout on), not a timeout.
TEST_CASE("mismatch: ranks stalled in different collectives under one op number are told so through the store") {
  outcome out(3);
  gsync_test::run_tcp(3, [&](auto& comm, gsync_test::world_sync&) {
    try {
      std::vector<float> v(16, 1.0f);
      if (comm.rank() != 2) gsync::allreduce<gsync::algo::recursive_doubling>(comm, std::span<float>{v});
      else gsync::broadcast(comm, std::span<float>{v}, 0);
      out.set(comm.rank(), gsync::errc{}, "no error");
    } catch (const gsync::error& e) {
      out.set(comm.rank(), e.kind(), e.what());
    }
  }, cfg_with(6s));
  bool named = false;
  for (int r = 0; r < 3; ++r) {
    const std::string& m = out.msgs[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << m);
    CHECK(out.kinds[static_cast<std::size_t>(r)] == gsync::errc::mismatch);
    named = named || (m.find("allreduce(float32, 16, sum) [recursive_doubling] as op #1") != std::string::npos &&
                      m.find("broadcast(float32, 16, root 0)") != std::string::npos && m.find("skipped or added") != std::string::npos);
  }
  CHECK(named);
}

TEST_CASE("mismatch: send/recv with the same bytes but another element type") {
  auto f = [](auto& comm, gsync_test::world_sync&) {
    if (comm.rank() == 0) {
      std::vector<float> v(8, 1.0f);
      try {
        gsync::send(comm, std::span<const float>{v}, 1, 5);
      } catch (const gsync::error&) {
      }
    } else {
      std::vector<std::uint32_t> v(8);
      const std::string m = message_of([&] { gsync::recv(comm, std::span<std::uint32_t>{v}, 0, 5); });
      CHECK(m.find("recv(uint32, 8, tag 5)") != std::string::npos);
      CHECK(m.find("send(float32, 8, tag 5)") != std::string::npos);
    }
  };
  gsync_test::run_inproc(2, f, cfg_with(20s));
  gsync_test::run_tcp(2, f, cfg_with(20s));
}

TEST_CASE("mismatch: matching calls are not flagged (every kind, every dtype of the fingerprint)") {
  gsync_test::run_tcp(3, [](auto& comm, gsync_test::world_sync&) {
    std::vector<std::uint16_t> a(7, 1);
    gsync::allreduce(comm, std::span<std::uint16_t>{a}, gsync::op::max{});
    std::vector<gsync::bfloat16> b(5, gsync::bfloat16(1.0f));
    gsync::allreduce(comm, std::span<gsync::bfloat16>{b}, gsync::op::avg{});
    std::vector<double> c(9, 2.0);
    gsync::reduce(comm, std::span<const double>{c}, std::span<double>{c}, gsync::op::prod{}, 2);
    gsync::broadcast(comm, std::span<double>{c}, 1);
    gsync::barrier(comm);
    CHECK(a[0] == 1);
  }, cfg_with(20s));
}

TEST_CASE("abort() from another thread fails the pending operation at once and the peers soon after") {
  for (int mode = 0; mode < 3; ++mode) {
    CAPTURE(mode);
    outcome out(3);
    std::atomic<bool> aborted{false};
    auto f = [&](auto& comm, gsync_test::world_sync&) {
      std::thread killer;
      if (comm.rank() == 1)  // rank 1 aborts itself from another thread while it waits in the barrier
        killer = std::thread([&] {
          std::this_thread::sleep_for(300ms);
          comm.abort("watchdog says stop");
          aborted = true;
        });
      if (comm.rank() == 2) {  // late: enters the barrier only after the abort (bounded wait)
        const auto until = std::chrono::steady_clock::now() + 20s;
        while (!aborted && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
        std::this_thread::sleep_for(200ms);
      }
      try {
        gsync::barrier(comm);
        out.set(comm.rank(), gsync::errc{}, "no error");
      } catch (const gsync::error& e) {
        out.set(comm.rank(), e.kind(), e.what());
      }
      if (killer.joinable()) killer.join();
      if (comm.rank() == 1) {  // later calls fail at once too
        CHECK(kind_of([&] { gsync::barrier(comm); }) == gsync::errc::aborted);
        CHECK(comm.aborted());
      }
    };
    const auto t0 = std::chrono::steady_clock::now();
    if (mode == 0) gsync_test::run_inproc(3, f, cfg_with(30s));
    if (mode == 1) gsync_test::run_tcp(3, f, cfg_with(30s));
    if (mode == 2) gsync_test::run_shm(3, f, cfg_with(30s));
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took < 10s);  // far below the 30 s timeout: nobody waited for it
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r << ": " << out.msgs[static_cast<std::size_t>(r)]);
      CHECK(out.kinds[static_cast<std::size_t>(r)] == gsync::errc::aborted);
      CHECK(out.msgs[static_cast<std::size_t>(r)].find("watchdog says stop") != std::string::npos);
    }
  }
}

TEST_CASE("per-call timeout: with_timeout applies to the calls issued under it only") {
  auto f = [](auto& comm, gsync_test::world_sync& sync) {
    std::vector<float> v(4, 1.0f);
    if (comm.rank() == 0) {
      std::string m;
      gsync::errc k{};
      {
        auto g = comm.with_timeout(300ms);
        CHECK(comm.issue_timeout() == 300ms);
        try {
          gsync::recv(comm, std::span<float>{v}, 1, 3);  // rank 1 never sends: times out after 0.3 s
        } catch (const gsync::error& e) {
          k = e.kind();
          m = e.what();
        }
      }
      CHECK(comm.issue_timeout() == 60s);
      CHECK(k == gsync::errc::timeout);
      INFO(m);
      CHECK(m.find("recv(float32, 4, tag 3)") != std::string::npos);
      CHECK(m.find("16 bytes") != std::string::npos);
      CHECK(m.find("from rank 1") != std::string::npos);
    }
    sync.bar.arrive_and_wait();  // rank 1 stays alive until rank 0 has timed out
  };
  gsync_test::run_tcp(2, f, cfg_with(60s));
  gsync_test::run_shm(2, f, cfg_with(60s));
}

TEST_CASE("timeout report names the ranks that have not reached the operation") {
  std::mutex m;
  std::string all;
  gsync_test::run_tcp(3, [&](auto& comm, gsync_test::world_sync& sync) {
    std::vector<float> v(8, 1.0f);
    if (comm.rank() != 2) {
      auto g = comm.with_timeout(1500ms);  // set-up ran under the communicator's longer timeout
      const std::string msg = message_of([&] { gsync::allreduce(comm, std::span<float>{v}); });
      std::lock_guard lk(m);
      all += msg + "\n";
    }
    sync.bar.arrive_and_wait();  // rank 2 never joins, but stays alive
  }, cfg_with(20s));
  INFO(all);
  CHECK(all.find("allreduce(float32, 8, sum)") != std::string::npos);
  CHECK(all.find("timed out after waiting") != std::string::npos);
  CHECK(all.find("have not reached op #1: 2") != std::string::npos);
}

TEST_CASE("messages name operations by their own numbers, jobs' operations apart") {
  CHECK(gsync::detail::op_label(17) == "op #17");
  CHECK(gsync::detail::op_label((std::uint64_t{1} << 63) | 15917) == "job op #15917");
}
