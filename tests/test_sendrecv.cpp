// gsync::sendrecv: exchanges in which every rank sends and receives at once (ring shifts, pipeline
// stages), at sizes above every transport's buffering, over in-process, TCP and shared memory; its
// pairing with plain send/recv, its asynchronous form, the self case and its argument errors; and
// the diagnosis of the cycle that separate recv-then-send calls make.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gsync/async.hpp>

#include "support/errors.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

template <class F>
void on_all(int n, F f) {
  const gsync::config cfg = gsync_test::with_timeout(30s);
  SUBCASE("inproc") { gsync_test::run_inproc(n, f, cfg); }
  SUBCASE("tcp") { gsync_test::run_tcp(n, f, cfg); }
  SUBCASE("shm") { gsync_test::run_shm(n, f, cfg); }
}

float fwd_value(int from, std::size_t i) { return static_cast<float>(from) * 0.5f + static_cast<float>(i % 1021); }
std::int64_t back_value(int from, std::size_t i) { return (std::int64_t{from} << 40) + static_cast<std::int64_t>(i); }

// Counts 0, 1, small, and above the socket buffers and the 1 MiB shared-memory ring (4 MiB + 12 B
// forward, 8 MiB + 24 B back), where separate send and recv calls in a cycle would wait forever.
const std::size_t shift_counts[] = {0, 1, 1000, (std::size_t{1} << 20) + 3};

}  // namespace

TEST_CASE("sendrecv: ring shifts both ways at every size, world sizes 1..5 and 8") {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    CAPTURE(n);
    on_all(n, [](auto& comm, gsync_test::world_sync&) {
      const int r = comm.rank(), w = comm.size();
      const int next = (r + 1) % w, prev = (r + w - 1) % w;
      for (std::size_t c : shift_counts) {
        CAPTURE(c);
        std::vector<float> mine(c), got(c, -1.f);
        for (std::size_t i = 0; i < c; ++i) mine[i] = fwd_value(r, i);
        gsync::sendrecv(comm, std::span<const float>{mine}, next, 1, std::span<float>{got}, prev, 1);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < c; ++i) wrong += got[i] != fwd_value(prev, i);
        CHECK(wrong == 0);
        // The other way, another element type and tag.
        std::vector<std::int64_t> b(c), bgot(c, -1);
        for (std::size_t i = 0; i < c; ++i) b[i] = back_value(r, i);
        gsync::sendrecv(comm, std::span<const std::int64_t>{b}, prev, 2, std::span<std::int64_t>{bgot}, next, 2);
        wrong = 0;
        for (std::size_t i = 0; i < c; ++i) wrong += bgot[i] != back_value(next, i);
        CHECK(wrong == 0);
      }
      // Collectives still line up afterwards (sendrecv uses the per-pair numbering only).
      std::vector<double> a(7, 1.0);
      gsync::allreduce(comm, std::span<double>{a});
      CHECK(a[6] == static_cast<double>(w));
    });
  }
}

TEST_CASE("sendrecv: pairs with a plain recv and send on the peer, sizes above the buffers") {
  on_all(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    const std::size_t c = (std::size_t{1} << 20) + 5;
    std::vector<float> out(c), in(c, 0.f);
    for (std::size_t i = 0; i < c; ++i) out[i] = fwd_value(r, i);
    if (r == 0) {
      gsync::sendrecv(comm, std::span<const float>{out}, 1, 4, std::span<float>{in}, 1, 5);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < c; ++i) wrong += in[i] != fwd_value(1, i);
      CHECK(wrong == 0);
    } else if (r == 1) {
      gsync::recv(comm, std::span<float>{in}, 0, 4);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < c; ++i) wrong += in[i] != fwd_value(0, i);
      CHECK(wrong == 0);
      gsync::send(comm, std::span<const float>{out}, 0, 5);
    }
    // Rank 2 took no part; the pair's next messages keep their order after the mix.
    if (r < 2) {
      std::vector<int> x{r, r + 10}, y(2, -1);
      gsync::sendrecv(comm, std::span<const int>{x}, 1 - r, 0, std::span<int>{y}, 1 - r, 0);
      CHECK(y[0] == 1 - r);
      CHECK(y[1] == 11 - r);
    }
    gsync::barrier(comm);
  });
}

