// gsync::recv_any: receives from whichever rank sends first, over in-process, TCP, shared memory and
// a mix of both (two pretend hosts); mixed with plain recvs from the same senders (numbering), with
// messages of other tags and collectives in front, asynchronous and inside submit() jobs; and its
// errors (size, timeout, arguments).

#include <doctest/doctest.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gsync/async.hpp>
#include <gsync/recv_any.hpp>

#include "support/errors.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

template <class F>
void on_all(int n, F f, std::chrono::milliseconds timeout = 30s) {
  const gsync::config cfg = gsync_test::with_timeout(timeout);
  SUBCASE("inproc") { gsync_test::run_inproc(n, f, cfg); }
  SUBCASE("tcp") { gsync_test::run_tcp(n, f, cfg); }
  SUBCASE("shm") { gsync_test::run_shm(n, f, cfg); }
  SUBCASE("mixed") { gsync_test::run_mixed(n, 2, f, cfg); }
}

float value(int from, int k, std::size_t i) { return static_cast<float>(from * 1000 + k) + 0.25f * static_cast<float>(i % 7); }

bool holds(const std::vector<float>& v, int from, int k) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != value(from, k, i)) return false;
  return true;
}

}  // namespace

TEST_CASE("recv_any: rank 0 takes every other rank's messages, each sender's in its order, world sizes 2..6") {
  for (int n : {2, 3, 4, 6}) {
    CAPTURE(n);
    on_all(n, [](auto& comm, gsync_test::world_sync&) {
      const int r = comm.rank(), w = comm.size();
      constexpr int per_sender = 3;
      const std::size_t c = 1000;
      if (r != 0) {
        for (int k = 0; k < per_sender; ++k) {
          std::vector<float> v(c);
          for (std::size_t i = 0; i < c; ++i) v[i] = value(r, k, i);
          gsync::send(comm, std::span<const float>{v}, 0, 5);
        }
      } else {
        std::vector<int> next(static_cast<std::size_t>(w), 0);  // per sender, the message expected next
        for (int m = 0; m < per_sender * (w - 1); ++m) {
          std::vector<float> v(c, -1.f);
          const int from = gsync::recv_any(comm, std::span<float>{v}, 5);
          REQUIRE(from >= 1);
          REQUIRE(from < w);
          CHECK(holds(v, from, next[static_cast<std::size_t>(from)]));
          ++next[static_cast<std::size_t>(from)];
        }
        for (int p = 1; p < w; ++p) CHECK(next[static_cast<std::size_t>(p)] == per_sender);
      }
      // Collectives and plain pairs still line up afterwards.
      std::vector<double> a(5, 1.0);
      gsync::allreduce(comm, std::span<double>{a});
      CHECK(a[4] == static_cast<double>(w));
    });
  }
}

TEST_CASE("recv_any: recvs issued before and after it from the same sender keep the sender's order") {
  on_all(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    const std::size_t c = 64;
    auto make = [&](int from, int k) {
      std::vector<float> v(c);
      for (std::size_t i = 0; i < c; ++i) v[i] = value(from, k, i);
      return v;
    };
    if (r == 1) {
      for (int k = 0; k < 4; ++k) gsync::send(comm, std::span<const float>{make(1, k)}, 0, 9);
    } else if (r == 2) {
      gsync::send(comm, std::span<const float>{make(2, 0)}, 0, 9);
    } else {
      std::vector<float> a(c), b(c), d(c), e(c), f(c);
      gsync::recv(comm, std::span<float>{a}, 1, 9);  // rank 1's first
      CHECK(holds(a, 1, 0));
      // Issued before any of them runs: the recv from rank 1 between the recv_any was numbered
      // at issue, and shifts by what the first recv_any takes from rank 1.
      int from1 = -1, from2 = -1, from3 = -1;
      auto q1 = gsync::recv_any_async(comm, std::span<float>{b}, 9, &from1);
      auto q2 = gsync::recv_async(comm, std::span<float>{d}, 1, 9);
      auto q3 = gsync::recv_any_async(comm, std::span<float>{e}, 9, &from2);
      q3.wait();
      q2.wait();
      q1.wait();
      from3 = gsync::recv_any(comm, std::span<float>{f}, 9);
      // Rank 1 sent 4, rank 2 one: in issue order, rank 1's come 1, 2, 3 and rank 2's once.
      const std::pair<int, const std::vector<float>*> got[] = {{from1, &b}, {1, &d}, {from2, &e}, {from3, &f}};
      int k1 = 1, twos = 0;
      for (const auto& [from, v] : got) {
        if (from == 1) CHECK(holds(*v, 1, k1++));
        else if (from == 2) CHECK(holds(*v, 2, twos++));
        else FAIL_CHECK("unexpected sender " << from);
      }
      CHECK(k1 == 4);
      CHECK(twos == 1);
    }
  });
}

TEST_CASE("recv_any: a sender whose next message has another tag is passed over, not disturbed") {
  on_all(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<float> v(16);
    if (r == 1) {
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(1, 0, i);
      gsync::send(comm, std::span<const float>{v}, 0, 3);  // in front: another tag
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(1, 1, i);
      gsync::send(comm, std::span<const float>{v}, 0, 5);
    } else if (r == 2) {
      std::this_thread::sleep_for(50ms);  // rank 1's messages are there first
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(2, 0, i);
      gsync::send(comm, std::span<const float>{v}, 0, 5);
    } else {
      std::vector<float> got(16);
      CHECK(gsync::recv_any(comm, std::span<float>{got}, 5) == 2);
      CHECK(holds(got, 2, 0));
      gsync::recv(comm, std::span<float>{got}, 1, 3);
      CHECK(holds(got, 1, 0));
      CHECK(gsync::recv_any(comm, std::span<float>{got}, 5) == 1);
      CHECK(holds(got, 1, 1));
    }
    std::vector<double> a(3, 2.0);  // a collective after: nothing left behind
    gsync::allreduce(comm, std::span<double>{a});
    CHECK(a[0] == 6.0);
  });
}

