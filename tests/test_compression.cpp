// Gradient compression (include/gsync/grad/): the int8 block quantizer and its rounding modes,
// top-k selection, and compressed_allreduce for every policy over the in-process and the TCP
// transport, world sizes 1..8: identical results on every rank, error within what each encoding
// allows (against double-precision references), error feedback, non-finite values, and the bytes
// on the wire (checked against a transport that counts what it is handed).

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include <gsync/grad.hpp>
#include <gsync/grad/compressed_allreduce.hpp>
#include <gsync/grad/compressed_reducer.hpp>

#include "support/world.hpp"

using namespace std::chrono_literals;
namespace grad = gsync::grad;
namespace compress = gsync::grad::compress;

namespace {

gsync::config short_config() {
  gsync::config c;
  c.timeout = 60s;
  return c;
}

/// Deterministic test value of rank r, element i: uniform in [-1, 1) times a magnitude that
/// changes every 97 elements over 2^-3 .. 2^3 (so int8 blocks see very different scales).
float input(int r, std::size_t i, std::uint64_t salt) {
  const std::uint64_t h = grad::splitmix64(salt * 0x100000001B3ull + static_cast<std::uint64_t>(r) * 0x9E3779B9ull + i * 7919u);
  const double u = static_cast<double>(h >> 11) * 0x1p-53 * 2.0 - 1.0;
  return static_cast<float>(u * std::ldexp(1.0, static_cast<int>((i / 97) % 7) - 3));
}

std::vector<float> inputs(int r, std::size_t n, std::uint64_t salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input(r, i, salt);
  return v;
}

/// The rank-0 buffer's bytes equal this rank's (all ranks must reach this point).
std::size_t differing_from_rank0(int r, gsync_test::world_sync& sync, const std::vector<float>& v) {
  sync.outputs[static_cast<std::size_t>(r)] = v.data();
  sync.bar.arrive_and_wait();
  const bool same = v.empty() || std::memcmp(v.data(), sync.outputs[0], v.size() * sizeof(float)) == 0;
  sync.bar.arrive_and_wait();
  return same ? 0 : 1;
}

// --- a transport that counts the payload bytes it is asked to send --------------------------

/// The in-process transport, plus a count of the bytes handed to post_send.
class counting {
 public:
  counting(std::shared_ptr<gsync::transport::inproc_world> w, int rank) : inner_(std::move(w), rank) {}
  int rank() const noexcept { return inner_.rank(); }
  int size() const noexcept { return inner_.size(); }
  std::string_view name() const noexcept { return "counting-inproc"; }
  const gsync::topology& topo() const noexcept { return inner_.topo(); }
  void post_send(int peer, gsync::message_id id, const std::byte* src, std::size_t n) {
    sent += n;
    inner_.post_send(peer, id, src, n);
  }
  void recv(int peer, gsync::message_id id, std::byte* dst, std::size_t n, gsync::deadline dl) { inner_.recv(peer, id, dst, n, dl); }
  void recv_stream(int peer, gsync::message_id id, std::size_t n, std::size_t align,
                   gsync::detail::function_ref<void(std::span<const std::byte>)> consume, gsync::deadline dl) {
    inner_.recv_stream(peer, id, n, align, consume, dl);
  }
  void flush_sends(gsync::deadline dl) { inner_.flush_sends(dl); }
  std::size_t sent = 0;  ///< payload bytes posted so far

