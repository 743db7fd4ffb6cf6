// The shared-memory path of the host transport: chosen for same-host ranks, correct under ring
// wrap-around and flow control, mixed with TCP across hosts, no segment left in /dev/shm, and a
// rank that leaves is reported (peer_lost) to the ranks waiting for it.

#include <doctest/doctest.h>
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "support/env.hpp"
#include "gsync/transport/shm.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

// Names in /dev/shm that this process created.
std::vector<std::string> my_segments() {
  std::vector<std::string> v;
  const std::string prefix = "gsync-" + std::to_string(::getpid()) + "-";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (auto* e = ::readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) v.emplace_back(e->d_name);
    ::closedir(d);
  }
  return v;
}

gsync::config cfg_with_timeout(std::chrono::milliseconds t) {
  gsync::config c;
  c.timeout = t;
  return c;
}

// cfg_with_timeout(t) with shared-memory rings of `ring_bytes`.
gsync::config cfg_with_rings(std::chrono::milliseconds t, std::size_t ring_bytes) {
  gsync::config c = cfg_with_timeout(t);
  c.transport.shm_ring_bytes = ring_bytes;
  return c;
}

// Allreduce of `count` elements with algorithm Algo; checks every element against the double
// reference and that every rank holds the same bytes. Returns an error text, empty if all good.
template <class T, class Op, class Algo, class Comm>
std::string check_allreduce(Comm& comm, gsync_test::world_sync& sync, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  gsync::allreduce<Algo>(comm, std::span<const T>{in}, std::span<T>{out}, Op{});
  std::string err;
  for (std::size_t i = 0; i < count; ++i)
    if (!gsync_test::check_element<T, Op>(out[i], n, i)) {
      err = "element " + std::to_string(i) + " wrong";
      break;
    }
  sync.outputs[r] = out.data();
  sync.bar.arrive_and_wait();
  if (err.empty() && count && std::memcmp(out.data(), sync.outputs[0], count * sizeof(T)) != 0) err = "differs from rank 0";
  sync.bar.arrive_and_wait();
  return err;
}

struct errors {
  std::mutex m;
  std::vector<std::string> list;
  void add(const std::string& what, const std::string& e) {
    if (e.empty()) return;
    std::lock_guard lk(m);
    list.push_back(what + ": " + e);
  }
  void report() {
    for (auto& s : list) FAIL_CHECK(s);
  }
};

// The largest count: a prime near 10^6 in 512 KiB segments, or GSYNC_TEST_LARGE elements (the
// sanitizer stage sets 32768) in 16 KiB segments; eight or more segments a message either way.
const char* const large_env = std::getenv("GSYNC_TEST_LARGE");
const std::size_t big_count = large_env ? std::stoull(large_env) : 999983;
const std::size_t big_segment = large_env ? 16 << 10 : 512 << 10;

template <class Comm>
void mixed_workload(Comm& comm, gsync_test::world_sync& sync, errors& errs) {
  const std::string w = "rank " + std::to_string(comm.rank()) + " N=" + std::to_string(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{257}, big_count}) {
    comm.set_segment_bytes(count == 257 ? 16 : big_segment);
    errs.add(w + " float sum ring " + std::to_string(count), check_allreduce<float, gsync::op::sum, gsync::algo::ring>(comm, sync, count));
    errs.add(w + " half avg ring " + std::to_string(count), check_allreduce<gsync::half, gsync::op::avg, gsync::algo::ring>(comm, sync, count));
    errs.add(w + " int64 max rd " + std::to_string(count),
             check_allreduce<std::int64_t, gsync::op::max, gsync::algo::recursive_doubling>(comm, sync, count));
    errs.add(w + " double prod auto " + std::to_string(count),
             check_allreduce<double, gsync::op::prod, gsync::algo::automatic>(comm, sync, count));
  }
}

}  // namespace

TEST_CASE("shm: same-host ranks use shared memory, results correct, segments unlinked") {
  for (int n : {2, 3, 4, 8}) {
    errors errs;
    std::atomic<int> named_shm{0};
    gsync_test::run_shm(n, [&](auto& comm, gsync_test::world_sync& sync) {
      if (comm.transport().name() == "shm") named_shm++;
      CHECK(comm.transport().local_size() == n);
      // Setup is over: every segment's name is gone already (nothing to leak if killed now).
      sync.bar.arrive_and_wait();
      if (comm.rank() == 0) CHECK(my_segments().empty());
      mixed_workload(comm, sync, errs);
    }, cfg_with_timeout(60s));
    errs.report();
    CHECK(named_shm == n);
  }
  CHECK(my_segments().empty());
}

