// gather, scatter and the v-collectives (allgatherv, reduce_scatterv, alltoallv): world sizes
// 1..8, every root of the rooted ones (up to 5 ranks; three roots beyond), count patterns with
// empty blocks, single elements, primes and a block larger than the scratch's piece width (so
// reduce_scatterv works through several pieces), 16-byte segments (many segments per block), in
// place and out, synchronous and _async, over the in-process transport and, for a subset, TCP,
// shared memory and both mixed. reduce_scatterv runs every dtype x every operator against the
// double-precision reference (a covering subset under the sanitizers); moved data is checked
// bitwise. Then the argument checks, the algorithm overrides, and a disagreeing alltoallv pair.

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gsync/gsync.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

using namespace gsync_test;
using counts_t = std::vector<std::size_t>;

const bool sanitizing = std::getenv("GSYNC_TEST_MEDIUM") != nullptr;

gsync::config small_segments() {
  gsync::config c = with_timeout(60000ms);
  c.segment_bytes = 16;
  return c;
}

// Runs f over n ranks in process; for the sizes in `wire`, over TCP, shared memory and two hosts too.
template <class F>
void on_worlds(int n, F f, bool wire) {
  run_inproc(n, f, small_segments());
  if (!wire) return;
  run_tcp(n, f, small_segments());
  run_shm(n, f, small_segments());
  if (n >= 3) run_mixed(n, 2, f, small_segments());
}
bool wire_size(int n) { return n == 3 || n == 5; }

// Count patterns for n ranks: all empty; uneven with empty blocks; ones and one prime; a block
// wider than the scratch's piece (256 KiB / (n-2) elements at most) next to empty ones.
std::vector<counts_t> patterns(int n) {
  std::vector<counts_t> v;
  const auto N = static_cast<std::size_t>(n);
  v.push_back(counts_t(N, 0));
  counts_t a(N), b(N, 1), c(N, 0);
  for (std::size_t i = 0; i < N; ++i) a[i] = (i * 7 + 3) % 4 == 0 ? 0 : (i * 37 + 11) % 101;
  b[N - 1] = sanitizing ? 1009 : 10007;
  c[N / 2] = sanitizing ? 20011 : 70001;
  v.push_back(a);
  v.push_back(b);
  v.push_back(c);
  return v;
}

std::size_t offset_of(const counts_t& c, int b) {
  std::size_t o = 0;
  for (int i = 0; i < b; ++i) o += c[static_cast<std::size_t>(i)];
  return o;
}
std::size_t sum(const counts_t& c) { return offset_of(c, static_cast<int>(c.size())); }

template <class T>
bool same(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Rank r's element i of what it contributes (not reduced).
template <class T>
T item(int r, std::size_t i) {
  return input<T, gsync::op::sum>(r, i);
}

std::vector<int> roots_of(int n) {
  if (n <= 5) {
    std::vector<int> v;
    for (int r = 0; r < n; ++r) v.push_back(r);
    return v;
  }
  return {0, n / 2, n - 1};
}

}  // namespace

TEST_CASE("gather and scatter: every root, world sizes 1..8, in place and out, sync and async") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    on_worlds(n, [n](auto& comm, world_sync&) {
      const int r = comm.rank();
      for (std::size_t c : {std::size_t{0}, std::size_t{1}, std::size_t{37}, static_cast<std::size_t>(sanitizing ? 1009 : 10007)})
        for (int root : roots_of(n))
          for (int mode = 0; mode < 3; ++mode) {  // 0 out of place, 1 in place, 2 async
            CAPTURE(c);
            CAPTURE(root);
            CAPTURE(mode);
            const auto N = static_cast<std::size_t>(n);
            // gather
            std::vector<double> in(c), out(r == root ? N * c : 0, -1.0);
            for (std::size_t i = 0; i < c; ++i) in[i] = item<double>(r, i);
            if (mode == 1 && r == root) {
              std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(root) * c));
              gsync::gather(comm, std::span<const double>{out}.subspan(static_cast<std::size_t>(root) * c, c), std::span<double>{out}, root);
            } else if (mode == 2) {
              gsync::gather_async(comm, std::span<const double>{in}, std::span<double>{out}, root).wait();
            } else {
              gsync::gather(comm, std::span<const double>{in}, std::span<double>{out}, root);
            }
            std::size_t wrong = 0;
            if (r == root)
              for (int b = 0; b < n; ++b)
                for (std::size_t i = 0; i < c; ++i) wrong += !same(out[static_cast<std::size_t>(b) * c + i], item<double>(b, i));
            CHECK(wrong == 0);
            // scatter
            std::vector<float> sin(r == root ? N * c : 0), sout(c, -1.0f);
            for (std::size_t j = 0; j < sin.size(); ++j) sin[j] = item<float>(root, j);
            if (mode == 1 && r == root) {
              gsync::scatter(comm, std::span<const float>{sin}, std::span<float>{sin}.subspan(static_cast<std::size_t>(root) * c, c), root);
              sout.assign(sin.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(root) * c),
                          sin.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(root + 1) * c));
            } else if (mode == 2) {
              gsync::scatter_async(comm, std::span<const float>{sin}, std::span<float>{sout}, root).wait();
            } else {
              gsync::scatter(comm, std::span<const float>{sin}, std::span<float>{sout}, root);
            }
            for (std::size_t i = 0; i < c; ++i) wrong += !same(sout[i], item<float>(root, static_cast<std::size_t>(r) * c + i));
            CHECK(wrong == 0);
          }
    }, wire_size(n));
  }
}