 private:
  gsync::transport::inproc inner_;
};

template <class F>
void run_counting(int n, F f) {
  auto w = std::make_shared<gsync::transport::inproc_world>(n);
  gsync_test::run_threads<gsync::communicator<counting>>(
      n, [&](int r) { return gsync::communicator<counting>(std::make_unique<counting>(w, r), short_config()); }, f);
}

// --- references --------------------------------------------------------------------------

/// Per-element bound of the int8 result's error against the exact mean/sum of the inputs:
/// every rank's worker quantization errs by at most its block's scale/2 (scale = amax/127; twice
/// that, a whole scale, with stochastic rounding), and so does the owner's re-quantization of
/// the sum, whose block amax is at most the exact sum's amax plus the worker errors. A relative
/// slack of 1e-3 covers float rounding of scales and of the float32 sum.
std::vector<double> int8_bound(const std::vector<std::vector<float>>& x, const std::vector<double>& ref, std::size_t block,
                               bool stochastic, bool average) {
  const int N = static_cast<int>(x.size());
  const std::size_t n = ref.size();
  const double f = stochastic ? 1.0 : 0.5, div = average ? N : 1;
  std::vector<double> bound(n);
  const grad::int8_wire_layout L(n, N, block);
  for (std::size_t j = 0; j < static_cast<std::size_t>(N); ++j) {
    const gsync::range ch = L.chunk(j);
    for (std::size_t off = 0; off < ch.count; off += block) {
      const std::size_t len = std::min(block, ch.count - off);
      double worker = 0, ref_amax = 0;
      for (const auto& xr : x) {
        double a = 0;
        for (std::size_t i = 0; i < len; ++i) a = std::max(a, std::fabs(static_cast<double>(xr[ch.offset + off + i])));
        worker += f * a / 127.0;
      }
      worker /= div;
      for (std::size_t i = 0; i < len; ++i) ref_amax = std::max(ref_amax, std::fabs(ref[ch.offset + off + i]));
      const double server = f * (ref_amax + worker) / 127.0;
      for (std::size_t i = 0; i < len; ++i) bound[ch.offset + off + i] = (worker + server) * (1 + 1e-3) + 1e-30;
    }
  }
  return bound;
}

/// Indices of the k largest |x| (ties: lower index first), by sorting: independent of topk.hpp.
std::vector<std::size_t> reference_topk(const std::vector<float>& x, std::size_t k) {
  std::vector<std::size_t> id(x.size());
  std::iota(id.begin(), id.end(), std::size_t{0});
  std::stable_sort(id.begin(), id.end(), [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  id.resize(k);
  return id;
}

/// A policy under test, with how its result is checked.
enum class kind { none, fp16, bf16, int8_nearest, int8_stochastic, topk_all, topk_tenth };
constexpr kind all_kinds[] = {kind::none, kind::fp16, kind::bf16, kind::int8_nearest, kind::int8_stochastic, kind::topk_all, kind::topk_tenth};
const char* kind_name(kind k) {
  switch (k) {
    case kind::none: return "none";
    case kind::fp16: return "fp16";
    case kind::bf16: return "bf16";
    case kind::int8_nearest: return "int8-nearest";
    case kind::int8_stochastic: return "int8-stochastic";
    case kind::topk_all: return "topk-1.0";
    case kind::topk_tenth: return "topk-0.1";
  }
  return "?";
}

/// Calls f(policy) with the policy object of kind k (EF off: the result is then a function of
/// this step's inputs only, which the references below model).
template <class F>
void with_policy(kind k, F f) {
  switch (k) {
    case kind::none: return f(compress::none{});
    case kind::fp16: return f(compress::fp16{});
    case kind::bf16: return f(compress::bf16{});
    case kind::int8_nearest: return f(compress::int8{.block = 64, .round = grad::rounding::nearest, .error_feedback = false, .seed = 1});
    case kind::int8_stochastic: return f(compress::int8{.block = 64, .round = grad::rounding::stochastic, .error_feedback = false, .seed = 7});
    case kind::topk_all: return f(compress::topk{.ratio = 1.0, .error_feedback = false});
    case kind::topk_tenth: return f(compress::topk{.ratio = 0.1, .error_feedback = false});
  }
}

/// Runs every policy on every count in one world and checks the results (see the TEST_CASE).
template <class Comm>
void sweep_world(Comm& comm, gsync_test::world_sync& sync) {
  const int N = comm.size(), r = comm.rank();
  const std::size_t un = static_cast<std::size_t>(N);
  // The largest: 100003, or 65537 under the sanitizers (GSYNC_TEST_LARGE set), still above the
  // 2^16 elements where top-k starts to select by sampling.
  const std::size_t largest = std::getenv("GSYNC_TEST_LARGE") ? 65537 : 100003;
  const std::vector<std::size_t> counts = {0, 1, un > 1 ? un - 1 : 2, 1001, 64 * un + 3, largest};
  std::uint64_t salt = 0;
  for (const std::size_t n : counts) {
    for (const kind k : all_kinds) {
      ++salt;
      const bool average = (salt % 2) == 0;
      INFO("policy " << kind_name(k) << ", N = " << N << ", n = " << n << ", average = " << average);
      // Every rank computes its own input; rank 0, which checks the result (the others are
      // compared with it bit for bit), computes every rank's input for the references.
      std::vector<std::vector<float>> x(un);
      for (int q = 0; q < N; ++q)
        if (q == r || r == 0) x[static_cast<std::size_t>(q)] = inputs(q, n, salt);
      std::vector<float> g = x[static_cast<std::size_t>(r)];
      std::size_t bytes = 0;
      with_policy(k, [&](auto pol) {
        auto st = pol.make_state(n);
        bytes = grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, average);
      });
      CHECK(differing_from_rank0(r, sync, g) == 0);
      if (N == 1 || n == 0) CHECK(bytes == 0);
      else CHECK(bytes > 0);
      if (k == kind::none) {  // exactly what the plain ring allreduce computes
        std::vector<float> plain = x[static_cast<std::size_t>(r)];
        if (average) gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{plain}, gsync::op::avg{});
        else gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{plain}, gsync::op::sum{});
        CHECK((n == 0 || std::memcmp(plain.data(), g.data(), n * sizeof(float)) == 0));  // (memcmp of null is UB)
      }
      if (r != 0) continue;

      std::vector<double> ref(n, 0.0);
      for (const auto& xr : x)
        for (std::size_t i = 0; i < n; ++i) ref[i] += xr[i];
      if (average)
        for (auto& v : ref) v /= N;
      double sum_abs = 0;  // max over i of sum over ranks |x|, for float-type tolerances
      for (std::size_t i = 0; i < n; ++i) {
        double s = 0;
        for (const auto& xr : x) s += std::fabs(static_cast<double>(xr[i]));
        sum_abs = std::max(sum_abs, s);
      }
      std::size_t wrong = 0;
      double worst = 0;
      auto check_within = [&](const std::vector<double>& tol) {
        for (std::size_t i = 0; i < n; ++i) {
          const double err = std::fabs(static_cast<double>(g[i]) - ref[i]);
          worst = std::max(worst, err / tol[i]);
          wrong += err <= tol[i] ? 0 : 1;
        }
      };
      switch (k) {
        case kind::none: {
          // Float-close to the double sum (N roundings at most).
          check_within(std::vector<double>(n, N * 0x1p-23 * sum_abs + 1e-30));
          break;
        }
        case kind::fp16:
        case kind::bf16: {
          // Each input and each of the N-1 partial sums is rounded once to the 16-bit type
          // (relative error 2^-11 for half, 2^-8 for bfloat16), the avg division once more;
          // half's subnormal step 2^-24 adds at most N+1 absolute roundings.
          const double u = k == kind::fp16 ? 0x1p-11 : 0x1p-8;
          const double scale = average ? 1.0 / N : 1.0;
          check_within(std::vector<double>(n, (N + 1) * u * sum_abs * scale * 1.01 + (N + 1) * 0x1p-24));
          break;
        }
        case kind::int8_nearest:
        case kind::int8_stochastic:
          check_within(int8_bound(x, ref, 64, k == kind::int8_stochastic, average));
          break;
        case kind::topk_all: {
          // Every entry is sent: the float sum in rank order, bit for bit.
          for (std::size_t i = 0; i < n; ++i) {
            float s = 0;
            for (const auto& xr : x) s += xr[i];
            if (average) s = s / static_cast<float>(N);
            wrong += std::bit_cast<std::uint32_t>(s) == std::bit_cast<std::uint32_t>(g[i]) ? 0 : 1;
          }
          break;
        }
        case kind::topk_tenth: {
          // Sum over ranks of each rank's own top-k entries, in rank order.
          const std::size_t kk = grad::topk_count(n, 0.1);
          std::vector<float> expect(n, 0.0f);
          for (const auto& xr : x)
            for (const std::size_t i : reference_topk(xr, kk)) expect[i] += xr[i];
          if (average)
            for (auto& v : expect) v = v / static_cast<float>(N);
          for (std::size_t i = 0; i < n; ++i) wrong += std::bit_cast<std::uint32_t>(expect[i]) == std::bit_cast<std::uint32_t>(g[i]) ? 0 : 1;
          break;
        }
      }
      INFO("worst error / tolerance = " << worst);
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

// --- quantizer ---------------------------------------------------------------------------

TEST_CASE("quantize: nearest rounding errs by at most scale/2 per element, special blocks") {
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = input(3, i, 42) * (i % 5 == 0 ? 1000.0f : 1.0f);
  std::vector<std::int8_t> q(x.size());
  std::vector<float> d(x.size());
  for (std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{256}, x.size()}) {
    std::size_t bad = 0;
    for (std::size_t off = 0; off < x.size(); off += block) {
      const std::size_t len = std::min(block, x.size() - off);
      const auto s = grad::scale_of(x.data() + off, len);
      REQUIRE(s.finite);
      double amax = 0;
      for (std::size_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[off + i])));
      CHECK(s.scale == doctest::Approx(amax / 127).epsilon(1e-6));
      grad::quantize_block(x.data() + off, len, s, q.data() + off, grad::rounding::nearest, {}, 0);
      grad::dequantize_block(q.data() + off, len, s.scale, d.data() + off);
      // scale/2 up to the float rounding of 127/amax and of q*scale: |x|*2^-22 <= 127*scale*2^-22
      // plus half an ulp of the product, below 1e-4 * scale together.
      for (std::size_t i = 0; i < len; ++i) {
        bad += std::fabs(static_cast<double>(x[off + i]) - d[off + i]) <= s.scale * (0.5 + 1e-4) ? 0 : 1;
        bad += q[off + i] != -128 ? 0 : 1;  // levels are -127..127
      }
    }
    CHECK(bad == 0);
  }
  // The extreme value of a block maps to +-127 exactly.
  const float two[] = {-3.0f, 1.0f};
  const auto s2 = grad::scale_of(two, 2);
  std::int8_t q2[2];
  grad::quantize_block(two, 2, s2, q2, grad::rounding::nearest, {}, 0);
  CHECK(q2[0] == -127);
  CHECK(q2[1] == 42);  // 127/3 = 42.33

