// The allreduce sweep: world sizes 1..8 x counts {0, 1, N-1, a few hundred with tiny segments,
// a prime near 10^6, 4M} x every dtype x every op x in place / out of place, over the in-process
// transport and over real TCP on loopback. Every rank checks that its result is bitwise identical
// to rank 0's and that its own slice matches a double-precision reference within dtype tolerance.

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "support/reference.hpp"
#include "support/world.hpp"

namespace {

using namespace gsync_test;

struct failures {
  std::mutex m;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard lk(m);
    if (list.size() < 20) list.push_back(std::move(s));
  }
};

struct count_case {
  std::size_t count;
  std::size_t segment_bytes;
};

std::size_t large_count() {
  const char* e = std::getenv("GSYNC_TEST_LARGE");
  return e ? std::stoull(e) : std::size_t{4} << 20;
}

std::vector<count_case> counts_for(int n) {
  return {{0, 512 << 10},
          {1, 4},
          {static_cast<std::size_t>(n - 1), 4},
          {257, 16},                 // many segments per chunk, chunks not divisible
          {999983, 64 << 10},        // prime near 10^6: several segments per chunk
          {large_count(), 512 << 10}};  // 4M elements, default segment size
}

// Per-rank buffers, allocated once per world and reused by every case (no page faults per case).
struct buffers {
  std::vector<std::uint64_t> a, b;
  explicit buffers(std::size_t max_bytes) : a(max_bytes / 8 + 1), b(max_bytes / 8 + 1) {}
};

// Runs one allreduce with algorithm policy Algo; in place when in and out are the same memory.
template <class Algo, class Comm, class T, class Op>
void run(Comm& comm, std::span<const T> in, std::span<T> out, Op op) {
  if (static_cast<const void*>(in.data()) == static_cast<const void*>(out.data()))
    gsync::allreduce<Algo>(comm, out, op);
  else
    gsync::allreduce<Algo>(comm, in, out, op);
}

// The algorithms added after the first two (halving_doubling, tree, direct) replace the prime near
// 10^6 with this smaller count, to keep the sweep's run time in check: still several pieces of the
// 256 KiB scratch (direct) for every dtype wider than a byte, several 64 KiB segments per tree
// half, and blocks not divisible by the world size.
constexpr std::size_t medium_count = 196613;  // a prime

template <class Algo>
constexpr bool is_newer_algo = std::is_same_v<Algo, gsync::algo::halving_doubling> ||
                               std::is_same_v<Algo, gsync::algo::tree> || std::is_same_v<Algo, gsync::algo::direct>;

// Each algorithm (ring, recursive_doubling, halving_doubling, tree, direct) runs every count
// except the 4M one, which runs with the automatic choice, in place and out of place, for every
// dtype and op (the newer algorithms with medium_count instead of 999983).
template <class T, class Op, class Algo, class Comm>
void sweep_algo(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
  constexpr bool is_auto = std::is_same_v<Algo, gsync::algo::automatic>;
  const int n = comm.size(), r = comm.rank();
  for (auto cc : counts_for(n)) {
    if (is_newer_algo<Algo> && cc.count == 999983) cc.count = medium_count;
    for (int in_place = 0; in_place < 2; ++in_place) {
      if ((cc.count == large_count()) != is_auto) continue;
      const std::size_t count = cc.count;
      std::span<T> in(reinterpret_cast<T*>(buf.a.data()), count), out(reinterpret_cast<T*>(buf.b.data()), count);
      for (std::size_t i = 0; i < count; ++i) in[i] = input<T, Op>(r, i);
      comm.set_segment_bytes(cc.segment_bytes);
      if (in_place) {
        run<Algo>(comm, std::span<const T>{in}, in, Op{});
        std::swap(in, out);
      } else {
        std::memset(static_cast<void*>(out.data()), 0xA5, count * sizeof(T));
        run<Algo>(comm, std::span<const T>{in}, out, Op{});
        // Out of place must not touch the input.
        for (std::size_t i = 0; i < count; i += 997)
          if (std::memcmp(&in[i], &(const T&)input<T, Op>(r, i), sizeof(T)) != 0) {
            fails.add(std::string(transport) + " rank " + std::to_string(r) + ": input modified");
            break;
          }
      }
      sync.outputs[r] = out.data();
      sync.bar.arrive_and_wait();
      const std::string what = std::string(transport) + " N=" + std::to_string(n) + " " +
                               std::string(gsync::name(gsync::dtype_of<T>)) + " " + std::string(Op::name) + " " + std::string(Algo::name) +
                               " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place");
      if (count && std::memcmp(out.data(), sync.outputs[0], count * sizeof(T)) != 0)
        fails.add(what + ": rank " + std::to_string(r) + " result differs from rank 0's");
      const gsync::range mine = gsync::split(count, static_cast<std::size_t>(n), static_cast<std::size_t>(r));
      std::size_t wrong = 0, first = 0;
      for (std::size_t i = mine.offset; i < mine.offset + mine.count; ++i)
        if (!check_element<T, Op>(out[i], n, i) && wrong++ == 0) first = i;
      if (wrong)
        fails.add(what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements, first at " +
                  std::to_string(first) + " = " + std::to_string(to_double(out[first])));
      sync.bar.arrive_and_wait();
    }
  }
}

