// gsync-latency: small-message latency measured in bursts, for machines whose speed changes while
// a benchmark runs (virtual machines whose vCPUs the host moves around).
//
//   gsyncrun -n 2 -- gsync-latency [--bytes B] [--bursts K] [--per N] [--pingpong]
//
// After 5000 warm-up calls it times K bursts of N calls (a barrier before each burst) and prints,
// on rank 0, the fastest, the 10th-percentile and the median burst's mean time per call: one slow
// stretch of the machine spoils a few bursts, not the whole figure. Calls: float32 sum allreduce
// of B bytes (default 8), or with --pingpong a send from rank 0 to rank 1 and back (the time of a
// round trip). benchmarks/peers/ompi_latency.c does the same with MPI; latency_bursts.sh runs both,
// interleaved.
#include <gsync/gsync.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::size_t bytes = 8;
  int bursts = 200, per = 1000;
  bool pingpong = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gsync-latency: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--bytes") bytes = std::strtoull(next(), nullptr, 10);
    else if (a == "--bursts") bursts = std::atoi(next());
    else if (a == "--per") per = std::atoi(next());
    else if (a == "--pingpong") pingpong = true;
    else {
      std::fprintf(stderr, "usage: gsync-latency [--bytes B] [--bursts K] [--per N] [--pingpong]\n");
      return 2;
    }
  }
  if (bursts < 1 || per < 1) {
    std::fprintf(stderr, "gsync-latency: --bursts and --per must be >= 1\n");
    return 2;
  }
  try {
    auto comm = gsync::tcp_communicator::from_env();
    if (pingpong && comm.size() != 2) {
      if (comm.rank() == 0) std::fprintf(stderr, "gsync-latency: --pingpong needs 2 ranks\n");
      return 2;
    }
    std::vector<float> in(bytes / sizeof(float), 1.0f), out(in.size());
    auto call = [&] {
      if (!pingpong) {
        gsync::allreduce(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::sum{});
      } else if (comm.rank() == 0) {
        gsync::send(comm, std::span<const float>{in}, 1, 1);
        gsync::recv(comm, std::span<float>{out}, 1, 2);
      } else {
        gsync::recv(comm, std::span<float>{out}, 0, 1);
        gsync::send(comm, std::span<const float>{in}, 0, 2);
      }
    };
    for (int i = 0; i < 5000; ++i) call();
    if (!pingpong && !out.empty() && out[0] != static_cast<float>(comm.size())) {
      std::fprintf(stderr, "gsync-latency: wrong allreduce result %g (expected %d)\n", out[0], comm.size());
      return 1;
    }
    std::vector<double> t;
    for (int b = 0; b < bursts; ++b) {
      gsync::barrier(comm);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < per; ++i) call();
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / per);
    }
    std::sort(t.begin(), t.end());
    if (comm.rank() == 0)
      std::printf("gsync %s %zu B np %d: min %.3f p10 %.3f median %.3f us\n", pingpong ? "pingpong" : "allreduce", bytes,
                  comm.size(), t[0], t[t.size() / 10], t[t.size() / 2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gsync-latency: %s\n", e.what());
    return 3;
  }
  return 0;
}
