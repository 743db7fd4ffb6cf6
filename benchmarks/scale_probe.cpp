// gsync-scale-probe: what a job of N ranks costs to set up and hold, for the scale benchmark
// (benchmarks/scale_bench.sh runs it at N = 8 .. 256, GSYNC_SHM_DISABLE=1).
//
//   gsyncrun -n N -- gsync-scale-probe [--json FILE]
//
// Each rank times its set-up (from_env until it returns), then runs float32 sum allreduces of
// 8 B, 64 KiB and 1 MiB (automatic choice), each checked against the exact sum, and counts the
// sockets it holds (/proc/self/fd entries that are sockets) after set-up and after the allreduces.
// Rank 0 prints the slowest set-up, the allreduce times and the largest and mean socket counts.
#include <gsync/gsync.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

int open_sockets() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      struct stat st;
      if (::fstatat(::dirfd(d), e->d_name, &st, 0) == 0 && S_ISSOCK(st.st_mode)) ++n;
    }
    ::closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: gsync-scale-probe [--json FILE]\n");
      return 2;
    }
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto comm = gsync::tcp_communicator::from_env();
    const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int n = comm.size(), r = comm.rank();
    const double sockets_setup = open_sockets();
    double times[3] = {0, 0, 0};
    const std::size_t sizes[3] = {8, 64 << 10, 1 << 20};
    int bad = 0;
    for (int k = 0; k < 3; ++k) {
      std::vector<float> v(sizes[k] / sizeof(float));
      const int iters = k == 2 ? 3 : 10;
      gsync::barrier(comm);
      const auto s = std::chrono::steady_clock::now();
      for (int it = 0; it < iters; ++it) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + it + static_cast<int>(i % 7)) % 16);
        gsync::allreduce(comm, std::span<float>{v});
        for (std::size_t i = 0; i < v.size(); ++i) {
          double want = 0;
          for (int q = 0; q < n; ++q) want += (q + it + static_cast<int>(i % 7)) % 16;
          if (v[i] != static_cast<float>(want)) ++bad;
        }
      }
      times[k] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count() / iters;
    }
    const double sockets_after = open_sockets();
    // max and sum over ranks, through the communicator itself
    double mx[5] = {setup_s, sockets_setup, sockets_after, static_cast<double>(bad), times[2]};
    double sm[2] = {sockets_setup, sockets_after};
    gsync::allreduce(comm, std::span<double>{mx}, gsync::op::max{});
    gsync::allreduce(comm, std::span<double>{sm}, gsync::op::sum{});
    double t[3] = {times[0], times[1], times[2]};
    gsync::allreduce(comm, std::span<double>{t}, gsync::op::max{});
    if (r == 0) {
      std::printf("ranks %d  set-up %.3f s (slowest rank)  sockets per rank after set-up: max %.0f mean %.1f; after allreduces: max %.0f mean %.1f\n",
                  n, mx[0], mx[1], sm[0] / n, mx[2], sm[1] / n);
      std::printf("allreduce float32 sum (slowest rank, us per call): 8 B %.1f  64 KiB %.1f  1 MiB %.1f  wrong elements: %.0f\n", t[0], t[1],
                  t[2], mx[3]);
      if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"ranks\": " << n << ", \"setup_s\": " << mx[0] << ", \"sockets_setup_max\": " << mx[1] << ", \"sockets_setup_mean\": "
          << sm[0] / n << ", \"sockets_after_max\": " << mx[2] << ", \"sockets_after_mean\": " << sm[1] / n
          << ", \"allreduce_us\": {\"8\": " << t[0] << ", \"65536\": " << t[1] << ", \"1048576\": " << t[2] << "}, \"wrong\": " << mx[3]
          << "}\n";
      }
    }
    return mx[3] == 0 ? 0 : 1;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "gsync-scale-probe: %s\n", e.what());
    return 1;
  }
}