TEST_CASE("recv_any: inside submit() jobs, as the torch backend issues it") {
  on_all(4, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank(), w = comm.size();
    std::vector<int> senders;
    gsync::submit(comm, [&](auto& c) {
      std::vector<float> v(33);
      if (r != 0) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(r, 0, i);
        gsync::send(c, std::span<const float>{v}, 0, 0);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(r, 1, i);
        gsync::send(c, std::span<const float>{v}, 0, 1);  // another tag: no recv_any takes it
      } else {
        for (int m = 0; m < w - 1; ++m) {
          const int from = gsync::recv_any(c, std::span<float>{v}, 0);
          CHECK(holds(v, from, 0));
          senders.push_back(from);
        }
        for (int p = 1; p < w; ++p) {  // every sender's second message, by name
          gsync::recv(c, std::span<float>{v}, p, 1);
          CHECK(holds(v, p, 1));
        }
      }
    }).wait();
    if (r == 0) {
      std::sort(senders.begin(), senders.end());
      CHECK(senders == std::vector<int>{1, 2, 3});
    }
  });
}

TEST_CASE("recv_any: a message of another size is a mismatch, nothing sent is a timeout") {
  SUBCASE("size") {
    on_all(2, [](auto& comm, gsync_test::world_sync&) {
      std::vector<float> v(10, 1.f);
      if (comm.rank() == 1) {
        (void)gsync_test::kind_of([&] { gsync::send(comm, std::span<const float>{v}, 0, 1); });
      } else {
        std::vector<float> small(9);
        CHECK(gsync_test::kind_of([&] { (void)gsync::recv_any(comm, std::span<float>{small}, 1); }) == gsync::errc::mismatch);
      }
    });
  }
  SUBCASE("timeout") {
    on_all(2, [](auto& comm, gsync_test::world_sync& sync) {
      if (comm.rank() == 0) {
        std::vector<float> v(4);
        const std::string m = gsync_test::message_of([&] {
          auto g = comm.with_timeout(300ms);
          (void)gsync::recv_any(comm, std::span<float>{v}, 11);
        });
        CHECK(m.find("any rank") != std::string::npos);
        CHECK(m.find("tag 11") != std::string::npos);
      }
      sync.bar.arrive_and_wait();  // rank 1 stays until rank 0 timed out
    });
  }
}

TEST_CASE("recv_any: argument errors are thrown at the call") {
  gsync_test::run_inproc(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(4);
    CHECK(gsync_test::kind_of([&] { (void)gsync::recv_any(comm, std::span<float>{v}, -1); }) == gsync::errc::invalid_argument);
    CHECK(gsync_test::kind_of([&] { (void)gsync::recv_any_async(comm, std::span<float>{v}, 0, nullptr); }) == gsync::errc::invalid_argument);
  });
  gsync_test::run_inproc(1, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(4);
    CHECK(gsync_test::kind_of([&] { (void)gsync::recv_any(comm, std::span<float>{v}, 0); }) == gsync::errc::invalid_argument);
  });
}

TEST_CASE("recv_any: a sender whose other message stands first is not spun on, and none left is a mismatch") {
  on_all(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<float> v(8, static_cast<float>(r));
    // (In process a send waits until it is taken, so rank 1's never ends: it fails with rank 0.)
    if (r == 1) {
      (void)gsync_test::kind_of([&] {
        gsync::send(comm, std::span<const float>{v}, 0, 3);  // first, with another tag
        gsync::send(comm, std::span<const float>{v}, 0, 5);
      });
    } else if (r == 2) {
      std::this_thread::sleep_for(300ms);
      gsync::send(comm, std::span<const float>{v}, 0, 5);
    } else {
      std::vector<float> got(8);
      timespec c0{}, c1{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      const auto t0 = std::chrono::steady_clock::now();
      CHECK(gsync::recv_any(comm, std::span<float>{got}, 5) == 2);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      const double cpu = static_cast<double>(c1.tv_sec - c0.tv_sec) + 1e-9 * static_cast<double>(c1.tv_nsec - c0.tv_nsec);
      CAPTURE(wall);
      if (wall > 0.1) CHECK(cpu < 0.5 * wall);  // it slept while rank 1's tag-3 message stood first, not spun
      // Now rank 1's tag-3 message stands first and rank 2 sends nothing more: no receive of tag 5
      // can end, and it says so at once rather than at the timeout.
      const auto t1 = std::chrono::steady_clock::now();
      CHECK(gsync_test::kind_of([&] { (void)gsync::recv_any(comm, std::span<float>{got}, 5); }) == gsync::errc::mismatch);
      CHECK(std::chrono::steady_clock::now() - t1 < 10s);
    }
  }, 20s);
}

TEST_CASE("recv_any: what it took stays counted when the communicator is moved") {
  on_all(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(4);
    if (comm.rank() == 1) {
      for (int k = 0; k < 2; ++k) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(1, k, i);
        gsync::send(comm, std::span<const float>{v}, 0, 2);
      }
    } else {
      CHECK(gsync::recv_any(comm, std::span<float>{v}, 2) == 1);
      CHECK(holds(v, 1, 0));
      auto moved = std::move(comm);
      gsync::recv(moved, std::span<float>{v}, 1, 2);  // rank 1's second message
      CHECK(holds(v, 1, 1));
      comm = std::move(moved);
    }
  });
}
