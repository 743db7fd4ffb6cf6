// The gradient layer (include/gsync/grad/): bucket planning boundaries, the loss scaler, the fused
// unpack/non-finite pass, clipping against a double reference, and the synchronizer over in-process,
// TCP and shared-memory worlds: averaging, overlap (a bucket finishes while later tensors are still
// being marked), accumulation, wire types, mixed gradient types, zero-copy views, loss scaling agreed
// on every rank and non-finite reports.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gsync/grad.hpp>
#include <gsync/grad/compressed_allreduce.hpp>

#include "support/world.hpp"

using namespace std::chrono_literals;
namespace grad = gsync::grad;

namespace {

gsync::config short_config() {
  gsync::config c;
  c.timeout = 30s;
  return c;
}

std::vector<grad::tensor_spec> f32s(std::initializer_list<std::size_t> counts) {
  std::vector<grad::tensor_spec> v;
  for (auto c : counts) v.push_back({c, gsync::dtype::float32});
  return v;
}

// Checks the invariants every plan must satisfy: each non-empty tensor in exactly one bucket of its
// type, contiguous packing without gaps or overlaps, reverse registration order inside buckets, and
// buckets numbered in the order of their first tensor.
void check_invariants(const grad::bucket_plan& p, const std::vector<grad::tensor_spec>& t) {
  REQUIRE(p.tensor_count() == t.size());
  std::vector<int> seen(t.size(), 0);
  std::size_t prev_first = std::numeric_limits<std::size_t>::max();
  for (std::size_t b = 0; b < p.bucket_count(); ++b) {
    const auto& bl = p.bucket(b);
    REQUIRE(!bl.tensors.empty());
    CHECK(bl.tensors.front() < prev_first);  // opened in reverse registration order
    prev_first = bl.tensors.front();
    std::size_t off = 0;
    for (std::size_t k = 0; k < bl.tensors.size(); ++k) {
      const std::size_t i = bl.tensors[k];
      if (k > 0) CHECK(i < bl.tensors[k - 1]);
      CHECK(t[i].type == bl.type);
      CHECK(p.place(i).bucket == b);
      CHECK(p.place(i).offset == off);
      CHECK(p.place(i).count == t[i].count);
      off += t[i].count;
      ++seen[i];
    }
    CHECK(off == bl.count);
  }
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].count == 0) {
      CHECK(seen[i] == 0);
      CHECK(p.place(i).bucket == grad::no_bucket);
    } else {
      CHECK(seen[i] == 1);
    }
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// bucket_plan
// ------------------------------------------------------------------------------------------------

TEST_CASE("bucket_plan: reverse order, caps, exact fit, first bucket smaller") {
  // 4-byte floats; first cap 16 B (4 floats), later caps 32 B (8 floats).
  const grad::plan_options o{32, 16};
  SUBCASE("exact fits close at the cap") {
    const auto t = f32s({2, 2, 4, 4, 4});  // reverse: 4,4,4,2,2 -> [4] (16 B = first cap), [4,4], [2,2]
    const auto p = grad::bucket_plan::make(t, o);
    check_invariants(p, t);
    REQUIRE(p.bucket_count() == 3);
    CHECK(p.bucket(0).tensors == std::vector<std::size_t>{4});
    CHECK(p.bucket(1).tensors == std::vector<std::size_t>{3, 2});
    CHECK(p.bucket(2).tensors == std::vector<std::size_t>{1, 0});
    CHECK(p.is_first_of_type(0));
    CHECK(!p.is_first_of_type(1));
    CHECK(p.place(2).offset == 4);
  }
  SUBCASE("one element over the cap starts a new bucket") {
    const auto t = f32s({1, 4});  // reverse: 4 (fills first cap), 1 -> new bucket
    const auto p = grad::bucket_plan::make(t, o);
    check_invariants(p, t);
    CHECK(p.bucket_count() == 2);
    const auto t2 = f32s({1, 3});  // 3 + 1 = 4 floats = 16 B: fits the first bucket exactly
    const auto p2 = grad::bucket_plan::make(t2, o);
    check_invariants(p2, t2);
    CHECK(p2.bucket_count() == 1);
  }
  SUBCASE("a tensor larger than a bucket gets its own") {
    const auto t = f32s({1, 100, 1, 1});  // reverse: 1,1 -> [1,1], 100 -> alone, 1 -> new
    const auto p = grad::bucket_plan::make(t, o);
    check_invariants(p, t);
    REQUIRE(p.bucket_count() == 3);
    CHECK(p.bucket(1).tensors == std::vector<std::size_t>{1});
    CHECK(p.bucket(1).count == 100);
    CHECK(p.bucket(2).tensors == std::vector<std::size_t>{0});
  }
  SUBCASE("a huge first tensor, then small ones") {
    const auto t = f32s({3, 3, 1000});
    const auto p = grad::bucket_plan::make(t, o);
    check_invariants(p, t);
    REQUIRE(p.bucket_count() == 2);
    CHECK(p.bucket(0).count == 1000);
    CHECK(p.bucket(1).tensors == std::vector<std::size_t>{1, 0});
  }
}