TEST_CASE("allgatherv: uneven and empty blocks, world sizes 1..8, in place and out, sync and async") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    on_worlds(n, [n](auto& comm, world_sync&) {
      const int r = comm.rank();
      for (const counts_t& counts : patterns(n))
        for (int mode = 0; mode < 3; ++mode) {
          CAPTURE(mode);
          const std::size_t mine = counts[static_cast<std::size_t>(r)], at = offset_of(counts, r);
          std::vector<gsync::half> in(mine), out(sum(counts), gsync::half(-1.0f));
          for (std::size_t i = 0; i < mine; ++i) in[i] = item<gsync::half>(r, i);
          if (mode == 1) {
            std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
            gsync::allgatherv(comm, std::span<const gsync::half>{out}.subspan(at, mine), std::span<gsync::half>{out}, counts);
          } else if (mode == 2) {
            auto req = gsync::allgatherv_async(comm, std::span<const gsync::half>{in}, std::span<gsync::half>{out}, counts_t(counts));
            req.wait();  // the counts were a temporary: the request holds its own copy
          } else {
            gsync::allgatherv<gsync::algo::ring>(comm, std::span<const gsync::half>{in}, std::span<gsync::half>{out}, counts);
          }
          std::size_t wrong = 0;
          for (int b = 0; b < n; ++b)
            for (std::size_t i = 0; i < counts[static_cast<std::size_t>(b)]; ++i)
              wrong += !same(out[offset_of(counts, b) + i], item<gsync::half>(b, i));
          CHECK(wrong == 0);
        }
    }, wire_size(n));
  }
}

TEST_CASE("reduce_scatterv: every dtype x every operator against the double reference, world sizes 1..8, in place and out") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    on_worlds(n, [n](auto& comm, world_sync&) {
      const int r = comm.rank();
      const auto pats = patterns(n);
      for (std::size_t p = 0; p < pats.size(); ++p) {
        const counts_t& counts = pats[p];
        CAPTURE(p);
        for_each_dtype([&]<class T>() {
          for_each_op([&]<class Op>() {
            // Under the sanitizers and for the widest pattern, one operator per dtype.
            if ((sanitizing || p == 3) && !std::is_same_v<Op, gsync::op::sum>) return;
            CAPTURE(gsync::name(gsync::dtype_of<T>));
            CAPTURE(std::string(Op::name));
            const std::size_t total = sum(counts), mine = counts[static_cast<std::size_t>(r)], at = offset_of(counts, r);
            std::vector<T> in(total), out(mine);
            for (std::size_t j = 0; j < total; ++j) in[j] = input<T, Op>(r, j);
            const bool in_place = (p + static_cast<std::size_t>(n)) % 2 == 1;
            if (in_place) {
              gsync::reduce_scatterv(comm, std::span<const T>{in}, std::span<T>{in}.subspan(at, mine), counts, Op{});
              std::copy(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + mine), out.begin());
            } else {
              gsync::reduce_scatterv(comm, std::span<const T>{in}, std::span<T>{out}, counts, Op{});
            }
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < mine; ++i) wrong += !check_element<T, Op>(out[i], n, at + i);
            CHECK(wrong == 0);
          });
        });
      }
    }, wire_size(n));
  }
}

namespace {
// Elements rank i sends rank j in pattern p: empty pairs, uneven ones, one wide pair.
std::size_t pair_count(int p, int i, int j, int n) {
  if (p == 0) return 0;
  if (p == 1) return (i * 3 + j * 5) % 7 == 0 ? 0 : static_cast<std::size_t>((i + 1) * (j + 2) * 13 % 211);
  return i == n / 2 && j == (n - 1) ? (sanitizing ? 1009u : 50021u) : static_cast<std::size_t>(i == j);
}
}  // namespace