TEST_CASE("shm: tiny rings force wrap-around and flow control") {
  errors errs;
  gsync_test::run_shm(3, [&](auto& comm, gsync_test::world_sync& sync) { mixed_workload(comm, sync, errs); }, cfg_with_rings(60s, 4096));
  errs.report();
}

TEST_CASE("shm: a bad ring size is an invalid_argument error, from GSYNC_SHM_BYTES or from the options") {
  {
    gsync_test::scoped_env bad("GSYNC_SHM_BYTES", "100");
    CHECK_THROWS_WITH_AS(gsync::config::from_env(), doctest::Contains("GSYNC_SHM_BYTES"), gsync::error);
  }
  CHECK_THROWS_WITH_AS(gsync_test::run_shm(2, [](auto&, gsync_test::world_sync&) {}, cfg_with_rings(10s, 100)),
                       doctest::Contains("shm_ring_bytes"), std::runtime_error);
}

TEST_CASE("shm: mixed job, shared memory inside a host and TCP across") {
  for (const auto& shape : {std::pair{4, 2}, std::pair{5, 2}, std::pair{6, 3}}) {
    const int n = shape.first, per = shape.second;  // (not a structured binding: clang 14 cannot capture those)
    errors errs;
    std::atomic<int> mixed{0};
    gsync_test::run_mixed(n, per, [&](auto& comm, gsync_test::world_sync& sync) {
      const bool alone = comm.rank() / per == (n - 1) / per && n % per == 1;
      if (comm.transport().name() == (alone ? "tcp" : "shm+tcp")) mixed++;
      mixed_workload(comm, sync, errs);
    }, cfg_with_timeout(60s));
    errs.report();
    CHECK(mixed == n);
  }
}

TEST_CASE("shm: host_options::shm = false (GSYNC_SHM_DISABLE=1) keeps same-host ranks on TCP, and explicit options win over the environment") {
  {
    gsync_test::scoped_env off("GSYNC_SHM_DISABLE", "1");
    CHECK_FALSE(gsync::config::from_env().transport.shm);
    // Options passed explicitly are used as given: this job keeps shared memory.
    std::atomic<int> shm{0};
    gsync_test::run_shm(2, [&](auto& comm, gsync_test::world_sync&) {
      if (comm.transport().name() == "shm") shm++;
    }, cfg_with_timeout(30s));
    CHECK(shm == 2);
  }
  std::atomic<int> tcp{0};
  errors errs;
  gsync::config cfg = cfg_with_timeout(30s);
  cfg.transport.shm = false;
  gsync_test::run_shm(3, [&](auto& comm, gsync_test::world_sync& sync) {
    if (comm.transport().name() == "tcp") tcp++;
    errs.add("disabled", check_allreduce<float, gsync::op::sum, gsync::algo::ring>(comm, sync, 1000));
  }, cfg);
  errs.report();
  CHECK(tcp == 3);
}

TEST_CASE("tcp: tcp_yield_us (GSYNC_TCP_YIELD_US, yield-polling waits for small messages) keeps results exact") {
  {
    gsync_test::scoped_env y("GSYNC_TCP_YIELD_US", "1000");
    CHECK(gsync::config::from_env().transport.tcp_yield_us == 1000);
  }
  gsync::config cfg = cfg_with_timeout(30s);
  cfg.transport.shm = false;
  cfg.transport.tcp_yield_us = 1000;
  errors errs;
  std::atomic<int> tcp{0};
  gsync_test::run_shm(3, [&](auto& comm, gsync_test::world_sync& sync) {
    if (comm.transport().name() == "tcp") tcp++;
    // 0 and 200 floats: every wait is small enough to yield; 1 << 15 floats: the waits sleep.
    for (std::size_t count : {std::size_t{0}, std::size_t{200}, std::size_t{1} << 15}) {
      errs.add("yield rd", check_allreduce<float, gsync::op::sum, gsync::algo::recursive_doubling>(comm, sync, count));
      errs.add("yield ring", check_allreduce<float, gsync::op::max, gsync::algo::ring>(comm, sync, count));
    }
    gsync::barrier(comm);
  }, cfg);
  errs.report();
  CHECK(tcp == 3);
}