TEST_CASE("bucket_plan: empty tensors belong to no bucket") {
  const grad::plan_options o{32, 16};
  const auto t = f32s({0, 2, 0, 0, 2, 0});
  const auto p = grad::bucket_plan::make(t, o);
  check_invariants(p, t);
  CHECK(p.bucket_count() == 1);
  CHECK(p.bucket(0).count == 4);
  const auto all_empty = f32s({0, 0, 0});
  const auto pe = grad::bucket_plan::make(all_empty, o);
  check_invariants(pe, all_empty);
  CHECK(pe.bucket_count() == 0);
  CHECK(grad::bucket_plan::make(std::vector<grad::tensor_spec>{}, o).bucket_count() == 0);
}

TEST_CASE("bucket_plan: many tiny tensors fill buckets to the cap") {
  const grad::plan_options o{4096, 1024};  // 256 then 1024 floats
  std::vector<grad::tensor_spec> t(5000, {1, gsync::dtype::float32});
  const auto p = grad::bucket_plan::make(t, o);
  check_invariants(p, t);
  REQUIRE(p.bucket_count() == 1 + (5000 - 256 + 1023) / 1024);
  CHECK(p.bucket(0).count == 256);
  for (std::size_t b = 1; b + 1 < p.bucket_count(); ++b) CHECK(p.bucket(b).count == 1024);
  CHECK(p.bucket(p.bucket_count() - 1).count == (5000 - 256) % 1024);
  CHECK(p.total_bytes() == 5000 * 4);
}

TEST_CASE("bucket_plan: mixed dtypes get separate buckets, caps in bytes") {
  using gsync::dtype;
  const grad::plan_options o{64, 16};
  // registration: f32 x4 (16 B), bf16 x8 (16 B), f16 x2 (4 B), f32 x2 (8 B), bf16 x8 (16 B)
  const std::vector<grad::tensor_spec> t = {
      {4, dtype::float32}, {8, dtype::bfloat16}, {2, dtype::float16}, {2, dtype::float32}, {8, dtype::bfloat16}};
  const auto p = grad::bucket_plan::make(t, o);
  check_invariants(p, t);
  // reverse: 4:bf16(16B) opens b0 (first bf16, full); 3:f32(8B) opens b1 (first f32);
  // 2:f16 opens b2; 1:bf16 does not fit b0 -> b3 (cap 64); 0:f32 8+16 > 16 -> b4.
  REQUIRE(p.bucket_count() == 5);
  CHECK(p.bucket(0).type == dtype::bfloat16);
  CHECK(p.bucket(1).type == dtype::float32);
  CHECK(p.bucket(2).type == dtype::float16);
  CHECK(p.bucket(3).tensors == std::vector<std::size_t>{1});
  CHECK(p.bucket(4).tensors == std::vector<std::size_t>{0});
  CHECK(p.is_first_of_type(0));
  CHECK(p.is_first_of_type(1));
  CHECK(p.is_first_of_type(2));
  CHECK(!p.is_first_of_type(3));
  CHECK(p.bucket(0).bytes() == 16);
}

TEST_CASE("bucket_plan: zero caps are rejected") {
  const auto t = f32s({1});
  CHECK_THROWS_AS(grad::bucket_plan::make(t, {0, 16}), gsync::error);
  CHECK_THROWS_AS(grad::bucket_plan::make(t, {16, 0}), gsync::error);
}

// ------------------------------------------------------------------------------------------------
// loss_scaler
// ------------------------------------------------------------------------------------------------

TEST_CASE("loss_scaler: grows after the interval, backs off on overflow, respects bounds") {
  grad::loss_scaler_options o;
  o.init_scale = 8;
  o.growth_factor = 2;
  o.backoff_factor = 0.25f;
  o.growth_interval = 3;
  o.min_scale = 1;
  o.max_scale = 32;
  grad::loss_scaler s(o);
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK(s.scale() == 8);
  CHECK(s.update(false));
  CHECK(s.scale() == 16);   // grew after 3 good steps
  CHECK(!s.update(true));
  CHECK(s.scale() == 4);    // backed off, counter reset
  CHECK(s.good_steps() == 0);
  CHECK(!s.update(true));
  CHECK(s.scale() == 1);
  CHECK(!s.update(true));
  CHECK(s.scale() == 1);    // min
  CHECK(s.skipped_steps() == 3);
  for (int i = 0; i < 30; ++i) s.update(false);
  CHECK(s.scale() == 32);   // max
  CHECK(s.inv_scale() == 1.0f / 32);
  grad::loss_scaler_options bad = o;
  bad.backoff_factor = 1.0f;
  CHECK_THROWS_AS(grad::loss_scaler{bad}, gsync::error);
  bad = o;
  bad.growth_interval = 0;
  CHECK_THROWS_AS(grad::loss_scaler{bad}, gsync::error);
  bad = o;
  bad.init_scale = 64;
  CHECK_THROWS_AS(grad::loss_scaler{bad}, gsync::error);
}

