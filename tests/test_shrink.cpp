// Shrinking to the survivors (communicator::shrink, transport/mesh/shrink.ipp): ranks as threads
// over TCP and shared memory; a rank "dies" by dropping its communicator while an exception
// unwinds (no goodbye to the store, its connections and recovery listener close), which the
// others see as they would a killed process. The multi-process kills: tests/mp_shrink.sh.
#include <doctest/doctest.h>

#include <numeric>
#include <stdexcept>
#include <thread>

#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {
struct died : std::exception {};

// n ranks (host of rank r: host_of(r)); `victim` dies after one good allreduce; the survivors
// fail their next allreduce, shrink, check the new numbering and reduce again.
void shrink_after_death(int n, int victim, std::function<std::string(int)> host_of, gsync::config cfg) {
  const auto port = gsync_test::free_port();
  std::vector<std::string> err(static_cast<std::size_t>(n));
  std::vector<int> new_rank(static_cast<std::size_t>(n), -1), new_size(static_cast<std::size_t>(n), -1);
  std::vector<float> got(static_cast<std::size_t>(n), -1);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        if (r == victim) {
          try {
            auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, host_of(r)), cfg);
            std::vector<float> v(1000, 1.0f);
            gsync::allreduce(comm, std::span<float>{v});
            throw died{};  // the communicator is dropped while this unwinds: no goodbye
          } catch (const died&) {
          }
          return;
        }
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, n, port, host_of(r)), cfg);
        std::vector<float> v(1000, 1.0f);
        gsync::allreduce(comm, std::span<float>{v});
        try {  // the victim is not there: this fails when its connections close
          gsync::allreduce(comm, std::span<float>{v});
          throw std::runtime_error("an allreduce with a dead rank returned");
        } catch (const gsync::error& e) {
          if (e.kind() != gsync::errc::peer_lost) throw;
        }
        auto next = comm.shrink();
        new_rank[static_cast<std::size_t>(r)] = next.rank();
        new_size[static_cast<std::size_t>(r)] = next.size();
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