  SUBCASE("zero and negligible blocks are sent as zeros with scale 0") {
    const float z[] = {0.0f, -0.0f, 1e-31f, -1e-35f};
    const auto s = grad::scale_of(z, 4);
    CHECK(s.finite);
    CHECK(s.scale == 0.0f);
    std::int8_t qz[4] = {1, 1, 1, 1};
    grad::quantize_block(z, 4, s, qz, grad::rounding::stochastic, grad::counter_rng::make(1, 0, 0, 0), 0);
    for (auto v : qz) CHECK(v == 0);
  }
  SUBCASE("a NaN or an Inf makes the whole block NaN") {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      float b[] = {1.0f, 2.0f, bad, 4.0f};
      const auto s = grad::scale_of(b, 4);
      CHECK_FALSE(s.finite);
      CHECK(std::isnan(s.scale));
      std::int8_t qb[4];
      float db[4];
      grad::quantize_block(b, 4, s, qb, grad::rounding::nearest, {}, 0);
      grad::dequantize_block(qb, 4, s.scale, db);
      for (float v : db) CHECK(std::isnan(v));
      grad::update_residual(b, qb, 4, s);  // the residual is reset, never NaN
      for (float v : b) CHECK(v == 0.0f);
    }
  }
}

TEST_CASE("quantize: stochastic rounding is unbiased, deterministic per (seed, rank, step), within one scale") {
  // Levels with fractional parts 0.1 .. 0.9 (nearest rounding is biased by up to 0.5 scale there).
  const std::size_t n = 64;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = (static_cast<float>(i) - 32.0f) + 0.1f + 0.8f * static_cast<float>(i % 9) / 8.0f;
  x[0] = 127.0f;  // fixes amax = 127, scale = 1: levels are the values themselves
  const auto s = grad::scale_of(x.data(), n);
  REQUIRE(s.scale == 1.0f);
  // M draws (one per step). A draw is floor or ceil of v with probabilities making its mean v:
  // its standard deviation is sqrt(f(1-f)) * scale <= scale/2, so the mean of M draws deviates
  // from v by more than 5 sigma = 2.5 scale / sqrt(M) with probability below 1e-6 per element.
  // The 24-bit uniform and the float rounding of v + u shift the mean by below 2^-16 scale.
  const int M = 4000;
  std::vector<double> mean(n, 0.0);
  std::vector<std::int8_t> q(n), q_again(n);
  std::size_t beyond_one_scale = 0, not_repeatable = 0;
  for (int step = 0; step < M; ++step) {
    const auto rng = grad::counter_rng::make(99, 2, static_cast<std::uint64_t>(step), 0);
    grad::quantize_block(x.data(), n, s, q.data(), grad::rounding::stochastic, rng, 1000);
    grad::quantize_block(x.data(), n, s, q_again.data(), grad::rounding::stochastic, grad::counter_rng::make(99, 2, static_cast<std::uint64_t>(step), 0), 1000);
    not_repeatable += q == q_again ? 0 : 1;
    for (std::size_t i = 0; i < n; ++i) {
      mean[i] += q[i] * static_cast<double>(s.scale) / M;
      beyond_one_scale += std::fabs(q[i] * static_cast<double>(s.scale) - x[i]) < s.scale ? 0 : 1;
    }
  }
  CHECK(not_repeatable == 0);
  CHECK(beyond_one_scale == 0);
  const double tol = 2.5 / std::sqrt(static_cast<double>(M)) + 0x1p-16;
  std::size_t biased = 0, nearest_biased = 0;
  std::vector<std::int8_t> qn(n);
  grad::quantize_block(x.data(), n, s, qn.data(), grad::rounding::nearest, {}, 0);
  for (std::size_t i = 0; i < n; ++i) {
    biased += std::fabs(mean[i] - x[i]) <= tol ? 0 : 1;
    nearest_biased += std::fabs(qn[i] - static_cast<double>(x[i])) > tol ? 1 : 0;
  }
  CHECK(biased == 0);
  CHECK(nearest_biased > n / 2);  // the test has the power to see a bias
  // Another step, rank or seed gives other draws.
  std::vector<std::int8_t> a(n), b(n), c(n);
  grad::quantize_block(x.data(), n, s, a.data(), grad::rounding::stochastic, grad::counter_rng::make(99, 2, 5, 0), 0);
  grad::quantize_block(x.data(), n, s, b.data(), grad::rounding::stochastic, grad::counter_rng::make(99, 3, 5, 0), 0);
  grad::quantize_block(x.data(), n, s, c.data(), grad::rounding::stochastic, grad::counter_rng::make(98, 2, 5, 0), 0);
  CHECK(a != b);
  CHECK(a != c);
}