template <class T, class Op, class Comm>
void sweep_one(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
  sweep_algo<T, Op, gsync::algo::ring>(comm, sync, fails, transport, buf);
  sweep_algo<T, Op, gsync::algo::recursive_doubling>(comm, sync, fails, transport, buf);
  sweep_algo<T, Op, gsync::algo::halving_doubling>(comm, sync, fails, transport, buf);
  sweep_algo<T, Op, gsync::algo::tree>(comm, sync, fails, transport, buf);
  sweep_algo<T, Op, gsync::algo::direct>(comm, sync, fails, transport, buf);
  sweep_algo<T, Op, gsync::algo::automatic>(comm, sync, fails, transport, buf);
}

template <class T, class Comm>
void sweep_ops(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
  sweep_one<T, gsync::op::sum>(comm, sync, fails, transport, buf);
  sweep_one<T, gsync::op::prod>(comm, sync, fails, transport, buf);
  sweep_one<T, gsync::op::min>(comm, sync, fails, transport, buf);
  sweep_one<T, gsync::op::max>(comm, sync, fails, transport, buf);
  sweep_one<T, gsync::op::avg>(comm, sync, fails, transport, buf);
}

template <class Comm>
void sweep_all(Comm& comm, world_sync& sync, failures& fails, const char* transport) {
  buffers buf((std::size_t{4} << 20) * 8);
  sweep_ops<float>(comm, sync, fails, transport, buf);
  sweep_ops<double>(comm, sync, fails, transport, buf);
  sweep_ops<gsync::half>(comm, sync, fails, transport, buf);
  sweep_ops<gsync::bfloat16>(comm, sync, fails, transport, buf);
  sweep_ops<std::int8_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::uint8_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::int16_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::uint16_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::int32_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::uint32_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::int64_t>(comm, sync, fails, transport, buf);
  sweep_ops<std::uint64_t>(comm, sync, fails, transport, buf);
}

gsync::config test_config() {
  gsync::config c;
  c.timeout = std::chrono::seconds(120);
  return c;
}

void run_sweep(const char* transport, int n) {
  failures fails;
  auto body = [&](auto& comm, world_sync& sync) { sweep_all(comm, sync, fails, transport); };
  if (std::string(transport) == "inproc") run_inproc(n, body, test_config());
  else run_tcp(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
}

}  // namespace