// ------------------------------------------------------------------------------------------------
// fused element passes
// ------------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("unpack_scan: cast, scale and count non-finite in one pass", T, float, gsync::bfloat16, gsync::half) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> src = {1.0f, -2.0f, inf, 0.5f, nan, -inf, 3.0f, 70000.0f};
  std::vector<T> wire(src.size());
  grad::cast_into(src.data(), wire.data(), src.size());
  std::vector<float> out(src.size());
  const std::size_t bad = grad::unpack_scan(wire.data(), out.data(), src.size(), 0.5f);
  // 70000 overflows float16 only.
  const std::size_t expected = std::is_same_v<T, gsync::half> ? 4 : 3;
  CHECK(bad == expected);
  CHECK(out[0] == 0.5f);
  CHECK(out[1] == -1.0f);
  CHECK(std::isinf(out[2]));
  CHECK(std::isnan(out[4]));
  CHECK(grad::first_nonfinite(out.data(), out.size()) == 2);
  CHECK(grad::count_nonfinite(out.data(), out.size()) == expected);
  // narrowing on the way back: 1e5 fits bf16/f32 but not f16; 70000 * 1 -> f16 Inf counts.
  std::vector<float> big = {1e5f, 1.0f};
  std::vector<gsync::half> h(2);
  CHECK(grad::unpack_scan(big.data(), h.data(), 2, 1.0f) == 1);
}

// ------------------------------------------------------------------------------------------------
// clipping
// ------------------------------------------------------------------------------------------------

namespace {
double ref_norm(const std::vector<std::vector<float>>& ts) {
  double s = 0;
  for (const auto& t : ts)
    for (float v : t) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}
std::vector<std::vector<float>> clip_tensors(int salt) {
  std::vector<std::vector<float>> ts = {std::vector<float>(37), std::vector<float>(5), std::vector<float>(0),
                                        std::vector<float>(300)};
  int k = salt;
  for (auto& t : ts)
    for (auto& v : t) v = static_cast<float>(((k++ * 7919) % 201) - 100) / 16.0f;
  return ts;
}
}  // namespace

TEST_CASE("clip_grad_norm (replicated) against a double reference") {
  auto ts = clip_tensors(1);
  std::vector<grad::tensor_ref> refs;
  for (auto& t : ts) refs.push_back(grad::make_ref(std::span<float>{t}));
  const auto orig = ts;
  const double n = ref_norm(ts);
  SUBCASE("above max_norm: scaled to it") {
    const double got = grad::clip_grad_norm(refs, n / 4);
    CHECK(got == doctest::Approx(n).epsilon(1e-12));
    CHECK(ref_norm(ts) == doctest::Approx(n / 4).epsilon(1e-5));
    const double f = (n / 4) / (n + 1e-6);
    for (std::size_t i = 0; i < ts.size(); ++i)
      for (std::size_t j = 0; j < ts[i].size(); ++j) CHECK(ts[i][j] == doctest::Approx(orig[i][j] * f).epsilon(1e-6));
  }
  SUBCASE("below max_norm: untouched") {
    CHECK(grad::clip_grad_norm(refs, n * 2) == doctest::Approx(n).epsilon(1e-12));
    CHECK(ts == orig);
  }
  SUBCASE("non-finite norm: untouched, reported") {
    ts[1][2] = std::numeric_limits<float>::infinity();
    const auto with_inf = ts;
    CHECK(std::isinf(grad::clip_grad_norm(refs, 1.0)));
    CHECK(ts[0] == with_inf[0]);
  }
  CHECK_THROWS_AS(grad::clip_grad_norm(refs, 0.0), gsync::error);
}

TEST_CASE("clip_grad_norm with mixed gradient types") {
  std::vector<float> a = {3.0f, 0.0f};
  std::vector<gsync::bfloat16> b = {gsync::bfloat16(4.0f)};
  std::vector<gsync::half> c = {gsync::half(12.0f)};
  std::vector<grad::tensor_ref> refs = {grad::make_ref(std::span<float>{a}), grad::make_ref(std::span<gsync::bfloat16>{b}),
                                        grad::make_ref(std::span<gsync::half>{c})};
  CHECK(grad::global_norm(refs) == doctest::Approx(13.0).epsilon(1e-12));
  grad::clip_grad_norm(refs, 6.5);
  CHECK(a[0] == doctest::Approx(1.5).epsilon(1e-5));
  CHECK(static_cast<float>(b[0]) == doctest::Approx(2.0).epsilon(1e-2));
  CHECK(static_cast<float>(c[0]) == doctest::Approx(6.0).epsilon(1e-3));
}

