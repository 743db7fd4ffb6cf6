// gsync-scale-probe: what a job of N ranks costs to set up and hold, for the scale benchmark
// (benchmarks/scale_bench.sh runs it at N = 8 .. 256, GSYNC_SHM_DISABLE=1).
//
//   gsyncrun -n N -- gsync-scale-probe [--json FILE] [--check-sockets] [--small]
//   gsyncrun -n N -- gsync-scale-probe --launch-only PREFIX
//
// Each rank times its set-up (from_env until it returns) and notes when it entered and left it on
// the wall clock, so that the launch (how far apart the ranks reached from_env) is told apart
// from set-up proper (from the last rank's arrival until every rank has returned); it times its
// first collective (a barrier: the connections it needs are made then), and then runs float32 sum allreduces of
// 8 B, 64 KiB and 1 MiB (automatic choice), then with the ring and with recursive doubling forced,
// each checked against the exact sum, and counts the sockets it holds (/proc/self/fd entries that
// are sockets) after set-up and after the allreduces. Rank 0 prints the slowest set-up, the
// allreduce times and the socket counts: the largest and the mean over ranks 1..N-1, and rank 0's
// own (it also serves the store: one more socket per rank). With --check-sockets it exits 1 when
// a rank holds more than 2 ceil(log2 N) + 4 sockets after the allreduces (rank 0: N + 1 more),
// the bound of issue 29 for connections made on first use.
// --launch-only: the launch floor. Each rank writes the wall-clock time it reached main to
// PREFIX.RANK and exits without joining: the same binary, libraries and launcher, no gsync set-up
// (scale_bench.sh reports how far apart the ranks started).
#include <gsync/gsync.hpp>

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
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