TEST_CASE("quantize: the error-feedback residual is exactly e - D(Q(e))") {
  for (auto mode : {grad::rounding::nearest, grad::rounding::stochastic}) {
    const std::size_t n = 300;
    std::vector<float> g = inputs(0, n, 5), r = inputs(1, n, 6), e(n);
    for (std::size_t i = 0; i < n; ++i) e[i] = g[i] + r[i];
    std::vector<float> buf = e;  // what the schedule does: r += g, quantize, update in place
    std::vector<std::int8_t> q(n);
    std::vector<float> d(n);
    std::size_t not_exact = 0;
    for (std::size_t off = 0; off < n; off += 128) {
      const std::size_t len = std::min<std::size_t>(128, n - off);
      const auto s = grad::scale_of(buf.data() + off, len);
      grad::quantize_block(buf.data() + off, len, s, q.data() + off, mode, grad::counter_rng::make(1, 0, 0, 0), off);
      grad::update_residual(buf.data() + off, q.data() + off, len, s);
      grad::dequantize_block(q.data() + off, len, s.scale, d.data() + off);
    }
    for (std::size_t i = 0; i < n; ++i) not_exact += std::bit_cast<std::uint32_t>(buf[i]) == std::bit_cast<std::uint32_t>(e[i] - d[i]) ? 0 : 1;
    CHECK(not_exact == 0);
  }
}

// --- top-k selection ----------------------------------------------------------------------

TEST_CASE("topk: count, selection with ties broken by index, NaN first") {
  CHECK(grad::topk_count(0, 0.5) == 0);
  CHECK(grad::topk_count(1, 0.001) == 1);
  CHECK(grad::topk_count(1000, 0.01) == 10);
  CHECK(grad::topk_count(1001, 0.01) == 11);
  CHECK(grad::topk_count(7, 1.0) == 7);
  for (double bad : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      (void)grad::topk_count(10, bad);
      FAIL("ratio " << bad << " accepted");
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::invalid_argument);
    }
  }
  std::vector<float> scratch;
  const std::vector<float> e = {0.5f, -3.0f, 2.0f, -2.0f, 2.0f, 0.0f, 1.0f};
  std::vector<std::uint32_t> idx(3);
  grad::select_topk(e, 3, scratch, idx.data());
  CHECK(idx == std::vector<std::uint32_t>{1, 2, 3});  // |-3|, then the first two of the three 2s
  const std::vector<float> with_nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f, -std::numeric_limits<float>::infinity()};
  std::vector<std::uint32_t> two(2);
  grad::select_topk(with_nan, 2, scratch, two.data());
  CHECK(two == std::vector<std::uint32_t>{1, 3});
  // Random sweep against a sorting reference.
  for (std::size_t n : {1u, 2u, 17u, 1000u}) {
    std::vector<float> v = inputs(4, n, n);
    for (std::size_t i = 0; i < n; i += 5) v[i] = 0.25f;  // many ties
    for (std::size_t k : {std::size_t{1}, (n + 1) / 2, n}) {
      std::vector<std::uint32_t> got(k);
      grad::select_topk(v, k, scratch, got.data());
      auto want = reference_topk(v, k);
      std::sort(want.begin(), want.end());
      CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end()));
    }
  }
}