TEST_CASE("clip_grad_norm_sharded: one allreduce of the squared sums") {
  for (int n : {1, 2, 3, 5, 8}) {
    CAPTURE(n);
    // The full gradient: clip_tensors(7), 342 elements. Rank r holds the elements with index % n == r.
    const auto full = clip_tensors(7);
    std::vector<float> flat;
    for (const auto& t : full) flat.insert(flat.end(), t.begin(), t.end());
    const double n_ref = ref_norm(full);
    const double max_norm = n_ref / 3;
    gsync_test::run_inproc(
        n,
        [&](gsync::inproc_communicator& comm, gsync_test::world_sync&) {
          std::vector<float> shard;
          for (std::size_t i = static_cast<std::size_t>(comm.rank()); i < flat.size(); i += static_cast<std::size_t>(n))
            shard.push_back(flat[i]);
          const auto before = shard;
          std::vector<grad::tensor_ref> refs = {grad::make_ref(std::span<float>{shard})};
          const double got = grad::clip_grad_norm_sharded(comm, refs, max_norm);
          REQUIRE(got == doctest::Approx(n_ref).epsilon(1e-12));
          const double f = max_norm / (n_ref + 1e-6);
          for (std::size_t i = 0; i < shard.size(); ++i) REQUIRE(shard[i] == doctest::Approx(before[i] * f).epsilon(1e-6));
        },
        short_config());
  }
}

// ------------------------------------------------------------------------------------------------
// synchronizer
// ------------------------------------------------------------------------------------------------

namespace {

// Runs f(comm, world) over in-process worlds of several sizes, a TCP world and a shared-memory world.
template <class F>
void sweep_worlds(F f) {
  for (int n : {1, 2, 3, 5, 8}) {
    CAPTURE(n);
    gsync_test::run_inproc(n, f, short_config());
  }
  gsync_test::run_tcp(3, f, short_config());
  gsync_test::run_shm(4, f, short_config());
}

// A gradient value that differs per rank, tensor, element and step, not exactly representable in
// 16-bit types.
float gval(int rank, std::size_t tensor, std::size_t i, int step) {
  return std::sin(0.37f * static_cast<float>(rank + 1) + 0.011f * static_cast<float>(i) + 0.7f * static_cast<float>(tensor) +
                  0.29f * static_cast<float>(step));
}

// Average over `n` ranks of gval, in double.
double gavg(int n, std::size_t tensor, std::size_t i, int step) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += gval(r, tensor, i, step);
  return s / n;
}

const std::vector<std::size_t> sizes = {0, 1, 7, 300, 5000, 33, 129};

grad::synchronizer_options small_buckets() {
  grad::synchronizer_options o;
  o.bucket_bytes = 4096;       // 1024 floats
  o.first_bucket_bytes = 512;  // 128 floats
  return o;
}

}  // namespace

TEST_CASE("synchronizer: averages copy-mode gradients over the ranks, marks in any order") {
  sweep_worlds([](auto& comm, gsync_test::world_sync&) {
    const int n = comm.size(), r = comm.rank();
    std::vector<std::vector<float>> g(sizes.size());
    for (std::size_t t = 0; t < sizes.size(); ++t) g[t].resize(sizes[t]);
    grad::synchronizer sync(comm, small_buckets());
    for (std::size_t t = 0; t < sizes.size(); ++t) sync.add(std::span<float>{g[t]}, "t" + std::to_string(t));
    sync.build();
    REQUIRE(sync.plan().bucket_count() >= 4);
    for (int step = 0; step < 3; ++step) {
      for (std::size_t t = 0; t < sizes.size(); ++t)
        for (std::size_t i = 0; i < sizes[t]; ++i) g[t][i] = gval(r, t, i, step);
      // Each rank marks in its own order (a rotation of reverse order); one tensor is left to finish().
      const std::size_t nt = sizes.size();
      for (std::size_t k = 0; k + 1 < nt; ++k) sync.mark_ready(nt - 1 - (k + static_cast<std::size_t>(r)) % nt);
      const auto res = sync.finish();
      REQUIRE(res.synced);
      REQUIRE(res.apply);
      REQUIRE(res.nonfinite.empty());
      CHECK(res.stats.buckets == sync.plan().bucket_count());
      CHECK(res.stats.payload_bytes == 4 * (0 + 1 + 7 + 300 + 5000 + 33 + 129));
      if (n == 1) CHECK(res.stats.bytes_on_wire == 0);
      else CHECK(res.stats.bytes_on_wire > 0);
      for (std::size_t t = 0; t < sizes.size(); ++t)
        for (std::size_t i = 0; i < sizes[t]; ++i)
          REQUIRE(g[t][i] == doctest::Approx(gavg(n, t, i, step)).epsilon(1e-5).scale(1));
    }
  });
}

