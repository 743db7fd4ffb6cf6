// gsync-compress-bench: time and wire bytes of gradient sync per compression policy
// (include/gsync/grad/compressed_allreduce.hpp), run as one process per rank:
//
//   gsyncrun -n 4 -- gsync-compress-bench [--count 25M] [--iters 5] [--warmup 2]
//
// Every rank fills a float32 buffer of --count elements with a deterministic gradient-like
// pattern and averages it over the ranks with each policy in turn: none (float32 ring), fp16,
// bf16, int8 (block 256, nearest, EF), int8 stochastic (EF), topk 1% (EF). Each policy gets its
// own state (made once, as a training loop would), --warmup untimed calls (page faults, first
// allocation of the state's scratch), then --iters timed calls, each started after a barrier; a
// call's time is the slowest rank's (max over ranks). Printed per policy (rank 0):
//   time_ms      median and best of the timed calls
//   speedup      none's median / this median
//   sent_MB      payload bytes this rank sent per call (as compressed_allreduce reports them)
//   bytes_x      sent_MB / none's sent_MB
//   wire_ms@1G   sent bytes / 125 MB/s: the time the payload alone needs on a 1000 Mbit/s link
//                (each rank has its own full-duplex link; a model, not a measurement)
//   max_err      largest |result - float32 average| of the first call, relative to max |average|
// On one host the ranks talk through shared memory (or loopback TCP with GSYNC_SHM_DISABLE=1),
// where compute, not the wire, dominates; on a 1 Gbit/s network the wire_ms column dominates.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gsync/allreduce.hpp>
#include <gsync/barrier.hpp>
#include <gsync/grad/compressed_allreduce.hpp>

namespace {

/// Parses "25M", "1G", "4096" (1000-based suffixes for element counts).
std::optional<std::size_t> parse_count(std::string_view s) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
  std::size_t v = 0, i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + static_cast<std::size_t>(s[i] - '0');
  std::size_t mult = 1;
  if (i < s.size()) {
    switch (s[i]) {
      case 'k': case 'K': mult = 1000; break;
      case 'm': case 'M': mult = 1000000; break;
      case 'g': case 'G': mult = 1000000000; break;
      default: return std::nullopt;
    }
    ++i;
  }
  if (i != s.size()) return std::nullopt;
  return v * mult;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "gsync-compress-bench: %s\nusage: gsync-compress-bench [--count 25M] [--iters N] [--warmup N]\n", why);
  std::exit(2);
}

/// A gradient-like value of rank r, element i: smooth per-rank signal plus hash noise.
float gradient(int r, std::size_t i) {
  const std::uint64_t h = gsync::grad::splitmix64(static_cast<std::uint64_t>(r) << 40 ^ i);
  const float noise = static_cast<float>(static_cast<double>(h >> 40) * 0x1p-24 - 0.5);
  return 1e-3f * (std::sin(static_cast<float>(i % 10007) * 1e-3f) + 0.5f * noise) * static_cast<float>(1 + r % 3);
}

struct result {
  std::string name;
  double median_ms = 0, best_ms = 0, max_err = 0;
  std::size_t sent = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t count = 25000000;
  int iters = 5, warmup = 2;
  for (int a = 1; a < argc; ++a) {
    const std::string_view k = argv[a];
    if (a + 1 >= argc) usage("missing value");
    const std::string_view v = argv[++a];
    if (k == "--count") {
      const auto c = parse_count(v);
      if (!c) usage("bad --count");
      count = *c;
    } else if (k == "--iters") {
      iters = std::atoi(std::string(v).c_str());
    } else if (k == "--warmup") {
      warmup = std::atoi(std::string(v).c_str());
    } else {
      usage("unknown option");
    }
  }
  if (iters < 1 || warmup < 0) usage("--iters must be >= 1 and --warmup >= 0");

  try {
    auto comm = gsync::tcp_communicator::from_env();
    const int r = comm.rank(), N = comm.size();
    std::vector<float> mine(count), g(count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = gradient(r, i);
    // Float32 reference average (in double over ranks would need every rank's data: float32
    // ring sum is accurate to ~N ulp, far below the compressed encodings' errors).
    std::vector<float> ref = mine;
    gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{ref}, gsync::op::avg{});
    float ref_max = 0;
    for (float v : ref) ref_max = std::max(ref_max, std::fabs(v));

    std::vector<result> results;
    auto bench = [&](std::string name, auto pol) {
      auto st = pol.make_state(count);
      result res;
      res.name = std::move(name);
      std::vector<double> times;
      for (int w = 0; w < warmup + iters; ++w) {
        std::copy(mine.begin(), mine.end(), g.begin());
        gsync::barrier(comm);
        const auto t0 = std::chrono::steady_clock::now();
        res.sent = gsync::grad::compressed_allreduce(comm, std::span<float>{g}, pol, st, true);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        gsync::allreduce(comm, std::span<double>{&ms, 1}, gsync::op::max{});
        if (w == 0) {
          double err = 0;
          for (std::size_t i = 0; i < count; ++i) err = std::max(err, static_cast<double>(std::fabs(g[i] - ref[i])));
          res.max_err = err / std::max(1e-30, static_cast<double>(ref_max));
        }
        if (w >= warmup) times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      res.median_ms = times[times.size() / 2];
      res.best_ms = times.front();
      results.push_back(res);
    };
    namespace c = gsync::grad::compress;
    bench("none (f32)", c::none{});
    bench("fp16", c::fp16{});
    bench("bf16", c::bf16{});
    bench("int8+EF", c::int8{});
    bench("int8+EF stoch", c::int8{.round = gsync::grad::rounding::stochastic});
    bench("topk1%+EF", c::topk{.ratio = 0.01});

    if (r == 0) {
      std::printf("# gsync-compress-bench: %d ranks, %zu float32 (%.1f MB), average, %d timed calls after %d warm-up\n", N, count,
                  count * 4 / 1e6, iters, warmup);
      std::printf("%-15s %10s %10s %8s %10s %8s %11s %10s\n", "policy", "median_ms", "best_ms", "speedup", "sent_MB", "bytes_x",
                  "wire_ms@1G", "max_err");
      const auto& base = results.front();
      for (const auto& x : results)
        std::printf("%-15s %10.1f %10.1f %8.2f %10.2f %8.3f %11.1f %10.2e\n", x.name.c_str(), x.median_ms, x.best_ms,
                    base.median_ms / x.median_ms, x.sent / 1e6, base.sent ? static_cast<double>(x.sent) / base.sent : 0.0,
                    x.sent / 125e6 * 1e3, x.max_err);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gsync-compress-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