TEST_CASE("topk: the sampled selection equals the full one on large inputs, and falls back where the sample misleads") {
  std::vector<float> scratch;
  std::vector<std::uint32_t> cand;
  const std::size_t n = 200003;
  // expect: 1 the sampled method must succeed, 0 it must fall back, -1 either.
  auto check_same = [&](const std::vector<float>& v, std::size_t k, int expect) {
    CAPTURE(k);
    std::vector<std::uint32_t> full(k), got(k);
    grad::detail::select_topk_full(v, k, scratch, full.data());
    const bool sampled = grad::detail::select_topk_sampled(v, k, scratch, cand, got.data());
    if (expect >= 0) CHECK(sampled == (expect == 1));
    if (sampled) CHECK(got == full);
    std::fill(got.begin(), got.end(), 0u);
    grad::select_topk(v, k, scratch, cand, got.data());  // whichever method it takes
    CHECK(got == full);
  };
  std::vector<float> v = inputs(2, n, 11);
  for (std::size_t k : {std::size_t{1}, std::size_t{20}, std::size_t{2000}, n / 16}) check_same(v, k, 1);
  // Ties at the threshold, broken by index: 60 more elements of the 2000th largest magnitude.
  {
    std::vector<std::uint32_t> top(2000);
    grad::detail::select_topk_full(v, 2000, scratch, top.data());
    float tau = std::numeric_limits<float>::infinity();
    for (auto i : top) tau = std::min(tau, grad::topk_key(v[i]));
    for (std::size_t i = 5; i < n; i += n / 60) v[i] = (i % 2 ? tau : -tau);
    check_same(v, 2000, 1);
  }
  // Mostly equal magnitudes: the bound admits everything, more than the cap: the full method.
  std::vector<float> flat(n, 0.5f);
  for (std::size_t i = 0; i < n; i += 2) flat[i] = -0.5f;
  for (std::size_t i = 0; i < n; i += 1000) flat[i] = 2.0f;
  check_same(flat, 1000, 0);
  // NaN and Inf come first.
  std::vector<float> w = inputs(3, n, 5);
  w[7] = std::numeric_limits<float>::quiet_NaN();
  w[n - 1] = -std::numeric_limits<float>::infinity();
  check_same(w, 100, 1);
  // Large values only at the sampled positions (a stride that matches the data): the bound is
  // too high, fewer than k candidates, the full method.
  std::vector<float> spikes = inputs(4, n, 6);
  for (auto& x : spikes) x *= 1e-3f;
  for (std::size_t j = 0; j < (std::size_t{1} << 14); ++j) spikes[j * n / (std::size_t{1} << 14)] = 1.0f + static_cast<float>(j);
  check_same(spikes, 2000, 0);
  // Large values only between them: the slack of the bound still finds every one.
  std::vector<float> gaps = inputs(4, n, 7);
  for (auto& x : gaps) x *= 1e-3f;
  for (std::size_t i = 1; i < n; i += 4099) gaps[i] = 1.0f;
  check_same(gaps, 40, 1);
}

// --- compressed_allreduce -----------------------------------------------------------------

TEST_CASE("compressed_allreduce: every policy, world sizes 1..8, identical on every rank, within its error bound") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    gsync_test::run_inproc(n, [](auto& c, auto& s) { sweep_world(c, s); }, short_config());
    gsync_test::run_tcp(n, [](auto& c, auto& s) { sweep_world(c, s); }, short_config());
  }
}

TEST_CASE("compressed_allreduce: wire bytes are what the transport sends, int8 <= 0.3x and topk(0.01) <= 0.1x of none") {
  for (int N : {1, 2, 3, 4, 5, 8}) {
    for (std::size_t n : {std::size_t{5}, std::size_t{4099}, std::size_t{1000000}}) {
      if (N != 4 && n == 1000000) continue;  // the ratios are checked at N = 4; keeps the test fast
      CAPTURE(N);
      CAPTURE(n);
      std::vector<std::size_t> per_kind(5, 0);
      std::mutex m;
      run_counting(N, [&](auto& comm, gsync_test::world_sync&) {
        std::vector<float> g = inputs(comm.rank(), n, 77);
        std::size_t k = 0;
        auto one = [&](auto pol) {
          auto st = pol.make_state(n);
          const std::size_t before = comm.transport().sent;
          const std::size_t said = grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true);
          const std::size_t did = comm.transport().sent - before;
          CHECK(said == did);
          std::lock_guard lk(m);
          if (comm.rank() == 0) per_kind[k] = said;
          ++k;
        };
        one(compress::none{});
        one(compress::fp16{.error_feedback = true});
        one(compress::bf16{});
        one(compress::int8{});
        one(compress::topk{.ratio = 0.01});
      });
      if (N == 4 && n == 1000000) {
        const double none = static_cast<double>(per_kind[0]);
        MESSAGE("bytes per rank at N=4, n=1e6: none " << per_kind[0] << ", fp16 " << per_kind[1] << ", int8 " << per_kind[3]
                                                       << " (" << per_kind[3] / none << "x), topk(0.01) " << per_kind[4] << " ("
                                                       << per_kind[4] / none << "x)");
        CHECK(per_kind[1] * 2 == per_kind[0]);
        CHECK(static_cast<double>(per_kind[3]) <= 0.3 * none);
        CHECK(static_cast<double>(per_kind[4]) <= 0.1 * none);
      }
    }
  }
}