TEST_CASE("alltoallv: uneven, empty and one wide pair, world sizes 1..8, sync and async") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    on_worlds(n, [n](auto& comm, world_sync&) {
      const int r = comm.rank();
      const auto N = static_cast<std::size_t>(n);
      for (int p = 0; p < 3; ++p)
        for (int mode = 0; mode < 2; ++mode) {
          CAPTURE(p);
          CAPTURE(mode);
          counts_t sc(N), rc(N);
          for (int j = 0; j < n; ++j) {
            sc[static_cast<std::size_t>(j)] = pair_count(p, r, j, n);
            rc[static_cast<std::size_t>(j)] = pair_count(p, j, r, n);
          }
          std::vector<std::int32_t> in(sum(sc)), out(sum(rc), -1);
          for (int j = 0; j < n; ++j)  // element k of the block for rank j: item(r, j * 1000003 + k)
            for (std::size_t k = 0; k < sc[static_cast<std::size_t>(j)]; ++k)
              in[offset_of(sc, j) + k] = item<std::int32_t>(r, static_cast<std::size_t>(j) * 1000003 + k);
          if (mode == 1) gsync::alltoallv_async(comm, std::span<const std::int32_t>{in}, sc, std::span<std::int32_t>{out}, rc).wait();
          else gsync::alltoallv(comm, std::span<const std::int32_t>{in}, sc, std::span<std::int32_t>{out}, rc);
          std::size_t wrong = 0;
          for (int j = 0; j < n; ++j)
            for (std::size_t k = 0; k < rc[static_cast<std::size_t>(j)]; ++k)
              wrong += out[offset_of(rc, j) + k] != item<std::int32_t>(j, static_cast<std::size_t>(r) * 1000003 + k);
          CHECK(wrong == 0);
        }
    }, wire_size(n));
  }
}

TEST_CASE("v-collectives: asynchronous calls of all five run in issue order behind each other") {
  run_inproc(4, [](auto& comm, world_sync&) {
    const int r = comm.rank(), n = comm.size();
    const counts_t counts = {3, 0, 5, 2};
    std::vector<float> g_in(2, static_cast<float>(r)), g_out(r == 1 ? 8 : 0);
    std::vector<float> s_in(r == 2 ? 8 : 0), s_out(2);
    for (std::size_t i = 0; i < s_in.size(); ++i) s_in[i] = static_cast<float>(i);
    std::vector<float> av_in(counts[static_cast<std::size_t>(r)], static_cast<float>(r + 1)), av_out(10);
    std::vector<float> rs_in(10, 1.0f), rs_out(counts[static_cast<std::size_t>(r)]);
    counts_t sc(4, 1), rc(4, 1);
    std::vector<float> a_in(4, static_cast<float>(r)), a_out(4);
    std::vector<gsync::request> reqs;
    reqs.push_back(gsync::gather_async(comm, std::span<const float>{g_in}, std::span<float>{g_out}, 1));
    reqs.push_back(gsync::scatter_async(comm, std::span<const float>{s_in}, std::span<float>{s_out}, 2));
    reqs.push_back(gsync::allgatherv_async(comm, std::span<const float>{av_in}, std::span<float>{av_out}, counts));
    reqs.push_back(gsync::reduce_scatterv_async(comm, std::span<const float>{rs_in}, std::span<float>{rs_out}, counts, gsync::op::sum{}));
    reqs.push_back(gsync::alltoallv_async(comm, std::span<const float>{a_in}, sc, std::span<float>{a_out}, rc));
    for (auto& q : reqs) q.wait();
    if (r == 1)
      for (int b = 0; b < n; ++b) CHECK(g_out[static_cast<std::size_t>(b) * 2] == static_cast<float>(b));
    CHECK(s_out[0] == static_cast<float>(2 * r));
    CHECK(av_out == std::vector<float>{1, 1, 1, 3, 3, 3, 3, 3, 4, 4});
    for (float x : rs_out) CHECK(x == 4.0f);
    for (int b = 0; b < n; ++b) CHECK(a_out[static_cast<std::size_t>(b)] == static_cast<float>(b));
  });
}