TEST_CASE("synchronizer: the first bucket's allreduce finishes while backward still marks tensors") {
  auto f = [](auto& comm, gsync_test::world_sync&) {
    std::vector<std::vector<float>> g(6, std::vector<float>(256, 1.0f));
    grad::synchronizer_options o;
    o.bucket_bytes = 1024;  // one tensor per bucket
    o.first_bucket_bytes = 1024;
    grad::synchronizer sync(comm, o);
    for (std::size_t t = 0; t < g.size(); ++t) sync.add(std::span<float>{g[t]}, "t" + std::to_string(t));
    sync.build();
    REQUIRE(sync.plan().bucket_count() == 6);
    REQUIRE(sync.plan().bucket(0).tensors == std::vector<std::size_t>{5});
    sync.mark_ready(5);  // completes bucket 0: launched now, before anything else is marked
    CHECK(sync.bucket_launched(0));
    CHECK(!sync.bucket_launched(1));
    // "Backward" keeps computing: wait (bounded) until bucket 0 has been reduced in the background.
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    bool done = false;
    while (!(done = sync.bucket_finished(0)) && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
    REQUIRE(done);                    // finished before the last tensor was marked
    CHECK(!sync.bucket_launched(5));  // ... which has not even been issued yet
    for (std::size_t t = 5; t-- > 0;) sync.mark_ready(t);
    const auto res = sync.finish();
    CHECK(res.apply);
    CHECK(g[0][0] == 1.0f);
  };
  for (int n : {1, 2, 3}) gsync_test::run_inproc(n, f, short_config());
  gsync_test::run_tcp(2, f, short_config());
}

TEST_CASE("synchronizer: gradient accumulation communicates only on the k-th step") {
  auto f = [](auto& comm, gsync_test::world_sync&) {
    const int n = comm.size(), r = comm.rank();
    constexpr std::uint32_t k = 3;
    std::vector<float> a(200), b(3000);
    grad::synchronizer_options o = small_buckets();
    o.accumulation_steps = k;
    grad::synchronizer sync(comm, o);
    sync.add(std::span<float>{a}, "a");
    sync.add(std::span<float>{b}, "b");
    for (int step = 0; step < 2 * static_cast<int>(k); ++step) {
      const int micro = step % static_cast<int>(k);
      CHECK(sync.will_sync() == (micro == static_cast<int>(k) - 1));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = (micro == 0 ? 0.0f : a[i]) + gval(r, 0, i, step);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = (micro == 0 ? 0.0f : b[i]) + gval(r, 1, i, step);
      sync.mark_ready(1);
      sync.mark_ready(0);
      const auto res = sync.finish();
      if (micro + 1 < static_cast<int>(k)) {
        CHECK(!res.synced);
        CHECK(!res.apply);
        CHECK(res.stats.buckets == 0);
        CHECK(res.stats.bytes_on_wire == 0);
        CHECK(res.stats.payload_bytes == 0);
      } else {
        CHECK(res.synced);
        CHECK(res.apply);
        CHECK(res.stats.buckets == sync.plan().bucket_count());
        CHECK(res.stats.payload_bytes == 4 * 3200);
        const int s0 = step - static_cast<int>(k) + 1;
        for (std::size_t i = 0; i < a.size(); i += 7) {
          double e = 0;
          for (int s = s0; s <= step; ++s) e += gavg(n, 0, i, s);
          REQUIRE(a[i] == doctest::Approx(e / k).epsilon(1e-5).scale(1));
        }
        for (std::size_t i = 0; i < b.size(); i += 13) {
          double e = 0;
          for (int s = s0; s <= step; ++s) e += gavg(n, 1, i, s);
          REQUIRE(b[i] == doctest::Approx(e / k).epsilon(1e-5).scale(1));
        }
      }
    }
    CHECK(sync.totals().steps() == 2 * k);
    CHECK(sync.totals().synced_steps() == 2);
  };
  for (int n : {1, 3, 4}) gsync_test::run_inproc(n, f, short_config());
  gsync_test::run_tcp(3, f, short_config());
}

TEST_CASE("synchronizer: bf16 and f16 wire types stay within tolerance of f32 and halve the payload") {
  struct wire_case {
    grad::wire_dtype wire;
    double tol;  // absolute, for averages of values in [-1, 1]: a few ulps of the 16-bit type at 1
  };
  for (const wire_case wc : {wire_case{grad::wire_dtype::bfloat16, 3 * 0x1p-8}, wire_case{grad::wire_dtype::float16, 3 * 0x1p-11}}) {
    auto f = [wc](auto& comm, gsync_test::world_sync&) {
      const int n = comm.size(), r = comm.rank();
      std::vector<std::vector<float>> g(sizes.size());
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        g[t].resize(sizes[t]);
        for (std::size_t i = 0; i < sizes[t]; ++i) g[t][i] = gval(r, t, i, 0);
      }
      grad::synchronizer_options o = small_buckets();
      o.wire = wc.wire;
      grad::synchronizer sync(comm, o);
      for (std::size_t t = 0; t < sizes.size(); ++t) sync.add(std::span<float>{g[t]}, "t" + std::to_string(t));
      const auto res = sync.finish();
      CHECK(res.stats.payload_bytes == 2 * (1 + 7 + 300 + 5000 + 33 + 129));
      double worst = 0;
      for (std::size_t t = 0; t < sizes.size(); ++t)
        for (std::size_t i = 0; i < sizes[t]; ++i) worst = std::max(worst, std::abs(g[t][i] - gavg(n, t, i, 0)));
      CHECK(worst <= wc.tol);
      if (n > 1) CHECK(worst > 0);  // the 16-bit wire really was used
    };
    for (int n : {2, 3, 5}) gsync_test::run_inproc(n, f, short_config());
    gsync_test::run_tcp(3, f, short_config());
  }
}

