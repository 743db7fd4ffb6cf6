// The collectives sweep: reduce_scatter, allgather, broadcast, reduce and alltoall, each with every
// algorithm that implements it plus the automatic choice, over world sizes 1..8, per-rank counts
// {0, 1, N-1, 37 with 16-byte segments, 10007 with 4 KiB segments (4099 with 1 KiB under the
// sanitizers), a large one}, in place and out
// of place, over the in-process transport, real TCP on loopback, the conformance suite's
// transport defined in tests/ (support/mailbox_transport.hpp), and gsync's mesh with a link type
// defined in tests/ (support/uds_link.hpp). reduce_scatter runs every
// dtype x every op (under the sanitizers a covering subset: every dtype, every op); reduce every op over a
// representative dtype subset; the others that subset (under the sanitizers one dtype per element width).
// Reducing results are checked element-wise against a double-precision reference; replicated
// results (allgather, broadcast) are checked bitwise equal on every rank; moved data is checked
// bitwise. The large count runs for float (sum where an operator applies), and the automatic
// choice with sum only, to keep the time down.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "support/failures.hpp"
#include "support/mailbox_transport.hpp"
#include "support/uds_world.hpp"
#if defined(GSYNC_TEST_IBV_EMU)
#include "support/verbs_world.hpp"
#endif
#include "support/reference.hpp"
#include "support/world.hpp"

