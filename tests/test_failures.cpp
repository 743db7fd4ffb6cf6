// Failures reach every surviving rank as gsync::error, promptly, never as a hang.

#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

// Ranks keep reducing; `leaver` stops after `after` operations and destroys its communicator.
// Every other rank must then fail with peer_lost well before its (long) timeout.
template <class Runner>
void survivors_see_peer_lost(Runner run, int n, int leaver) {
  std::atomic<int> lost{0}, other{0};
  std::atomic<long long> worst_ms{0};
  gsync::config cfg;
  cfg.timeout = 60s;
  run(n, [&](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(1 << 16, 1.0f);
    if (comm.rank() == leaver) {
      gsync::allreduce(comm, std::span<float>{v});
      return;  // communicator destroyed by the caller: connections close
    }
    gsync::allreduce(comm, std::span<float>{v});
    const auto t0 = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 1000; ++i) gsync::allreduce(comm, std::span<float>{v});
      other++;
    } catch (const gsync::error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
      long long prev = worst_ms.load();
      while (ms > prev && !worst_ms.compare_exchange_weak(prev, ms)) {}
      if (e.kind() == gsync::errc::peer_lost) lost++;
      else other++;
    }
  }, cfg);
  CHECK(lost == n - 1);
  CHECK(other == 0);
  CHECK(worst_ms.load() < 5000);
}

}  // namespace

TEST_CASE("a rank that leaves: survivors raise peer_lost (in-process)") {
  survivors_see_peer_lost([](int n, auto f, gsync::config c) { gsync_test::run_inproc(n, f, c); }, 4, 2);
}

TEST_CASE("a rank that leaves: survivors raise peer_lost (TCP)") {
  survivors_see_peer_lost([](int n, auto f, gsync::config c) { gsync_test::run_tcp(n, f, c); }, 4, 2);
  survivors_see_peer_lost([](int n, auto f, gsync::config c) { gsync_test::run_tcp(n, f, c); }, 3, 0);
}

TEST_CASE("a collective nobody else joins times out at the communicator's deadline") {
  // Set-up runs under the default timeout (a loaded machine may need more than 400 ms for it);
  // the collective under the communicator's timeout set afterwards.
  gsync_test::run_tcp(2, [](auto& comm, gsync_test::world_sync& sync) {
    if (comm.rank() == 1) {
      comm.set_timeout(400ms);
      std::vector<float> v(8);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        gsync::allreduce(comm, std::span<float>{v});
        FAIL("allreduce returned alone");
      } catch (const gsync::error& e) {
        CHECK(e.kind() == gsync::errc::timeout);
        CHECK(std::string(e.what()).find("rank 0") != std::string::npos);
      }
      const auto dt = std::chrono::steady_clock::now() - t0;
      CHECK(dt >= 350ms);
      CHECK(dt < 3s);
      // After an error the communicator refuses further use instead of mixing operations.
      CHECK_THROWS_AS(gsync::allreduce(comm, std::span<float>{v}), gsync::error);
    }
    sync.bar.arrive_and_wait();
  });
}

TEST_CASE("setup with a missing rank times out naming what it waited for") {
  gsync::config cfg;
  cfg.timeout = 500ms;
  gsync::bootstrap::launch_info li;
  li.rank = 0;
  li.size = 2;
  li.master_port = gsync_test::free_port();
  try {
    auto c = gsync::tcp_communicator::join(li, cfg);
    FAIL("joined without rank 1");
  } catch (const gsync::error& e) {
    CHECK(e.kind() == gsync::errc::timeout);
  }
}

TEST_CASE("mismatched sizes between ranks are detected, not mixed") {
  gsync::config cfg;
  cfg.timeout = 5s;
  std::atomic<int> errors{0};
  gsync_test::run_tcp(2, [&](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(comm.rank() == 0 ? 1000 : 1001);
    try {
      gsync::allreduce(comm, std::span<float>{v});
    } catch (const gsync::error& e) {
      if (e.kind() == gsync::errc::mismatch || e.kind() == gsync::errc::peer_lost) errors++;
    }
  }, cfg);
  CHECK(errors == 2);
}

namespace {
// Throws on one rank (the one named by `thrower`), else a plain sum; not noexcept, like most user functors.
struct throws_on {
  int thrower;
  int me;
  template <class A>
  A operator()(A a, A b) const {
    if (me == thrower) throw std::runtime_error("operator refused");
    return a + b;
  }
};
}  // namespace

TEST_CASE("a user operator that throws fails with gsync::error, never std::terminate, and no rank goes on unaware") {
  // Thrower -1: every rank's operator throws. Else only that rank's: it fails at once, and its
  // peers are told (an algorithm where a peer's part did not need its result may let that peer
  // finish this operation, but the communicator is aborted everywhere: the next one fails).
  using namespace std::chrono_literals;
  for (int n : {2, 4})
    for (int thrower : {-1, 1}) {
      CAPTURE(n);
      CAPTURE(thrower);
      std::vector<gsync::errc> kind(static_cast<std::size_t>(n), gsync::errc{});
      std::vector<std::string> msg(static_cast<std::size_t>(n));
      std::vector<int> went_on(static_cast<std::size_t>(n), 0);
      auto body = [&](auto& comm, gsync_test::world_sync&) {
        const int r = comm.rank();
        std::vector<float> v(1000, 1.0f);
        try {
          gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}, throws_on{thrower < 0 ? r : thrower, r});  // every rank combines
          msg[static_cast<std::size_t>(r)] = "returned";
        } catch (const gsync::error& e) {
          kind[static_cast<std::size_t>(r)] = e.kind();
          msg[static_cast<std::size_t>(r)] = e.what();
        }
        try {
          gsync::barrier(comm);
          went_on[static_cast<std::size_t>(r)] = 1;
        } catch (const gsync::error&) {
        }
      };
      gsync_test::run_tcp(n, body, gsync_test::with_timeout(20000ms));
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CAPTURE(msg[static_cast<std::size_t>(r)]);
        if (r == thrower) CHECK(kind[static_cast<std::size_t>(r)] == gsync::errc::invalid_argument);
        // Its own throw, or a peer's report of it (errc::aborted) when that came first.
        if (thrower < 0 || r == thrower) CHECK(msg[static_cast<std::size_t>(r)].find("operator refused") != std::string::npos);
        CHECK(kind[static_cast<std::size_t>(r)] != gsync::errc::timeout);
        CHECK(went_on[static_cast<std::size_t>(r)] == 0);
      }
    }
  static_assert(!gsync::nothrow_op<throws_on, float>);
  static_assert(gsync::nothrow_op<gsync::op::sum, float>);
}