TEST_CASE("synchronizer: mixed f32/bf16/f16 gradients, copy and zero-copy views together") {
  sweep_worlds([](auto& comm, gsync_test::world_sync&) {
    const int n = comm.size(), r = comm.rank();
    std::vector<float> a(300);
    std::vector<gsync::bfloat16> b(700);
    std::vector<gsync::half> c(50);
    grad::synchronizer_options o = small_buckets();
    grad::synchronizer sync(comm, o);
    const auto ia = sync.add(std::span<float>{a}, "a.f32");
    const auto iv = sync.template add_view<float>(2000, "v.f32");
    const auto ib = sync.add(std::span<gsync::bfloat16>{b}, "b.bf16");
    const auto iw = sync.template add_view<gsync::half>(400, "w.f16");
    const auto ic = sync.add(std::span<gsync::half>{c}, "c.f16");
    sync.build();
    auto v = sync.template view<float>(iv);
    auto w = sync.template view<gsync::half>(iw);
    REQUIRE(v.size() == 2000);
    CHECK_THROWS_AS(sync.template view<gsync::bfloat16>(iv), gsync::error);
    CHECK_THROWS_AS(sync.template view<float>(ia), gsync::error);
    for (int step = 0; step < 2; ++step) {
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = gval(r, ia, i, step);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = gval(r, iv, i, step);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = gsync::bfloat16(gval(r, ib, i, step));
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = gsync::half(gval(r, iw, i, step));
      for (std::size_t i = 0; i < c.size(); ++i) c[i] = gsync::half(gval(r, ic, i, step));
      for (std::size_t t = 5; t-- > 0;) sync.mark_ready(t);
      const auto res = sync.finish();
      REQUIRE(res.apply);
      // reference: the average of the values each rank actually contributed (after its own rounding)
      auto expect = [&](std::size_t t, std::size_t i, auto tag) {
        using T = decltype(tag);
        double s = 0;
        for (int q = 0; q < n; ++q) s += static_cast<float>(T(gval(q, t, i, step)));
        return s / n;
      };
      for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == doctest::Approx(expect(ia, i, float{})).epsilon(1e-5).scale(1));
      for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == doctest::Approx(expect(iv, i, float{})).epsilon(1e-5).scale(1));
      for (std::size_t i = 0; i < b.size(); ++i)
        REQUIRE(std::abs(static_cast<float>(b[i]) - expect(ib, i, gsync::bfloat16{})) <= n * 0x1p-8);
      for (std::size_t i = 0; i < w.size(); ++i)
        REQUIRE(std::abs(static_cast<float>(w[i]) - expect(iw, i, gsync::half{})) <= n * 0x1p-11);
      for (std::size_t i = 0; i < c.size(); ++i)
        REQUIRE(std::abs(static_cast<float>(c[i]) - expect(ic, i, gsync::half{})) <= n * 0x1p-11);
    }
    const auto refs = sync.tensors();
    REQUIRE(refs.size() == 5);
    CHECK(refs[iv].data == static_cast<void*>(v.data()));
    CHECK(refs[ib].type == gsync::dtype::bfloat16);
  });
}