namespace {

using namespace gsync_test;

struct count_case {
  std::size_t count;          // per-rank block (or buffer) elements
  std::size_t segment_bytes;  // pipelining unit for this case
  bool large;
};

// The large per-rank block: 2^18 elements (2^15 for alltoall), or GSYNC_TEST_LARGE / 4 (/ 32)
// when set: the sanitizer stage runs the same cases with smaller blocks.
std::size_t large_scaled(std::size_t dflt, std::size_t div) {
  const char* e = std::getenv("GSYNC_TEST_LARGE");
  return e ? std::max<std::size_t>(std::stoull(e) / div, 2) : dflt;
}
const std::size_t large_block = large_scaled(std::size_t{1} << 18, 4);
const std::size_t large_alltoall_block = large_scaled(std::size_t{1} << 15, 32);
// The uneven prime: 10007 elements in 4 KiB segments, or 4099 in 1 KiB segments when
// GSYNC_TEST_MEDIUM is set (the sanitizer stage): several uneven segments for every element size.
const bool medium_small = std::getenv("GSYNC_TEST_MEDIUM") != nullptr;
const std::size_t medium_block = medium_small ? 4099 : 10007;
const std::size_t medium_segment = medium_small ? 1 << 10 : 4 << 10;

std::vector<count_case> counts_for(int n, std::size_t large) {
  std::vector<count_case> v{{0, 512 << 10, false}, {1, 4, false}};
  if (n > 2) v.push_back({static_cast<std::size_t>(n - 1), 4, false});
  v.push_back({37, 16, false});        // many tiny segments
  v.push_back({medium_block, medium_segment, false});  // a prime: uneven segments
  v.push_back({large, 512 << 10, true});
  return v;
}

// Per-rank buffers, allocated once per world and reused by every case.
struct buffers {
  std::vector<std::uint64_t> a, b;
  explicit buffers(std::size_t max_bytes) : a(max_bytes / 8 + 1), b(max_bytes / 8 + 1) {}
  template <class T> T* pa() { return reinterpret_cast<T*>(a.data()); }
  template <class T> T* pb() { return reinterpret_cast<T*>(b.data()); }
};

template <class T> std::string dname() { return std::string(gsync::name(gsync::dtype_of<T>)); }

bool same_bits(const void* a, const void* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

template <class T, class Op>
bool is_input(const T& v, int r, std::size_t i) {
  const T want = input<T, Op>(r, i);
  return same_bits(&v, &want, sizeof(T));
}

struct ctx {
  world_sync& sync;
  failures& fails;
  buffers& buf;
  const char* transport;
  std::string what(int n, const std::string& coll, const std::string& algo, const std::string& rest, std::size_t c) const {
    return std::string(transport) + " N=" + std::to_string(n) + " " + coll + " " + algo + " " + rest + " c=" + std::to_string(c);
  }
};

// Counts the wrong elements of a reduced range and reports the first.
template <class T, class Op>
void check_reduced(ctx& x, const std::string& what, int r, int n, const T* got, std::size_t c, std::size_t first_index) {
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < c; ++i)
    if (!check_element<T, Op>(got[i], n, first_index + i) && wrong++ == 0) first = i;
  if (wrong)
    x.fails.add(what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements, first at " +
                std::to_string(first) + " = " + std::to_string(to_double(got[first])));
}

// ---- reduce_scatter -------------------------------------------------------------------------

template <class T, class Op, class Algo, class Comm>
void sweep_reduce_scatter(Comm& comm, ctx& x) {
  const int n = comm.size(), r = comm.rank();
  const bool small_only = !(std::is_same_v<T, float> && std::is_same_v<Op, gsync::op::sum>);
  for (const auto& cc : counts_for(n, large_block)) {
    if (cc.large && small_only) continue;
    const std::size_t c = cc.count, total = c * static_cast<std::size_t>(n);
    comm.set_segment_bytes(cc.segment_bytes);
    for (int in_place = 0; in_place < 2; ++in_place) {
      T* in = x.buf.pa<T>();
      for (std::size_t i = 0; i < total; ++i) in[i] = input<T, Op>(r, i);
      T* out = in_place ? in + static_cast<std::size_t>(r) * c : x.buf.pb<T>();
      if (!in_place) std::memset(static_cast<void*>(out), 0xA5, c * sizeof(T));
      gsync::reduce_scatter<Algo>(comm, std::span<const T>(in, total), std::span<T>(out, c), Op{});
      const std::string what = x.what(n, "reduce_scatter", std::string(Algo::name), dname<T>() + " " + std::string(Op::name) +
                                          (in_place ? " in-place" : " out-of-place"), c);
      check_reduced<T, Op>(x, what, r, n, out, c, static_cast<std::size_t>(r) * c);
      // The input is only read (in place: every block but r).
      for (std::size_t i = 0; i < total; i += 101)
        if ((!in_place || i / c != static_cast<std::size_t>(r)) && !is_input<T, Op>(in[i], r, i)) {
          x.fails.add(what + ": rank " + std::to_string(r) + " input modified at " + std::to_string(i));
          break;
        }
    }
  }
}

// ---- allgather ------------------------------------------------------------------------------

template <class T, class Algo, class Comm>
void sweep_allgather(Comm& comm, ctx& x) {
  using Op = gsync::op::sum;
  const int n = comm.size(), r = comm.rank();
  for (const auto& cc : counts_for(n, large_block)) {
    if (cc.large && !std::is_same_v<T, float>) continue;
    const std::size_t c = cc.count, total = c * static_cast<std::size_t>(n);
    comm.set_segment_bytes(cc.segment_bytes);
    for (int in_place = 0; in_place < 2; ++in_place) {
      T* out = x.buf.pb<T>();
      std::memset(static_cast<void*>(out), 0xA5, total * sizeof(T));
      T* in = in_place ? out + static_cast<std::size_t>(r) * c : x.buf.pa<T>();
      for (std::size_t i = 0; i < c; ++i) in[i] = input<T, Op>(r, i);
      gsync::allgather<Algo>(comm, std::span<const T>(in, c), std::span<T>(out, total));
      const std::string what = x.what(n, "allgather", std::string(Algo::name), dname<T>() + (in_place ? " in-place" : " out-of-place"), c);
      std::size_t wrong = 0;
      for (int b = 0; b < n; ++b)
        for (std::size_t i = 0; i < c; ++i) wrong += !is_input<T, Op>(out[static_cast<std::size_t>(b) * c + i], b, i);
      if (wrong) x.fails.add(what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements");
      x.sync.outputs[r] = out;
      x.sync.bar.arrive_and_wait();
      if (!same_bits(out, x.sync.outputs[0], total * sizeof(T)))
        x.fails.add(what + ": rank " + std::to_string(r) + " result differs from rank 0's");
      x.sync.bar.arrive_and_wait();
    }
  }
}

// ---- broadcast ------------------------------------------------------------------------------

std::vector<int> roots_for(int n) {
  if (n <= 4) {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(i);
    return v;
  }
  return {0, n / 2, n - 1};
}

template <class T, class Algo, class Comm>
void sweep_broadcast(Comm& comm, ctx& x) {
  using Op = gsync::op::sum;
  const int n = comm.size(), r = comm.rank();
  for (const auto& cc : counts_for(n, large_block)) {
    if (cc.large && !std::is_same_v<T, float>) continue;
    const std::size_t c = cc.count;
    comm.set_segment_bytes(cc.segment_bytes);
    for (int root : roots_for(n)) {
      if (cc.large && root != n - 1) continue;
      T* data = x.buf.pa<T>();
      if (r == root)
        for (std::size_t i = 0; i < c; ++i) data[i] = input<T, Op>(root, i);
      else
        std::memset(static_cast<void*>(data), 0xA5, c * sizeof(T));
      gsync::broadcast<Algo>(comm, std::span<T>(data, c), root);
      const std::string what = x.what(n, "broadcast", std::string(Algo::name), dname<T>() + " root " + std::to_string(root), c);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < c; ++i) wrong += !is_input<T, Op>(data[i], root, i);
      if (wrong) x.fails.add(what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements");
    }
  }
}

// ---- reduce ---------------------------------------------------------------------------------

template <class T, class Op, class Algo, class Comm>
void sweep_reduce(Comm& comm, ctx& x) {
  const int n = comm.size(), r = comm.rank();
  const bool small_only = !(std::is_same_v<T, float> && std::is_same_v<Op, gsync::op::sum>);
  for (const auto& cc : counts_for(n, large_block)) {
    if (cc.large && small_only) continue;
    const std::size_t c = cc.count;
    comm.set_segment_bytes(cc.segment_bytes);
    for (int root : roots_for(n)) {
      if (cc.large && root != n / 2) continue;
      for (int in_place = 0; in_place < 2; ++in_place) {
        T* in = x.buf.pa<T>();
        for (std::size_t i = 0; i < c; ++i) in[i] = input<T, Op>(r, i);
        T* out = in_place ? in : x.buf.pb<T>();
        if (!in_place) std::memset(static_cast<void*>(out), 0xA5, c * sizeof(T));
        // Non-root ranks pass an empty output out of place (it is never used there).
        const std::size_t out_n = (r == root || in_place) ? c : 0;
        gsync::reduce<Algo>(comm, std::span<const T>(in, c), std::span<T>(out, out_n), Op{}, root);
        const std::string what = x.what(n, "reduce", std::string(Algo::name), dname<T>() + " " + std::string(Op::name) +
                                            " root " + std::to_string(root) + (in_place ? " in-place" : " out-of-place"), c);
        if (r == root) check_reduced<T, Op>(x, what, r, n, out, c, 0);
        else if (!in_place) {
          const unsigned char* o = reinterpret_cast<const unsigned char*>(out);
          for (std::size_t i = 0; i < c * sizeof(T); i += 7)
            if (o[i] != 0xA5) {
              x.fails.add(what + ": rank " + std::to_string(r) + " (not root) had its output written");
              break;
            }
        }
        for (std::size_t i = 0; i < c; i += 101)
          if ((!in_place || r != root) && !is_input<T, Op>(in[i], r, i)) {
            x.fails.add(what + ": rank " + std::to_string(r) + " input modified at " + std::to_string(i));
            break;
          }
      }
    }
  }
}

// ---- alltoall -------------------------------------------------------------------------------

template <class T, class Algo, class Comm>
void sweep_alltoall(Comm& comm, ctx& x) {
  using Op = gsync::op::sum;
  const int n = comm.size(), r = comm.rank();
  for (const auto& cc : counts_for(n, large_alltoall_block)) {
    if (cc.large && !std::is_same_v<T, float>) continue;
    const std::size_t c = cc.count, total = c * static_cast<std::size_t>(n);
    comm.set_segment_bytes(cc.segment_bytes);
    T* in = x.buf.pa<T>();
    T* out = x.buf.pb<T>();
    for (std::size_t i = 0; i < total; ++i) in[i] = input<T, Op>(r, i);
    std::memset(static_cast<void*>(out), 0xA5, total * sizeof(T));
    gsync::alltoall<Algo>(comm, std::span<const T>(in, total), std::span<T>(out, total));
    const std::string what = x.what(n, "alltoall", std::string(Algo::name), dname<T>(), c);
    std::size_t wrong = 0;
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < c; ++i)
        wrong += !is_input<T, Op>(out[static_cast<std::size_t>(j) * c + i], j, static_cast<std::size_t>(r) * c + i);
    if (wrong) x.fails.add(what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements");
  }
}

// ---- drivers --------------------------------------------------------------------------------

// The automatic choice is checked with sum only: it dispatches to the same schedules, which every
// op already runs explicitly (this keeps the whole sweep short: benchmarks/results/from_code_comments.md).
template <class T, class Op, class Comm>
void reduce_scatter_algos(Comm& comm, ctx& x) {
  sweep_reduce_scatter<T, Op, gsync::algo::ring>(comm, x);
  // Dissemination (forced: large counts walk the scratch in column pieces) with every op on float, and with
  // sum on every type (plus through the automatic choice, which picks it for small counts).
  if constexpr (std::is_same_v<T, float> || std::is_same_v<Op, gsync::op::sum>)
    sweep_reduce_scatter<T, Op, gsync::algo::dissemination>(comm, x);
  if constexpr (std::is_same_v<Op, gsync::op::sum>) sweep_reduce_scatter<T, Op, gsync::algo::automatic>(comm, x);
}

template <class T, class Comm>
void reduce_scatter_ops(Comm& comm, ctx& x) {
  reduce_scatter_algos<T, gsync::op::sum>(comm, x);
  reduce_scatter_algos<T, gsync::op::prod>(comm, x);
  reduce_scatter_algos<T, gsync::op::min>(comm, x);
  reduce_scatter_algos<T, gsync::op::max>(comm, x);
  reduce_scatter_algos<T, gsync::op::avg>(comm, x);
}

template <class T, class Op2, class Comm>
void reduce_scatter_sum_and(Comm& comm, ctx& x) {
  reduce_scatter_algos<T, gsync::op::sum>(comm, x);
  reduce_scatter_algos<T, Op2>(comm, x);
}

template <class T, class Op, class Comm>
void reduce_algos(Comm& comm, ctx& x) {
  sweep_reduce<T, Op, gsync::algo::ring>(comm, x);
  sweep_reduce<T, Op, gsync::algo::binomial_tree>(comm, x);
  if constexpr (std::is_same_v<Op, gsync::op::sum>) sweep_reduce<T, Op, gsync::algo::automatic>(comm, x);
}

// Every collective for dtype T from the representative subset.
template <class T, class Comm>
void subset_dtype(Comm& comm, ctx& x) {
  sweep_allgather<T, gsync::algo::ring>(comm, x);
  sweep_allgather<T, gsync::algo::dissemination>(comm, x);
  sweep_allgather<T, gsync::algo::automatic>(comm, x);
  sweep_broadcast<T, gsync::algo::ring>(comm, x);
  sweep_broadcast<T, gsync::algo::binomial_tree>(comm, x);
  sweep_broadcast<T, gsync::algo::automatic>(comm, x);
  reduce_algos<T, gsync::op::sum>(comm, x);
  reduce_algos<T, gsync::op::prod>(comm, x);
  reduce_algos<T, gsync::op::min>(comm, x);
  reduce_algos<T, gsync::op::max>(comm, x);
  reduce_algos<T, gsync::op::avg>(comm, x);
  sweep_alltoall<T, gsync::algo::pairwise>(comm, x);
  sweep_alltoall<T, gsync::algo::automatic>(comm, x);
}

template <class Comm>
void sweep_all(Comm& comm, world_sync& sync, failures& fails, const char* transport) {
  buffers buf(large_block * static_cast<std::size_t>(comm.size()) * sizeof(float) + (1 << 20));
  ctx x{sync, fails, buf, transport};
#ifndef GSYNC_TEST_SANITIZE
  reduce_scatter_ops<float>(comm, x);
  reduce_scatter_ops<double>(comm, x);
  reduce_scatter_ops<gsync::half>(comm, x);
  reduce_scatter_ops<gsync::bfloat16>(comm, x);
  reduce_scatter_ops<std::int8_t>(comm, x);
  reduce_scatter_ops<std::uint8_t>(comm, x);
  reduce_scatter_ops<std::int16_t>(comm, x);
  reduce_scatter_ops<std::uint16_t>(comm, x);
  reduce_scatter_ops<std::int32_t>(comm, x);
  reduce_scatter_ops<std::uint32_t>(comm, x);
  reduce_scatter_ops<std::int64_t>(comm, x);
  reduce_scatter_ops<std::uint64_t>(comm, x);
#else
  // Under the sanitizers: every dtype with sum and one more operator, float with every operator
  // (what they report depends on element widths and index arithmetic, not on the operator).
  reduce_scatter_ops<float>(comm, x);
  reduce_scatter_sum_and<double, gsync::op::prod>(comm, x);
  reduce_scatter_sum_and<gsync::half, gsync::op::avg>(comm, x);
  reduce_scatter_sum_and<gsync::bfloat16, gsync::op::max>(comm, x);
  reduce_scatter_sum_and<std::int8_t, gsync::op::min>(comm, x);
  reduce_scatter_sum_and<std::uint8_t, gsync::op::prod>(comm, x);
  reduce_scatter_sum_and<std::int16_t, gsync::op::max>(comm, x);
  reduce_scatter_sum_and<std::uint16_t, gsync::op::avg>(comm, x);
  reduce_scatter_sum_and<std::int32_t, gsync::op::prod>(comm, x);
  reduce_scatter_sum_and<std::uint32_t, gsync::op::min>(comm, x);
  reduce_scatter_sum_and<std::int64_t, gsync::op::avg>(comm, x);
  reduce_scatter_sum_and<std::uint64_t, gsync::op::max>(comm, x);
#endif
  subset_dtype<float>(comm, x);
  subset_dtype<gsync::half>(comm, x);
  subset_dtype<std::int8_t>(comm, x);
  subset_dtype<std::uint64_t>(comm, x);
#ifndef GSYNC_TEST_SANITIZE
  // Widths the four above already have (8 and 2 bytes): left out under the sanitizers.
  subset_dtype<double>(comm, x);
  subset_dtype<gsync::bfloat16>(comm, x);
#endif
  gsync::barrier(comm);
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
  else if (std::string(transport) == "mailbox") run_mailbox(n, body, test_config());  // the conformance suite's transport
  else if (std::string(transport) == "uds") run_uds(n, body, test_config());  // a mesh whose first link is defined in tests/
#if defined(GSYNC_TEST_IBV_EMU)
  else if (std::string(transport) == "verbs") run_verbs(n, body, test_config());  // two hosts, verbs between them (stand-in libibverbs)
#endif
  else run_tcp(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
}

}  // namespace

#define GSYNC_COLL_SWEEP(TRANSPORT, N) \
  TEST_CASE("collectives sweep " TRANSPORT " world " #N) { run_sweep(TRANSPORT, N); }

// The verbs link's test program compiles this file again for its own transport only.
#if defined(GSYNC_TEST_VERBS_ONLY)
GSYNC_COLL_SWEEP("verbs", 1)
GSYNC_COLL_SWEEP("verbs", 2)
GSYNC_COLL_SWEEP("verbs", 3)
GSYNC_COLL_SWEEP("verbs", 4)
GSYNC_COLL_SWEEP("verbs", 5)
GSYNC_COLL_SWEEP("verbs", 6)
GSYNC_COLL_SWEEP("verbs", 7)
GSYNC_COLL_SWEEP("verbs", 8)
#else
GSYNC_COLL_SWEEP("inproc", 1)
GSYNC_COLL_SWEEP("inproc", 2)
GSYNC_COLL_SWEEP("inproc", 3)
GSYNC_COLL_SWEEP("inproc", 4)
GSYNC_COLL_SWEEP("inproc", 5)
GSYNC_COLL_SWEEP("inproc", 6)
GSYNC_COLL_SWEEP("inproc", 7)
GSYNC_COLL_SWEEP("inproc", 8)
GSYNC_COLL_SWEEP("tcp", 1)
GSYNC_COLL_SWEEP("tcp", 2)
GSYNC_COLL_SWEEP("tcp", 3)
GSYNC_COLL_SWEEP("tcp", 4)
GSYNC_COLL_SWEEP("tcp", 5)
GSYNC_COLL_SWEEP("tcp", 6)
GSYNC_COLL_SWEEP("tcp", 7)
GSYNC_COLL_SWEEP("tcp", 8)
GSYNC_COLL_SWEEP("uds", 1)
GSYNC_COLL_SWEEP("uds", 2)
GSYNC_COLL_SWEEP("uds", 3)
GSYNC_COLL_SWEEP("uds", 4)
GSYNC_COLL_SWEEP("uds", 5)
GSYNC_COLL_SWEEP("uds", 6)
GSYNC_COLL_SWEEP("uds", 7)
GSYNC_COLL_SWEEP("uds", 8)
GSYNC_COLL_SWEEP("mailbox", 1)
GSYNC_COLL_SWEEP("mailbox", 2)
GSYNC_COLL_SWEEP("mailbox", 3)
GSYNC_COLL_SWEEP("mailbox", 4)
GSYNC_COLL_SWEEP("mailbox", 5)
GSYNC_COLL_SWEEP("mailbox", 6)
GSYNC_COLL_SWEEP("mailbox", 7)
GSYNC_COLL_SWEEP("mailbox", 8)
#endif