TEST_CASE("v-collectives: invalid counts, sizes, roots and overlaps are invalid_argument, on the calling rank") {
  run_inproc(3, [](auto& comm, world_sync&) {
    const int r = comm.rank();
    std::vector<float> a(12), b(12);
    const counts_t good = {4, 4, 4}, short_counts = {4, 4};
    auto bad = [&](auto&& f, const char* needle) {
      try {
        f();
        FAIL("no error: " << needle);
      } catch (const gsync::error& e) {
        CHECK(e.kind() == gsync::errc::invalid_argument);
        CHECK(std::string(e.what()).find(needle) != std::string::npos);
      }
    };
    bad([&] { gsync::gather(comm, std::span<const float>{a}.first(4), std::span<float>{b}, 3); }, "invalid root rank 3");
    if (r == 0) bad([&] { gsync::gather(comm, std::span<const float>{a}.first(4), std::span<float>{b}.first(11), 0); }, "world size x input");
    if (r == 0) bad([&] { gsync::gather(comm, std::span<const float>{a}.subspan(1, 4), std::span<float>{a}, 0); }, "only in-place form");
    if (r == 1) bad([&] { gsync::scatter(comm, std::span<const float>{a}.first(8), std::span<float>{b}.first(4), 1); }, "world size x output");
    bad([&] { gsync::allgatherv(comm, std::span<const float>{a}.first(4), std::span<float>{b}, short_counts); }, "one per rank");
    bad([&] { gsync::allgatherv(comm, std::span<const float>{a}.first(3), std::span<float>{b}, good); }, "counts[rank]");
    bad([&] { gsync::allgatherv(comm, std::span<const float>{a}.first(4), std::span<float>{b}.first(11), good); }, "sum of counts");
    bad([&] { gsync::reduce_scatterv(comm, std::span<const float>{a}, std::span<float>{b}.first(5), good); }, "counts[rank]");
    bad([&] { gsync::reduce_scatterv(comm, std::span<const float>{a}, std::span<float>{a}.subspan(1, 4), good); }, "only in-place form");
    const counts_t huge = {SIZE_MAX, 2, 0};
    bad([&] { gsync::reduce_scatterv(comm, std::span<const float>{a}, std::span<float>{b}.first(huge[static_cast<std::size_t>(r)]), huge); },
        "more elements than size_t");
    counts_t sc = {4, 4, 4}, rc = {4, 4, 4};
    rc[static_cast<std::size_t>(r)] = 3;
    bad([&] { gsync::alltoallv(comm, std::span<const float>{a}, sc, std::span<float>{b}.first(11), rc); }, "sends itself 4 elements");
    bad([&] { gsync::alltoallv(comm, std::span<const float>{a}, good, std::span<float>{a}, good); }, "overlap");
    // The calls that were refused took no operation number: a good one still runs on every rank.
    std::vector<float> in(4, 1.0f), out(12);
    gsync::allgatherv(comm, std::span<const float>{in}, std::span<float>{out}, good);
    for (float x : out) CHECK(x == 1.0f);
  });
}

TEST_CASE("v-collectives: GSYNC_ALGO_<COLLECTIVE> names are checked against the schedules each has") {
  gsync::config c = with_timeout(20000ms);
  c.algo_gather = "ring";  // the ring has no gather schedule
  run_inproc(2, [](auto& comm, world_sync&) {
    std::vector<float> in(3), out(6);
    try {
      gsync::gather(comm, std::span<const float>{in}, std::span<float>{out}, 0);
      FAIL("a gather forced to the ring ran");
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::invalid_argument);
      CHECK(std::string(e.what()).find("GSYNC_ALGO_GATHER") != std::string::npos);
      CHECK(std::string(e.what()).find("valid: auto, direct") != std::string::npos);
    }
  }, c);
  for (auto [coll, name] : {std::pair{"allgatherv", "ring"}, {"reduce_scatterv", "ring"}, {"alltoallv", "pairwise"}, {"scatter", "direct"}})
    CHECK(gsync::algo::valid_names(coll) == std::string("auto, ") + name);
}

TEST_CASE("alltoallv: a pair whose counts disagree fails instead of mixing messages") {
  bool failed = false;
  try {
    run_inproc(2, [](auto& comm, world_sync&) {
      const int r = comm.rank();
      // Rank 0 sends rank 1 five elements; rank 1 expects four from it.
      const counts_t sc = r == 0 ? counts_t{1, 5} : counts_t{1, 1};
      const counts_t rc = r == 0 ? counts_t{1, 1} : counts_t{4, 1};
      std::vector<float> in(sum(sc)), out(sum(rc));
      gsync::alltoallv(comm, std::span<const float>{in}, sc, std::span<float>{out}, rc);
    }, with_timeout(5000ms));
  } catch (const std::exception& e) {
    failed = true;
    MESSAGE(std::string(e.what()));
    CHECK(std::string(e.what()).find("alltoallv(float32, counts per pair)") != std::string::npos);
    CHECK(std::string(e.what()).find("counts disagree") != std::string::npos);
  }
  CHECK(failed);
}