TEST_CASE("synchronizer: an overflow on one rank makes every rank skip the same step and back off") {
  auto f = [](auto& comm, gsync_test::world_sync&) {
    const int n = comm.size(), r = comm.rank();
    std::vector<float> a(100), b(900);
    grad::synchronizer_options o = small_buckets();
    o.on_nonfinite = grad::nonfinite_action::report;
    o.loss_scaling = grad::loss_scaler_options{};
    o.loss_scaling->init_scale = 1024;
    o.loss_scaling->growth_interval = 2;
    o.loss_scaling->growth_factor = 2;
    o.loss_scaling->backoff_factor = 0.5f;
    grad::synchronizer sync(comm, o);
    sync.add(std::span<float>{a}, "a");
    sync.add(std::span<float>{b}, "b");
    const int bad_step = 3, bad_rank = n - 1;
    // scale before each step: 1024, 1024, 2048 (grew after 2 good steps), 2048, 1024 (backed off), 1024, 2048
    const std::vector<float> scales = {1024, 1024, 2048, 2048, 1024, 1024, 2048};
    for (int step = 0; step < 6; ++step) {
      REQUIRE(sync.loss_scale() == scales[static_cast<std::size_t>(step)]);
      const float sc = sync.loss_scale();
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = sc * gval(r, 0, i, step);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = sc * gval(r, 1, i, step);
      if (step == bad_step && r == bad_rank) b[17] = std::numeric_limits<float>::infinity();
      const auto res = sync.finish();
      if (step == bad_step) {
        CHECK(!res.apply);
        REQUIRE(res.nonfinite.size() == 1);
        CHECK(res.nonfinite[0].tensor == 1);
        CHECK(res.nonfinite[0].name == "b");
        CHECK(res.nonfinite[0].first_index == 17);
      } else {
        CHECK(res.apply);
        CHECK(res.nonfinite.empty());
        for (std::size_t i = 0; i < a.size(); i += 3)  // unscaled in the unpack pass
          REQUIRE(a[i] == doctest::Approx(gavg(n, 0, i, step)).epsilon(1e-5).scale(1));
      }
    }
    REQUIRE(sync.scaler() != nullptr);
    CHECK(sync.scaler()->skipped_steps() == 1);
  };
  for (int n : {1, 2, 4, 7}) gsync_test::run_inproc(n, f, short_config());
  gsync_test::run_tcp(3, f, short_config());
}

TEST_CASE("synchronizer: a NaN on one rank is reported on every rank with its tensor") {
  auto f = [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<std::vector<float>> g(sizes.size());
    for (std::size_t t = 0; t < sizes.size(); ++t) g[t].assign(sizes[t], 0.5f);
    for (grad::nonfinite_action act : {grad::nonfinite_action::report, grad::nonfinite_action::throw_error}) {
      grad::synchronizer_options o = small_buckets();
      o.on_nonfinite = act;
      o.wire = act == grad::nonfinite_action::report ? grad::wire_dtype::bfloat16 : grad::wire_dtype::native;
      grad::synchronizer sync(comm, o);
      for (std::size_t t = 0; t < sizes.size(); ++t) sync.add(std::span<float>{g[t]}, "layer" + std::to_string(t) + ".weight");
      for (std::size_t t = 0; t < sizes.size(); ++t) std::fill(g[t].begin(), g[t].end(), 0.5f);
      if (r == 1) g[4][4321] = std::numeric_limits<float>::quiet_NaN();
      if (r == 0) g[2][5] = -std::numeric_limits<float>::infinity();
      if (act == grad::nonfinite_action::report) {
        const auto res = sync.finish();
        CHECK(!res.apply);
        REQUIRE(res.nonfinite.size() == (comm.size() > 1 ? 2u : 1u));
        const auto& last = res.nonfinite.back();
        if (comm.size() > 1) {
          // bucket order: tensor 4 (5000 floats) is in an earlier bucket than tensor 2
          CHECK(res.nonfinite[0].tensor == 4);
          CHECK(res.nonfinite[0].name == "layer4.weight");
          CHECK(res.nonfinite[0].first_index == 4321);
          CHECK(res.nonfinite[0].count == 1);
          CHECK(std::isnan(res.nonfinite[0].first_value));
        }
        CHECK(last.tensor == 2);
        CHECK(last.first_index == 5);
        CHECK(last.first_value == -std::numeric_limits<float>::infinity());
        CHECK(last.bucket == sync.plan().place(2).bucket);
        // the other elements came through
        CHECK(g[0].size() == 0);
        CHECK(g[3][0] == 0.5f);
      } else {
        std::string msg;
        try {
          sync.finish();
        } catch (const gsync::error& e) {
          msg = e.what();
          CHECK(e.code() == gsync::errc::non_finite);
        }
        CHECK(msg.find("'layer2.weight'") != std::string::npos);
        CHECK((comm.size() == 1 || msg.find("'layer4.weight'") != std::string::npos));
        // the synchronizer stays usable after a reported error
        for (auto& t : g) std::fill(t.begin(), t.end(), 1.0f);
        CHECK(sync.finish().apply);
      }
    }
  };
  for (int n : {1, 2, 3, 6}) gsync_test::run_inproc(n, f, short_config());
  gsync_test::run_shm(3, f, short_config());
}