TEST_CASE("shm: a rank that leaves is reported as peer_lost to the ranks waiting for it") {
  for (int leaver : {0, 2}) {
    std::atomic<int> lost{0}, other{0};
    std::atomic<long long> worst_ms{0};
    gsync_test::run_shm(4, [&](auto& comm, gsync_test::world_sync&) {
      std::vector<float> v(1 << 16, 1.0f);
      if (comm.rank() == leaver) {
        gsync::allreduce(comm, std::span<float>{v});
        return;  // the communicator is destroyed: the rank is gone
      }
      const auto t0 = std::chrono::steady_clock::now();
      try {
        // The first allreduce may fail too: a survivor that left it early (its data sent) can fail
        // in the next one before its last bytes to a slower rank have left its queue.
        for (int i = 0; i < 1001; ++i) gsync::allreduce(comm, std::span<float>{v});
        other++;
      } catch (const gsync::error& e) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        long long prev = worst_ms.load();
        while (ms > prev && !worst_ms.compare_exchange_weak(prev, ms)) {}
        (e.kind() == gsync::errc::peer_lost ? lost : other)++;
      }
    }, cfg_with_timeout(60s));
    CHECK(lost == 3);
    CHECK(other == 0);
    CHECK(worst_ms.load() < 5000);
  }
}

TEST_CASE("shm: a collective nobody else joins times out at the deadline") {
  gsync_test::run_shm(2, [](auto& comm, gsync_test::world_sync& sync) {
    if (comm.rank() == 1) {
      std::vector<float> v(8);
      const auto t0 = std::chrono::steady_clock::now();
      CHECK_THROWS_AS(gsync::allreduce(comm, std::span<float>{v}), gsync::error);
      const auto dt = std::chrono::steady_clock::now() - t0;
      CHECK(dt >= 350ms);
      CHECK(dt < 3s);
    }
    sync.bar.arrive_and_wait();
  }, cfg_with_timeout(400ms));
}

TEST_CASE("shm: messages of every small size share the ring with their headers, also across the wrap") {
  // A 4 KiB ring: payloads of 0..100 bytes start right after their stamp and 48-byte header (up to
  // 8 bytes share its cache line), messages start 64-byte aligned, and the sequence wraps the ring many
  // times at shifting offsets. Point-to-point bytes, then allreduces whose receives reduce from
  // the ring in place (8-byte and 2-byte elements).
  errors errs;
  gsync_test::run_shm(3, [&](auto& comm, gsync_test::world_sync& sync) {
    const int r = comm.rank(), n = comm.size();
    const int to = (r + 1) % n, from = (r + n - 1) % n;
    std::string err;
    for (int rep = 0; rep < 3 && err.empty(); ++rep)
      for (std::size_t len = 0; len <= 100 && err.empty(); ++len) {
        std::vector<std::uint8_t> out(len), in(len, 0xEE);
        for (std::size_t i = 0; i < len; ++i) out[i] = static_cast<std::uint8_t>(r * 31 + len * 7 + i + rep);
        gsync::send(comm, std::span<const std::uint8_t>{out}, to, 5);
        gsync::recv(comm, std::span<std::uint8_t>{in}, from, 5);
        for (std::size_t i = 0; i < len; ++i)
          if (in[i] != static_cast<std::uint8_t>(from * 31 + len * 7 + i + rep)) {
            err = "p2p " + std::to_string(len) + " B: byte " + std::to_string(i) + " wrong";
            break;
          }
      }
    errs.add("rank " + std::to_string(r), err);
    for (std::size_t count = 1; count <= 40; ++count) {
      errs.add("double sum rd " + std::to_string(count),
               check_allreduce<double, gsync::op::sum, gsync::algo::recursive_doubling>(comm, sync, count));
      errs.add("half sum star " + std::to_string(count),
               check_allreduce<gsync::half, gsync::op::sum, gsync::algo::star>(comm, sync, count));
    }
  }, cfg_with_rings(60s, 4096));
  errs.report();
}