/// CPU time this process has used (user + system), in seconds.
double cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  const auto wall = [] { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); };
  const double entered = wall();
  const double cpu_at_main = cpu_s();  // exec, the loader, static initialisers
  std::string json;
  bool check_sockets = false;
  bool small = false;  // --small: 8 B, 4 KiB and 16 KiB instead of 8 B, 64 KiB and 1 MiB (1024 ranks on 2 cores)
  double launch_floor = -1;  // --launch-floor S: what scale_bench.sh measured with --launch-only, for the record
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--launch-only") == 0 && i + 1 < argc) {
      const char* r = std::getenv("GSYNC_RANK");
      std::ofstream f(std::string(argv[i + 1]) + "." + (r ? r : "0"));
      f << std::fixed << entered << "\n";
      return f ? 0 : 1;
    }
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    else if (std::strcmp(argv[i], "--launch-floor") == 0 && i + 1 < argc) launch_floor = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--check-sockets") == 0) check_sockets = true;
    else if (std::strcmp(argv[i], "--small") == 0) small = true;
    else {
      std::fprintf(stderr, "usage: gsync-scale-probe [--json FILE] [--check-sockets] [--small] | --launch-only PREFIX\n");
      return 2;
    }
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto comm = gsync::tcp_communicator::from_env();
    const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double left = wall();
    const double cpu_setup = cpu_s() - cpu_at_main;
    const int n = comm.size(), r = comm.rank();
    const double sockets_setup = open_sockets();
    const auto b0 = std::chrono::steady_clock::now();
    gsync::barrier(comm);
    const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - b0).count();
    double times[3] = {0, 0, 0};
    const std::size_t sizes[3] = {8, small ? 4096u : 64u << 10, small ? 16384u : 1u << 20};
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
    // The ring and recursive doubling forced: each reaches its own partners.
    for (int k = 0; k < 2; ++k) {
      std::vector<float> v((k == 0 ? (small ? 4096 : 64 << 10) : 64) / sizeof(float));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + static_cast<int>(i % 5)) % 16);
      if (k == 0) gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v});
      else gsync::allreduce<gsync::algo::recursive_doubling>(comm, std::span<float>{v});
      for (std::size_t i = 0; i < v.size(); ++i) {
        double want = 0;
        for (int q = 0; q < n; ++q) want += (q + static_cast<int>(i % 5)) % 16;
        if (v[i] != static_cast<float>(want)) ++bad;
      }
    }
    gsync::barrier(comm);
    const double sockets_after = open_sockets();
    // max and sum over ranks 1..N-1, through the communicator itself; rank 0's own
    double mx[5] = {setup_s, r ? sockets_setup : 0, r ? sockets_after : 0, static_cast<double>(bad), times[2]};
    double sm[4] = {r ? sockets_setup : 0, r ? sockets_after : 0, r ? 0 : sockets_setup, r ? 0 : sockets_after};
    gsync::allreduce(comm, std::span<double>{mx}, gsync::op::max{});
    gsync::allreduce(comm, std::span<double>{sm}, gsync::op::sum{});
    const int others = std::max(1, n - 1);
    int lg = 0;
    while ((1 << lg) < n) ++lg;
    const double bound = 2.0 * lg + 4;
    double t[3] = {times[0], times[1], times[2]};
    gsync::allreduce(comm, std::span<double>{t}, gsync::op::max{});
    // Wall-clock arrivals and departures (all ranks on one host here: one clock).
    double late[3] = {entered, left, first_s}, early[1] = {entered};
    gsync::allreduce(comm, std::span<double>{late}, gsync::op::max{});
    gsync::allreduce(comm, std::span<double>{early}, gsync::op::min{});
    // CPU per rank: to reach main, and in set-up (mean over ranks, the largest, rank 0's: it serves the store)
    double cpu_sum[2] = {cpu_at_main, cpu_setup}, cpu_max[1] = {r ? cpu_setup : 0};
    gsync::allreduce(comm, std::span<double>{cpu_sum}, gsync::op::sum{});
    gsync::allreduce(comm, std::span<double>{cpu_max}, gsync::op::max{});
    const double launch_s = late[0] - early[0], after_last_s = late[1] - late[0];
    if (r == 0) {
      std::printf("ranks %d  set-up %.3f s (slowest rank)  sockets per rank (1..N-1) after set-up: max %.0f mean %.1f; after allreduces: "
                  "max %.0f mean %.1f (bound 2 ceil(log2 N) + 4 = %.0f); rank 0 (serves the store): %.0f, then %.0f\n",
                  n, mx[0], mx[1], sm[0] / others, mx[2], sm[1] / others, bound, sm[2], sm[3]);
      std::printf("launch: ranks reached set-up within %.3f s (the same binary without set-up: %.3f s); set-up after the last one "
                  "arrived: %.3f s; first barrier %.3f s\n",
                  launch_s, launch_floor, after_last_s, late[2]);
      std::printf("CPU per rank: %.1f ms to reach main, %.1f ms in set-up (largest but rank 0: %.1f ms; rank 0, which serves the store: %.1f ms)\n",
                  1e3 * cpu_sum[0] / n, 1e3 * cpu_sum[1] / n, 1e3 * cpu_max[0], 1e3 * cpu_setup);
      std::printf("allreduce float32 sum (slowest rank, us per call): %zu B %.1f  %zu B %.1f  %zu B %.1f  wrong elements: %.0f\n", sizes[0], t[0],
                  sizes[1], t[1], sizes[2], t[2], mx[3]);
      if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"ranks\": " << n << ", \"setup_s\": " << mx[0] << ", \"launch_spread_s\": " << launch_s
          << ", \"launch_floor_s\": " << launch_floor << ", \"cpu_to_main_ms_mean\": " << 1e3 * cpu_sum[0] / n
          << ", \"cpu_setup_ms_mean\": " << 1e3 * cpu_sum[1] / n << ", \"cpu_setup_ms_max_not_rank0\": " << 1e3 * cpu_max[0]
          << ", \"rank0_cpu_setup_ms\": " << 1e3 * cpu_setup << ", \"setup_after_last_arrival_s\": " << after_last_s << ", \"first_barrier_s\": " << late[2] << ", \"sockets_setup_max\": " << mx[1] << ", \"sockets_setup_mean\": "
          << sm[0] / others << ", \"sockets_after_max\": " << mx[2] << ", \"sockets_after_mean\": " << sm[1] / others
          << ", \"rank0_sockets_setup\": " << sm[2] << ", \"rank0_sockets_after\": " << sm[3] << ", \"sockets_bound\": " << bound
          << ", \"allreduce_us\": {\"" << sizes[0] << "\": " << t[0] << ", \"" << sizes[1] << "\": " << t[1] << ", \"" << sizes[2] << "\": " << t[2] << "}, \"wrong\": " << mx[3]
          << "}\n";
      }
    }
    const bool over = check_sockets && (mx[2] > bound || sm[3] > bound + n + 1);
    if (over && r == 0) std::fprintf(stderr, "gsync-scale-probe: more sockets than the bound after the allreduces\n");
    return mx[3] == 0 && !over ? 0 : 1;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "gsync-scale-probe: %s\n", e.what());
    return 1;
  }
}