TEST_CASE("synchronizer: misuse is reported") {
  gsync_test::run_inproc(
      3,
      [](gsync::inproc_communicator& comm, gsync_test::world_sync&) {
        std::vector<float> a(10), b(10), extra(5);
        {
          grad::synchronizer sync(comm, small_buckets());
          sync.add(std::span<float>{a}, "a");
          sync.mark_ready(0);
          CHECK_THROWS_AS(sync.mark_ready(0), gsync::error);  // twice in a step
          CHECK_THROWS_AS(sync.mark_ready(7), gsync::error);  // no such tensor
          CHECK_THROWS_AS(sync.add(std::span<float>{b}, "late"), gsync::error);
          sync.finish();
        }
        {
          // rank 0 registers one more tensor than the others: every rank learns it at build()
          grad::synchronizer sync(comm, small_buckets());
          sync.add(std::span<float>{a}, "a");
          if (comm.rank() == 0) sync.add(std::span<float>{extra}, "extra");
          gsync::errc kind{};
          try {
            sync.build();
          } catch (const gsync::error& e) {
            kind = e.kind();
          }
          CHECK(kind == gsync::errc::mismatch);
        }
        grad::synchronizer_options bad;
        bad.loss_scaling = grad::loss_scaler_options{};  // with the default throw_error action
        CHECK_THROWS_AS(grad::synchronizer(comm, bad), gsync::error);
        bad = {};
        bad.accumulation_steps = 0;
        CHECK_THROWS_AS(grad::synchronizer(comm, bad), gsync::error);
      },
      short_config());
}

TEST_CASE("allreduce_bytes_sent: schedule volumes") {
  using namespace gsync::algo;
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<ring>, 1000, 1) == 0);
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<ring>, 1000, 4) == doctest::Approx(1500));
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<halving_doubling>, 1000, 4) == doctest::Approx(1500));
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<recursive_doubling>, 1000, 4) == doctest::Approx(2000));
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<direct>, 1000, 4) == doctest::Approx(3000));
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<star>, 1000, 4) == doctest::Approx(1500));
  // 5 ranks: P = 4, one folded rank: (4*2*1000 + 2*1000) / 5
  CHECK(grad::allreduce_bytes_sent(allreduce_id_of<recursive_doubling>, 1000, 5) == doctest::Approx(2000));
}

TEST_CASE("synchronizer: the plain reducer reports the bytes the transport was handed, counted") {
  // A forced ring on 4 and 5 ranks: each rank sends every chunk but r+1 (reduce-scatter) and every
  // chunk but r+2 (allgather) of each bucket, which differs between ranks when the count does not
  // divide; the counted bytes must say exactly that, per rank.
  for (int n : {4, 5}) {
    CAPTURE(n);
    gsync::config cfg;
    cfg.timeout = std::chrono::seconds(60);
    cfg.algo = "ring";
    gsync_test::run_inproc(n, [](auto& comm, gsync_test::world_sync&) {
      std::vector<float> a(1001, 1.0f), b(77, 2.0f);
      grad::synchronizer_options o;
      o.bucket_bytes = 4096;
      o.first_bucket_bytes = 4096;
      grad::synchronizer sync(comm, o);
      sync.add(std::span<float>{a}, "a");
      sync.add(std::span<float>{b}, "b");
      sync.build();
      std::size_t expect = 0;
      for (std::size_t bk = 0; bk < sync.plan().bucket_count(); ++bk)
        expect += grad::ring_allreduce_bytes(sync.plan().bucket(bk).count, comm.size(), comm.rank(), sizeof(float));
      const std::uint64_t before = comm.transport().payload_bytes_posted();
      sync.mark_ready(1);
      sync.mark_ready(0);
      const auto res = sync.finish();
      CHECK(res.stats.bytes_on_wire == expect);
      CHECK(comm.transport().payload_bytes_posted() - before == expect);
      CHECK(a[0] == 1.0f);
      CHECK(b[76] == 2.0f);
    }, cfg);
  }
}

TEST_CASE("synchronizer: the efficiency figures on a run with known answers (exposed share, speedup over one worker)") {
  // Every step both ranks "compute" 40 ms; rank 1 then computes 60 ms more before it marks its
  // gradient. Rank 0 waits for it in finish(): about 60 ms of a 100 ms step are exposed
  // communication (comm_ratio 0.6, speedup(2) = 2 x 0.4 = 0.8); rank 1 finds rank 0 ready and
  // waits only for the tiny allreduce itself (comm_ratio near 0, speedup near 2).
  gsync_test::run_inproc(2, [](auto& comm, gsync_test::world_sync&) {
    const int r = comm.rank();
    std::vector<float> g(1024, 1.0f);
    grad::synchronizer sync(comm, grad::synchronizer_options{});
    sync.add(std::span<float>{g}, "w");
    sync.build();
    sync.begin_step();
    for (int step = 0; step < 5; ++step) {
      std::this_thread::sleep_for(40ms);
      if (r == 1) std::this_thread::sleep_for(60ms);
      sync.mark_ready(0);
      CHECK(sync.finish().synced);
    }
    const auto& t = sync.totals();
    CHECK(t.steps() == 5);
    CHECK(t.mean_step_ms() == doctest::Approx(100).epsilon(0.25));
    if (r == 0) {
      CHECK(t.comm_ratio() == doctest::Approx(0.6).epsilon(0.2));
      CHECK(t.speedup(2) == doctest::Approx(0.8).epsilon(0.3));
    } else {
      CHECK(t.comm_ratio() < 0.1);
      CHECK(t.speedup(2) > 1.8);
    }
  }, short_config());
}