TEST_CASE("shm: waiters that sleep at every wait are woken, with membarrier fences and with full ones") {
  // GSYNC_SPIN_US=0 and GSYNC_YIELD_US=0: every wait that finds nothing goes to sleep on its
  // doorbell at once, and the rank that sends later must wake it. A lost wake-up would show as a
  // sleep that ran its full length (100 ms) with the data already there (shm_late_wakeups).
  for (const char* mb : {"1", "0"}) {
    gsync::config cfg = cfg_with_timeout(60s);
    cfg.transport.spin_us = 0;
    cfg.transport.yield_us = 0;
    cfg.transport.shm_light = std::string(mb) == "1";
    const bool expect_light = std::string(mb) == "1" && gsync::transport::shm::asymmetric_fences_available() &&
                              std::thread::hardware_concurrency() >= 2;
    errors errs;
    std::atomic<int> mode_ok{0};
    std::atomic<std::uint64_t> late{0};
    gsync_test::run_shm(2, [&](auto& comm, gsync_test::world_sync&) {
      if (comm.transport().shm_asymmetric_fences() == expect_light) mode_ok++;
      const int r = comm.rank(), peer = 1 - r;
      for (int i = 0; i < 1500; ++i) {
        if (r == i % 2) {  // the other rank arrives first and sleeps
          const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(i % 40);
          while (std::chrono::steady_clock::now() < until) {
          }
        }
        float v = static_cast<float>(r + i), sum = 0;
        gsync::allreduce(comm, std::span<const float>(&v, 1), std::span<float>(&sum, 1), gsync::op::sum{});
        if (sum != static_cast<float>(2 * i + 1)) errs.add("membarrier=" + std::string(mb), "allreduce " + std::to_string(i) + " gave " + std::to_string(sum));
        std::int32_t out = i * 2 + r, in = -1;
        if (r == 0) {
          gsync::send(comm, std::span<const std::int32_t>(&out, 1), peer, 3);
          gsync::recv(comm, std::span<std::int32_t>(&in, 1), peer, 4);
        } else {
          gsync::recv(comm, std::span<std::int32_t>(&in, 1), peer, 3);
          gsync::send(comm, std::span<const std::int32_t>(&out, 1), peer, 4);
        }
        if (in != i * 2 + peer) errs.add("membarrier=" + std::string(mb), "message " + std::to_string(i) + " was " + std::to_string(in));
      }
      late += comm.transport().shm_late_wakeups();
    }, cfg);
    errs.report();
    CHECK_MESSAGE(mode_ok == 2, "GSYNC_SHM_MEMBARRIER=" << mb);
    CHECK_MESSAGE(late == 0, "GSYNC_SHM_MEMBARRIER=" << mb);
  }
}

TEST_CASE("shm: payload bytes left in the ring that look like a stamp do not pass for a message") {
  // A 4 KiB ring, fresh. Message A (3976 bytes) fills ring offsets 56..4032 with words that hold
  // what a stamp without a key (position + 1) of the next lap would be at their position; two
  // empty messages follow (at 4032 and 4096), so message D starts at 4160 (offset 64, over A's
  // payload). The receiver waits for D while the sender sleeps: a reader fooled by A's bytes
  // would take them for D's header (a mismatch error) or return them as D's payload.
  errors errs;
  gsync_test::run_shm(2, [&](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::string err;
    if (r == 1 && comm.transport().shm_read_position(0) != 0) err = "the ring from rank 0 is not fresh: the layout below assumes it";
    static_assert(gsync::transport::shm::header_slot == 56, "the layout below assumes a 56-byte stamp + header");
    std::vector<std::uint64_t> a(3976 / 8), d(2), got_a(a.size()), got_d(2, 0);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = 56 + 8 * i + 4096 + 1;
    d = {0x1122334455667788ull, 42};
    const std::span<const std::uint64_t> none;
    try {
      if (r == 0) {
        gsync::send(comm, std::span<const std::uint64_t>{a}, 1, 7);
        gsync::send(comm, none, 1, 7);
        gsync::send(comm, none, 1, 7);
        std::this_thread::sleep_for(50ms);
        gsync::send(comm, std::span<const std::uint64_t>{d}, 1, 8);
      } else {
        std::span<std::uint64_t> empty;
        gsync::recv(comm, std::span<std::uint64_t>{got_a}, 0, 7);
        gsync::recv(comm, empty, 0, 7);
        gsync::recv(comm, empty, 0, 7);
        if (comm.transport().shm_read_position(0) != 4152) err = "ring position " + std::to_string(comm.transport().shm_read_position(0)) + ", expected 4152";
        gsync::recv(comm, std::span<std::uint64_t>{got_d}, 0, 8);
        if (got_a != a) err = "message A corrupted";
        if (got_d != d) err = "message D read as " + std::to_string(got_d[0]) + ", " + std::to_string(got_d[1]);
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
    errs.add("rank " + std::to_string(r), err);
  }, cfg_with_rings(10s, 4096));
  errs.report();
}