TEST_CASE("compressed_allreduce: error feedback makes the sum over steps converge (and its absence does not)") {
  // N ranks, T steps of gradients g_t,r = a_r + noise (a fixed per rank). With EF, what is not
  // sent stays in the residuals, so  sum_t result_t = sum_t mean_r g_t,r - (mean of the worker
  // residuals) - (server residual, int8), exactly up to float rounding; the residuals stay
  // bounded, so the relative error of the running sum shrinks like 1/T. Without EF the unsent
  // part is lost every step and the error grows like T.
  const int N = 4, T = 150;
  const std::size_t n = 2000;
  auto run = [&](auto pol) {
    std::vector<double> truth(n, 0.0), synced(n, 0.0), residual_mean(n, 0.0);
    std::mutex m;
    gsync_test::run_inproc(
        N,
        [&](auto& comm, gsync_test::world_sync& sync) {
          const int r = comm.rank();
          auto st = pol.make_state(n);
          const std::vector<float> a = inputs(r, n, 1234);
          std::vector<double> mine(n, 0.0);
          for (int t = 0; t < T; ++t) {
            std::vector<float> g(n);
            for (std::size_t i = 0; i < n; ++i) g[i] = a[i] + 0.3f * input(r, i, 5000 + static_cast<std::uint64_t>(t));
            {
              std::lock_guard lk(m);
              for (std::size_t i = 0; i < n; ++i) truth[i] += static_cast<double>(g[i]) / N;
            }
            grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true);
            for (std::size_t i = 0; i < n; ++i) mine[i] += g[i];
          }
          std::lock_guard lk(m);
          if (r == 0) synced = mine;
          for (std::size_t i = 0; i < st.residual.size(); ++i) residual_mean[i] += static_cast<double>(st.residual[i]) / N;
          if constexpr (std::is_same_v<decltype(pol), compress::int8>) {
            const auto own = gsync::split(n, N, static_cast<std::size_t>(r));
            for (std::size_t i = 0; i < st.server_residual.size(); ++i) residual_mean[own.offset + i] += st.server_residual[i];
          }
          (void)sync;
        },
        short_config());
    double err = 0, norm = 0, identity = 0;
    for (std::size_t i = 0; i < n; ++i) {
      err += (synced[i] - truth[i]) * (synced[i] - truth[i]);
      norm += truth[i] * truth[i];
      const double d = synced[i] + residual_mean[i] - truth[i];
      identity += d * d;
    }
    return std::array<double, 2>{std::sqrt(err / norm), std::sqrt(identity / norm)};
  };
  const auto topk_ef = run(compress::topk{.ratio = 0.02, .error_feedback = true});
  const auto topk_plain = run(compress::topk{.ratio = 0.02, .error_feedback = false});
  const auto int8_ef = run(compress::int8{.block = 256, .round = grad::rounding::stochastic, .error_feedback = true});
  const auto int8_plain = run(compress::int8{.block = 256, .round = grad::rounding::nearest, .error_feedback = false});
  MESSAGE("relative error of the summed results after " << T << " steps: topk+EF " << topk_ef[0] << ", topk " << topk_plain[0]
                                                         << ", int8+EF " << int8_ef[0] << ", int8 " << int8_plain[0]);
  CHECK(topk_ef[1] < 1e-4);  // the EF identity holds (float rounding only)
  CHECK(int8_ef[1] < 1e-4);
  CHECK(topk_ef[0] < 0.2);
  CHECK(topk_plain[0] > 0.5);  // most of every step's gradient is dropped
  CHECK(topk_ef[0] * 5 < topk_plain[0]);
  CHECK(int8_ef[0] < int8_plain[0]);
}

TEST_CASE("compressed_allreduce: a NaN or Inf on one rank reaches every rank, residuals stay finite") {
  const int N = 3;
  const std::size_t n = 1000;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    gsync_test::run_inproc(
        N,
        [&](auto& comm, gsync_test::world_sync& sync) {
          const int r = comm.rank();
          auto check = [&](auto pol, const char* name) {
            INFO(name);
            auto st = pol.make_state(n);
            std::vector<float> g = inputs(r, n, 9);
            if (r == 1) g[517] = bad;
            grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true);
            std::size_t nonfinite = 0;
            for (float v : g) nonfinite += std::isfinite(v) ? 0 : 1;
            CHECK(nonfinite > 0);
            CHECK(differing_from_rank0(r, sync, g) == 0);
            if constexpr (requires { st.residual; }) {
              std::size_t bad_res = 0;
              for (float v : st.residual) bad_res += std::isfinite(v) ? 0 : 1;
              CHECK(bad_res == 0);
            }
            return g;
          };
          check(compress::none{}, "none");
          check(compress::fp16{.error_feedback = true}, "fp16");
          check(compress::bf16{.error_feedback = true}, "bf16");
          check(compress::topk{.ratio = 0.01, .error_feedback = true}, "topk");
          const auto g = check(compress::int8{.block = 100}, "int8");
          // The whole 100-element block around element 517 of chunk 1 (offset 334) is NaN.
          const auto ch = gsync::split(n, N, 1);
          const std::size_t b0 = ch.offset + (517 - ch.offset) / 100 * 100;
          std::size_t nan_in_block = 0;
          for (std::size_t i = b0; i < std::min(b0 + 100, ch.offset + ch.count); ++i) nan_in_block += std::isnan(g[i]) ? 1 : 0;
          CHECK(nan_in_block == std::min<std::size_t>(100, ch.offset + ch.count - b0));
          CHECK(std::isfinite(g[0]));
        },
        short_config());
  }
}

TEST_CASE("compressed_allreduce: argument errors") {
  gsync_test::run_inproc(2, [](auto& comm, gsync_test::world_sync&) {
    std::vector<float> g(10, 1.0f);
    auto kind_of = [](auto f) {
      try {
        f();
      } catch (const gsync::error& e) {
        return e.kind();
      }
      return gsync::errc{};
    };
    compress::int8 pol;
    auto st = pol.make_state(11);
    CHECK(kind_of([&] { grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true); }) == gsync::errc::invalid_argument);
    CHECK(kind_of([&] { (void)compress::int8{.block = 0}.make_state(10); }) == gsync::errc::invalid_argument);
    CHECK(kind_of([&] { (void)compress::topk{.ratio = 0.0}.make_state(10); }) == gsync::errc::invalid_argument);
    auto ok = compress::topk{.ratio = 0.5}.make_state(10);
    CHECK(grad::compressed_allreduce(comm, std::span<float>{g}, compress::topk{.ratio = 0.5}, ok, false) == 5 * 8);
    // All ten values tie: both ranks send indices 0..4 (ties go to the lowest indices).
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (i < 5 ? 2.0f : 0.0f));
  }, short_config());
}

