#pragma once
// The allreduce sweep shared by test_allreduce_sweep.cpp (in process) and
// test_allreduce_sweep_tcp.cpp (TCP on loopback): world sizes 1..8 x counts {0, 1, N-1, a few
// hundred with tiny segments, a prime near 2*10^5, 1M} x dtypes x ops x every algorithm x in place
// / out of place: in process every dtype x every op, over TCP a covering subset (every dtype, every
// op; see sweep_covering_pairs). Every rank checks that its result is bitwise identical to rank 0's and
// that its own slice matches a double-precision reference within dtype tolerance.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/errors.hpp"
#include "support/failures.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

namespace {

using namespace gsync_test;

struct count_case {
  std::size_t count;
  std::size_t segment_bytes;
};

// A size from the environment (GSYNC_TEST_MEDIUM / GSYNC_TEST_LARGE), else `dflt`. The sanitizer
// stage sets smaller ones: the same schedules and segment splits, at a fraction of the run time.
inline std::size_t env_count(const char* var, std::size_t dflt) {
  const char* e = std::getenv(var);
  return e ? std::stoull(e) : dflt;
}

// The large case runs with the automatic choice only; every algorithm runs the medium one.
inline std::size_t large_count() { return env_count("GSYNC_TEST_LARGE", std::size_t{1} << 20); }
inline std::size_t medium_count() { return env_count("GSYNC_TEST_MEDIUM", 196613); }

inline std::vector<count_case> counts_for(int n) {
  return {{0, 512 << 10},
          {1, 4},
          {static_cast<std::size_t>(n - 1), 4},
          {257, 16},                    // many segments per chunk, chunks not divisible
          {medium_count(), 16 << 10},   // a prime: several segments per chunk, blocks not divisible
          {large_count(), 128 << 10}};  // 1M elements: several 128 KiB segments per chunk at N = 8
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

// Each algorithm (ring, recursive_doubling, halving_doubling, tree, direct) runs every count
// except the large one, which runs with the automatic choice, in place and out of place, for
// every dtype and op. The medium count (a prime near 2*10^5) spans several pieces of the direct
// algorithm's 256 KiB scratch for every dtype wider than a byte and several segments per tree half.
template <class T, class Op, class Algo, class Comm>
void sweep_algo(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
  constexpr bool is_auto = std::is_same_v<Algo, gsync::algo::automatic>;
  const int n = comm.size(), r = comm.rank();
  for (const auto& cc : counts_for(n)) {
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
  sweep_algo<T, Op, gsync::algo::star>(comm, sync, fails, transport, buf);
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

// Every dtype x every operator: the in-process sweep, where the arithmetic is what is checked.
template <class Comm>
void sweep_every_pair(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
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

// dtype T with sum and with one more operator Op2.
template <class T, class Op2, class Comm>
void sweep_sum_and(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
  sweep_one<T, gsync::op::sum>(comm, sync, fails, transport, buf);
  sweep_one<T, Op2>(comm, sync, fails, transport, buf);
}

// Every dtype with sum and with one more operator (each operator meets two or three dtypes of
// different widths), and float with every operator: 27 of the 60 pairs. Used over the host
// transport, which moves bytes: what it can get wrong depends on element widths, counts and
// message boundaries (all of them here), not on the arithmetic, which the in-process sweep checks
// for every pair; and under the sanitizers (GSYNC_TEST_SANITIZE), whose reports depend on the
// schedules' index arithmetic (per element width), not on the operator.
template <class Comm>
void sweep_covering_pairs(Comm& comm, world_sync& sync, failures& fails, const char* transport, buffers& buf) {
  sweep_ops<float>(comm, sync, fails, transport, buf);
  sweep_sum_and<double, gsync::op::prod>(comm, sync, fails, transport, buf);
  sweep_sum_and<gsync::half, gsync::op::avg>(comm, sync, fails, transport, buf);
  sweep_sum_and<gsync::bfloat16, gsync::op::max>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::int8_t, gsync::op::min>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::uint8_t, gsync::op::prod>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::int16_t, gsync::op::max>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::uint16_t, gsync::op::avg>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::int32_t, gsync::op::prod>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::uint32_t, gsync::op::min>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::int64_t, gsync::op::avg>(comm, sync, fails, transport, buf);
  sweep_sum_and<std::uint64_t, gsync::op::max>(comm, sync, fails, transport, buf);
}

// The in-process sweep runs every pair (the covering pairs under the sanitizers), the host
// transport's the covering pairs.
template <bool Host, class Comm>
void sweep_all(Comm& comm, world_sync& sync, failures& fails, const char* transport) {
  buffers buf(std::max(large_count(), medium_count()) * 8);
#ifdef GSYNC_TEST_SANITIZE
  constexpr bool every_pair = false;
#else
  constexpr bool every_pair = !Host;
#endif
  if constexpr (every_pair) sweep_every_pair(comm, sync, fails, transport, buf);
  else sweep_covering_pairs(comm, sync, fails, transport, buf);
}

inline gsync::config test_config() {
  gsync::config c;
  c.timeout = std::chrono::seconds(120);
  return c;
}

// The whole sweep on an N-rank world over TCP on loopback (Tcp) or in process. A template, so
// that each test file instantiates the schedules for its transport only.
template <bool Tcp>
void run_sweep(int n) {
  failures fails;
  const char* transport = Tcp ? "tcp" : "inproc";
  auto body = [&](auto& comm, world_sync& sync) { sweep_all<Tcp>(comm, sync, fails, transport); };
  if constexpr (Tcp) run_tcp(n, body, test_config());
  else run_inproc(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
}

// A transport under the sweeps must fail loudly, or the sweeps could not fail: the ranks of a
// 2-rank world (`run(2, body, cfg)`) that report errc::mismatch when rank 0 allreduces 10 floats
// and rank 1 allreduces 11.
template <class Run>
int mismatch_reports(Run run, const gsync::config& cfg) {
  std::atomic<int> n{0};
  run(2, [&](auto& comm, world_sync& sync) {
    std::vector<float> v(comm.rank() == 0 ? 10 : 11, 1.0f);
    if (kind_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); }) == gsync::errc::mismatch) n++;
    sync.bar.arrive_and_wait();
  }, cfg);
  return n;
}

// A peer that leaves must be noticed, not waited for until the timeout: in a 2-rank world, rank 1
// returns (its communicator closes its links) while rank 0 allreduces. Returns how many ranks
// reported errc::peer_lost, and how long the world took.
template <class Run>
std::pair<int, std::chrono::steady_clock::duration> leaver_reports(Run run, const gsync::config& cfg) {
  std::atomic<int> lost{0};
  const auto t0 = std::chrono::steady_clock::now();
  run(2, [&](auto& comm, world_sync& sync) {
    sync.bar.arrive_and_wait();
    if (comm.rank() == 1) return;
    std::vector<float> v(4, 1.0f);
    if (kind_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); }) == gsync::errc::peer_lost) lost++;
  }, cfg);
  return {lost.load(), std::chrono::steady_clock::now() - t0};
}

}  // namespace