#define GSYNC_SWEEP(TRANSPORT, N) \
  TEST_CASE("allreduce sweep " TRANSPORT " world " #N) { run_sweep(TRANSPORT, N); }

GSYNC_SWEEP("inproc", 1)
GSYNC_SWEEP("inproc", 2)
GSYNC_SWEEP("inproc", 3)
GSYNC_SWEEP("inproc", 4)
GSYNC_SWEEP("inproc", 5)
GSYNC_SWEEP("inproc", 6)
GSYNC_SWEEP("inproc", 7)
GSYNC_SWEEP("inproc", 8)
GSYNC_SWEEP("tcp", 1)
GSYNC_SWEEP("tcp", 2)
GSYNC_SWEEP("tcp", 3)
GSYNC_SWEEP("tcp", 4)
GSYNC_SWEEP("tcp", 5)
GSYNC_SWEEP("tcp", 6)
GSYNC_SWEEP("tcp", 7)
GSYNC_SWEEP("tcp", 8)

// GSYNC_ALGO (config.algo) forces each algorithm by name for the automatic policy; an unknown
// name is an invalid_argument that lists the valid names.
TEST_CASE("GSYNC_ALGO forces every allreduce algorithm; unknown names list the valid ones") {
  using gsync::algo::allreduce_id;
  const std::pair<const char*, allreduce_id> forced[] = {
      {"ring", allreduce_id::ring},   {"recursive_doubling", allreduce_id::recursive_doubling},
      {"halving_doubling", allreduce_id::halving_doubling}, {"tree", allreduce_id::tree},
      {"direct", allreduce_id::direct}};
  for (const auto& [algo_name, id] : forced) {
    CAPTURE(algo_name);
    gsync::config cfg = test_config();
    cfg.algo = algo_name;
    for (int n : {3, 4}) {
      run_inproc(n, [&](auto& comm, world_sync&) {
        REQUIRE(comm.settings().algo == algo_name);
        for (std::size_t count : {std::size_t{5}, std::size_t{100000}}) {
          const auto ch = gsync::algo::choose_allreduce(count * sizeof(double), comm.size(), comm.transport().name(),
                                                        comm.settings().algo);
          REQUIRE(ch.id == id);
          REQUIRE(ch.reason() == "forced by GSYNC_ALGO=" + std::string(algo_name));
          std::vector<double> v(count, comm.rank() + 1.0);
          gsync::allreduce(comm, std::span<double>{v}, gsync::op::avg{});
          for (double x : v) REQUIRE(x == (n + 1) / 2.0);
        }
      }, cfg);
    }
  }
  gsync::config cfg = test_config();
  cfg.algo = "bogus_tree";
  run_inproc(2, [](auto& comm, world_sync&) {
    std::vector<float> v(4);
    try {
      gsync::allreduce(comm, std::span<float>{v});
      FAIL("unknown algorithm accepted");
    } catch (const gsync::error& e) {
      REQUIRE(e.code() == gsync::errc::invalid_argument);
      const std::string what = e.what();
      CHECK(what.find("bogus_tree") != std::string::npos);
      for (const char* valid : {"ring", "recursive_doubling", "halving_doubling", "tree", "direct"})
        CHECK(what.find(valid) != std::string::npos);
    }
  }, cfg);
}

// The automatic choice is the cheapest estimate, the reason names the runner-up, and every
// algorithm name round-trips through parse_allreduce and visit.
TEST_CASE("automatic allreduce choice follows the cost model") {
  using namespace gsync::algo;
  const auto m = cost_model::for_transport("tcp");
  for (int n = 1; n <= 64; ++n) {
    for (std::size_t bytes = 1; bytes <= (std::size_t{256} << 20); bytes *= 2) {
      const choice ch = choose_allreduce(bytes, n, "tcp", "");
      for (allreduce_id id : all_allreduce_ids) CHECK(estimate_us(ch.id, bytes, n, m) <= estimate_us(id, bytes, n, m));
      if (n > 1) {
        CHECK(ch.runner_up != ch.id);
        CHECK(ch.runner_up_us >= ch.cost_us);
      }
    }
  }
  const choice ch = choose_allreduce(8, 4, "tcp", "auto");
  const std::string why = ch.reason();
  CHECK(why.find(std::string(name(ch.runner_up))) != std::string::npos);
  CHECK(why.find("8 B on 4 ranks over tcp") != std::string::npos);
  for (allreduce_id id : all_allreduce_ids) {
    const auto parsed = parse_allreduce(name(id), "test");
    REQUIRE(parsed);
    CHECK(*parsed == id);
    CHECK(visit(id, [](auto a) { return std::string(decltype(a)::name); }) == name(id));
  }
  CHECK(!parse_allreduce("auto", "test"));
  CHECK(!parse_allreduce("", "test"));
}