TEST_CASE("quantize: the AVX2 copies of the int8 loops give the baseline's bits") {
#if GSYNC_HAVE_AVX2_PATH
  if (!gsync::detail::avx2_available()) {
    MESSAGE("this CPU has no AVX2 (or GSYNC_NO_AVX2 is set): nothing to compare");
    return;
  }
  namespace d = gsync::grad::detail;
  // Lengths around the vector widths, values over many scales, including the block's extremes.
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{31}, std::size_t{33}, std::size_t{256}, std::size_t{1001}}) {
    CAPTURE(n);
    std::vector<float> x = inputs(5, n, n);
    for (std::size_t i = 0; i < n; i += 13) x[i] *= 1e6f;
    CHECK(d::max_abs_bits_avx2(x.data(), n) == d::max_abs_bits_body(x.data(), n));
    const auto s = grad::scale_of(x.data(), n);
    std::vector<std::int8_t> qa(n), qb(n);
    d::quantize_nearest_avx2(x.data(), n, s.inverse, qa.data());
    d::quantize_nearest_body(x.data(), n, s.inverse, qb.data());
    CHECK(qa == qb);
    const auto rng = grad::counter_rng::make(3, 1, 2, 0);
    d::quantize_stochastic_avx2(x.data(), n, s.inverse, qa.data(), rng, 1000);
    d::quantize_stochastic_body(x.data(), n, s.inverse, qb.data(), rng, 1000);
    CHECK(qa == qb);
    std::vector<float> ea = x, eb = x;
    d::residual_avx2(ea.data(), qa.data(), n, s.scale);
    d::residual_body(eb.data(), qb.data(), n, s.scale);
    CHECK(std::memcmp(ea.data(), eb.data(), 4 * n) == 0);
    d::dequantize_avx2<true>(qa.data(), n, s.scale, ea.data());
    d::dequantize_body<true>(qb.data(), n, s.scale, eb.data());
    CHECK(std::memcmp(ea.data(), eb.data(), 4 * n) == 0);
    d::dequantize_avx2<false>(qa.data(), n, s.scale, ea.data());
    d::dequantize_body<false>(qb.data(), n, s.scale, eb.data());
    CHECK(std::memcmp(ea.data(), eb.data(), 4 * n) == 0);
  }
  // Non-finite inputs: the bit-pattern max sees them on both paths.
  const float odd[] = {1.0f, -std::numeric_limits<float>::infinity(), 2.0f, std::numeric_limits<float>::quiet_NaN(), 0.5f, 0.25f, 3.0f, -1.0f, 9.0f};
  CHECK(d::max_abs_bits_avx2(odd, 9) == d::max_abs_bits_body(odd, 9));
#else
  MESSAGE("no AVX2 path on this target");
#endif
}

TEST_CASE("int8 exchange: a record decodes the same in pieces of any size as whole") {
  for (std::size_t block : {std::size_t{1}, std::size_t{5}, std::size_t{64}}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{1000}}) {
      CAPTURE(block);
      CAPTURE(n);
      const grad::int8_wire_layout L(n, 3, block);
      const gsync::range ch = L.chunk(2);  // the shortest chunk: its record has padding
      std::vector<float> x = inputs(1, ch.count, 3);
      std::vector<std::uint8_t> rec(L.record);
      grad::detail::int8_encode(ch.count, L, grad::rounding::nearest, {}, 0, false, rec.data(),
                                [&](std::size_t off, std::size_t) { return x.data() + off; });
      std::vector<float> whole(ch.count, 0.5f), pieces(ch.count, 0.5f), scales(L.blocks);
      grad::detail::int8_decode<true>(rec.data(), ch.count, L, whole.data());
      for (std::size_t piece : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{12}, L.record}) {
        std::fill(pieces.begin(), pieces.end(), 0.5f);
        grad::detail::int8_record_decoder dec{L, ch.count, pieces.data(), scales.data()};
        for (std::size_t at = 0; at < L.record; at += piece)
          dec.consume<true>(std::span<const std::byte>(reinterpret_cast<const std::byte*>(rec.data()) + at, std::min(piece, L.record - at)));
        CHECK(dec.pos == L.record);
        CHECK((ch.count == 0 || std::memcmp(whole.data(), pieces.data(), 4 * ch.count) == 0));  // (memcmp of null is UB)
      }
    }
  }
}

TEST_CASE("compressed_allreduce int8: shared memory and mixed jobs, identical on every rank, the same bits run after run") {
  // The exchange pushes its queued records forward between blocks (transport progress_sends):
  // through shared-memory rings (one host) and through both kinds of link at once (2 hosts).
  auto body = [](auto& comm, gsync_test::world_sync& sync) {
    const int r = comm.rank(), N = comm.size();
    for (const std::size_t n : {std::size_t{3}, std::size_t{4099}, std::size_t{300007}}) {
      CAPTURE(n);
      const compress::int8 pol{.block = 128, .round = grad::rounding::nearest, .error_feedback = false};
      std::vector<std::vector<float>> x(static_cast<std::size_t>(N));
      for (int q = 0; q < N; ++q) x[static_cast<std::size_t>(q)] = inputs(q, n, n);
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        auto st = pol.make_state(n);
        std::vector<float> g = x[static_cast<std::size_t>(r)];
        grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true);
        CHECK(differing_from_rank0(r, sync, g) == 0);
        if (run == 0) first = g;
        else CHECK(std::memcmp(first.data(), g.data(), 4 * n) == 0);
      }
      if (r != 0) continue;
      std::vector<double> ref(n, 0.0);
      for (const auto& xr : x)
        for (std::size_t i = 0; i < n; ++i) ref[i] += xr[i] / N;
      const auto bound = int8_bound(x, ref, 128, false, true);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += std::fabs(first[i] - ref[i]) <= bound[i] ? 0 : 1;
      CHECK(wrong == 0);
    }
  };
  SUBCASE("one host, 4 ranks") { gsync_test::run_shm(4, body, short_config()); }
  SUBCASE("two hosts, 3 + 2 ranks") { gsync_test::run_mixed(5, 3, body, short_config()); }
}

