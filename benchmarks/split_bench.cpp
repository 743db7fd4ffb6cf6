// gsync-split-bench: what sub-communicators cost (communicator::split), run side by side in one job.
//
//   gsyncrun -n N -- gsync-split-bench [--iters K] [--json FILE]
//
// For allreduces of 8 B, 64 KiB and 4 MiB (float32 sum) it times, as the median of 7 rounds of K
// calls (fewer for the large size):
//   world   - the job's communicator before any split (the endpoint is not shared: no lock);
//   shared  - the same communicator after a split (every transport call takes the endpoint's lock,
//             TCP reads each header before its payload);
//   sub     - a communicator split off with every rank (color 0), the same calls through it;
//   2 subs  - two such communicators driven at once from two threads per rank: the time per pair
//             of calls (one on each), against two calls one after the other on `sub` (x ratio < 2
//             means the two overlapped).
// Rank 0 prints a table (microseconds per call) and, with --json, writes the numbers.
#include <gsync/gsync.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

template <class Comm>
double time_calls(Comm& c, std::vector<float>& buf, int iters) {
  gsync::barrier(c);
  const auto t0 = clk::now();
  for (int i = 0; i < iters; ++i) gsync::allreduce(c, std::span<float>{buf});
  return std::chrono::duration<double, std::micro>(clk::now() - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: gsync-split-bench [--iters K] [--json FILE]\n");
      return 2;
    }
  }
  try {
    auto world = gsync::tcp_communicator::from_env();
    const std::size_t sizes[] = {8, 64 << 10, 4 << 20};
    constexpr int rounds = 7;
    struct row {
      std::size_t bytes;
      double world, shared, sub, pair, seq;
    };
    std::vector<row> rows;
    for (std::size_t b : sizes) rows.push_back({b, 0, 0, 0, 0, 0});
    auto iters_for = [&](std::size_t b) { return std::max(10, static_cast<int>(iters / (1 + b / 16384))); };
    std::vector<float> buf;
    std::vector<double> t;
    for (auto& r : rows) {  // before any split
      buf.assign(r.bytes / sizeof(float), 1.0f);
      time_calls(world, buf, iters_for(r.bytes) / 4);  // warm-up
      t.clear();
      for (int k = 0; k < rounds; ++k) t.push_back(time_calls(world, buf, iters_for(r.bytes)));
      r.world = median(t);
    }
    auto a = world.split(0, world.rank());
    auto b = world.split(0, world.rank());
    for (auto& r : rows) {
      buf.assign(r.bytes / sizeof(float), 1.0f);
      const int n = iters_for(r.bytes);
      time_calls(a, buf, n / 4);
      t.clear();
      for (int k = 0; k < rounds; ++k) t.push_back(time_calls(a, buf, n));
      r.sub = median(t);
      time_calls(world, buf, n / 4);
      t.clear();
      for (int k = 0; k < rounds; ++k) t.push_back(time_calls(world, buf, n));
      r.shared = median(t);
      r.seq = 2 * r.sub;
      std::vector<float> buf2 = buf;
      t.clear();
      for (int k = 0; k < rounds; ++k) {
        gsync::barrier(world);
        const auto t0 = clk::now();
        std::thread th([&] { time_calls(b, buf2, n); });
        time_calls(a, buf, n);
        th.join();
        t.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count() / n);
      }
      r.pair = median(t);
    }
    if (world.rank() == 0) {
      std::printf("# gsync-split-bench: %d ranks, transport %s, float32 sum allreduce, us per call (median of %d rounds)\n",
                  world.size(), std::string(world.transport().name()).c_str(), rounds);
      std::printf("%10s %10s %10s %10s %12s %8s\n", "bytes", "world", "shared", "sub", "2 subs/pair", "x sub");
      for (const auto& r : rows)
        std::printf("%10zu %10.2f %10.2f %10.2f %12.2f %8.2f\n", r.bytes, r.world, r.shared, r.sub, r.pair, r.pair / r.sub);
      if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"ranks\": " << world.size() << ", \"transport\": \"" << world.transport().name() << "\", \"rows\": [";
        for (std::size_t i = 0; i < rows.size(); ++i)
          f << (i ? ", " : "") << "{\"bytes\": " << rows[i].bytes << ", \"world_us\": " << rows[i].world << ", \"shared_us\": "
            << rows[i].shared << ", \"sub_us\": " << rows[i].sub << ", \"two_subs_pair_us\": " << rows[i].pair << "}";
        f << "]}\n";
      }
    }
    gsync::barrier(world);
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "gsync-split-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