TEST_CASE("sendrecv: the asynchronous form runs in issue order beside collectives") {
  on_all(4, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank(), w = comm.size();
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    const std::size_t c = 300000;
    std::vector<std::vector<float>> mine(3, std::vector<float>(c)), got(3, std::vector<float>(c));
    std::vector<double> sum(1000, static_cast<double>(r));
    std::vector<gsync::request> pending;
    for (int k = 0; k < 3; ++k) {
      for (std::size_t i = 0; i < c; ++i) mine[k][i] = fwd_value(r + 10 * k, i);
      pending.push_back(gsync::sendrecv_async(comm, std::span<const float>{mine[k]}, next, k, std::span<float>{got[k]}, prev, k));
      if (k == 1) pending.push_back(gsync::allreduce_async(comm, std::span<double>{sum}));
    }
    for (auto& q : pending) q.wait();
    for (int k = 0; k < 3; ++k) {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < c; ++i) wrong += got[k][i] != fwd_value(prev + 10 * k, i);
      CHECK(wrong == 0);
    }
    CHECK(sum[999] == static_cast<double>(w * (w - 1) / 2));
  });
}

TEST_CASE("sendrecv: a rank with itself copies, and wrong peers, tags and overlaps are rejected") {
  gsync_test::run_inproc(3, [](auto& comm, gsync_test::world_sync&) {
    using gsync::errc;
    using gsync_test::kind_of;
    const int r = comm.rank();
    std::vector<double> a{1.5, 2.5, 3.5}, b(3, 0.0);
    gsync::sendrecv(comm, std::span<const double>{a}, r, 7, std::span<double>{b}, r, 7);
    CHECK(b == a);
    // A self message must match the receive as a peer's would.
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, r, 7, std::span<double>{b}, r, 8); }) == errc::mismatch);
    std::vector<float> f(3);
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, r, 7, std::span<float>{f}, r, 7); }) == errc::mismatch);
    const int other = (r + 1) % 3;
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, r, 0, std::span<double>{b}, other, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, other, 0, std::span<double>{b}, r, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, 3, 0, std::span<double>{b}, other, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, other, -1, std::span<double>{b}, other, 0); }) == errc::invalid_argument);
    CHECK(kind_of([&] { gsync::sendrecv(comm, std::span<const double>{a}, other, 0, std::span<double>{a.data() + 1, 2}, other, 0); }) ==
          errc::invalid_argument);
    CHECK(kind_of([&] { (void)gsync::sendrecv_async(comm, std::span<const double>{a}, other, 0, std::span<double>{a}, other, 0); }) ==
          errc::invalid_argument);
    // Nothing was sent by the rejected calls: the pair's numbering is intact.
    gsync::sendrecv(comm, std::span<const double>{a}, (r + 1) % 3, 0, std::span<double>{b}, (r + 2) % 3, 0);
    CHECK(b == a);
  });
}

TEST_CASE("sendrecv: recv_async issued before send in a cycle times out with a message that names sendrecv") {
  gsync_test::run_tcp(3, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<float> v(16, 1.f), got(16);
    auto q = gsync::recv_async(comm, std::span<float>{got}, (r + 2) % 3, 0);
    try {
      gsync::send(comm, std::span<const float>{v}, (r + 1) % 3, 0);  // queued behind the receive
    } catch (const gsync::error&) {
    }
    const std::string m = gsync_test::message_of([&] { q.wait(); });
    CHECK(m.find("gsync::sendrecv") != std::string::npos);
    // The first rank to time out tells the others, who may then fail as peer_lost with its message.
    const gsync::errc k = gsync_test::kind_of([&] { q.wait(); });
    CHECK((k == gsync::errc::timeout || k == gsync::errc::peer_lost));
  }, gsync_test::with_timeout(2s));
}