TEST_CASE("compressed_allreduce int8: ranks that disagree on the block size get a mismatch, not a hang") {
  gsync_test::run_inproc(3, [](auto& comm, gsync_test::world_sync&) {
    const compress::int8 pol{.block = comm.rank() == 1 ? 64u : 128u, .error_feedback = false};
    auto st = pol.make_state(5000);
    std::vector<float> g = inputs(comm.rank(), 5000, 1);
    gsync::errc kind{};
    std::string what;
    try {
      grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true);
    } catch (const gsync::error& e) {
      kind = e.kind();
      what = e.what();
    }
    INFO(what);
    // Rank 1's records are shorter, so the ranks that receive them (and rank 1 itself, once the
    // communicator fails) see a mismatch or the failure it caused; nobody waits for the timeout.
    CHECK(kind != gsync::errc{});
    CHECK(kind != gsync::errc::timeout);
  }, short_config());
}

// The library's compression seam of the synchronizer (grad/compressed_reducer.hpp): every bucket
// reduced with the policy, within its error bound of the exact average, on the policy's wire
// volume; 16-bit buckets refused.
TEST_CASE("compressed_reducer: the synchronizer reduces its buckets with a compression policy") {
  for (int n : {1, 3, 4}) {
    CAPTURE(n);
    gsync_test::run_inproc(n, [](auto& comm, gsync_test::world_sync&) {
      using X = std::remove_reference_t<decltype(comm.transport())>;
      const int w = comm.size(), r = comm.rank();
      const std::vector<std::size_t> sizes = {1000, 37, 4096};
      auto value = [](int rank, std::size_t t, std::size_t i, int step) {
        return std::sin(0.31f * static_cast<float>(rank + 1) + 0.013f * static_cast<float>(i) + 0.5f * static_cast<float>(t + step));
      };
      grad::synchronizer_options o;
      o.bucket_bytes = 8192;
      o.first_bucket_bytes = 2048;
      auto run = [&](auto reducer, std::uint64_t& wire_bytes) {
        std::vector<std::vector<float>> g(sizes.size());
        for (std::size_t t = 0; t < sizes.size(); ++t) g[t].resize(sizes[t]);
        grad::synchronizer<X, decltype(reducer)> sync(comm, o, std::move(reducer));
        for (std::size_t t = 0; t < sizes.size(); ++t) sync.add(std::span<float>{g[t]}, "t" + std::to_string(t));
        sync.build();
        REQUIRE(sync.plan().bucket_count() >= 2);
        wire_bytes = 0;
        double worst = 0;
        for (int step = 0; step < 3; ++step) {
          for (std::size_t t = 0; t < sizes.size(); ++t)
            for (std::size_t i = 0; i < sizes[t]; ++i) g[t][i] = value(r, t, i, step);
          for (std::size_t t = sizes.size(); t-- > 0;) sync.mark_ready(t);
          const auto res = sync.finish();
          REQUIRE(res.synced);
          wire_bytes += res.stats.bytes_on_wire;
          for (std::size_t t = 0; t < sizes.size(); ++t)
            for (std::size_t i = 0; i < sizes[t]; ++i) {
              double avg = 0;
              for (int k = 0; k < w; ++k) avg += value(k, t, i, step);
              worst = std::max(worst, std::fabs(g[t][i] - avg / w));
            }
        }
        return worst;
      };
      std::uint64_t none_bytes = 0, int8_bytes = 0;
      const double none_err = run(grad::compressed_reducer<compress::none>{}, none_bytes);
      const double int8_err = run(grad::compressed_reducer<compress::int8>{}, int8_bytes);
      CHECK(none_err <= 1e-6);  // float32 on the wire: exact up to float rounding
      // |values| <= 1: one int8 step is at most 1/127 per quantization, two per element (a rank's
      // contribution, then the owner's re-quantization of the reduced chunk), error feedback aside.
      CHECK(int8_err <= 2.5 / 127);
      if (w > 1) {
        CHECK(int8_err > 0);  // it did quantize
        CHECK(int8_bytes <= none_bytes * 3 / 10);
      }
      // A 16-bit bucket: refused, the policy chooses the wire encoding.
      grad::synchronizer_options o16 = o;
      o16.wire = grad::wire_dtype::bfloat16;
      std::vector<float> a(100, 1.0f);
      grad::synchronizer<X, grad::compressed_reducer<compress::int8>> sync(comm, o16);  // the reducer by default
      sync.add(std::span<float>{a}, "a");
      sync.build();
      try {
        sync.mark_ready(0);
        (void)sync.finish();
        FAIL("a bf16 bucket was accepted");
      } catch (const gsync::error& e) {
        CHECK(e.code() == gsync::errc::invalid_argument);
        CHECK(std::string(e.what()).find("float32") != std::string::npos);
      }
    }, short_config());
  }
}
