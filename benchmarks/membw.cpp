// gsync-membw: single-thread memory bandwidth of the two kernels an allreduce is made of, for
// stating the memory-bandwidth bound of allreduce over TCP loopback.
//
//   gsync-membw [--size 64M] [--reps 10] [--json FILE]
//   gsync-membw --handoff [--size 64K]
//
//   copy    memcpy(dst, src, size)                          2 streams: read size, write size
//   reduce  c[i] = a[i] + b[i] over float32, size per array 3 streams: read 2 x size, write size
//   cma     process_vm_readv(self, dst, src) in 1 MiB pieces 2 streams, and every page pinned:
//           what shared memory's single copy costs per byte (transport/shm_single_copy.hpp)
//
// --handoff: the cross-core hand-off rate instead, the bound of any two-process exchange of freshly
// written data (a shared-memory ring, or a copy of a buffer its owner just wrote): a thread on one
// CPU writes SIZE bytes and raises a flag, a thread on another CPU reads them and answers, in turn;
// rate = SIZE / (time of one turn), median of 5 batches. On the 2-vCPU VM of benchmarks/results it
// moves between phases (about 3.7 or 8 GB/s at 64 KiB), which is why it is printed per run.
//
// Every buffer is written once before timing (so page faults are not measured); each kernel runs
// --reps times and the best (shortest) run is reported. Two figures are printed per kernel:
//   rate     bytes of one buffer per second (size / time): how fast a message of that size is
//            copied or reduced, the unit in which allreduce's algbw/busbw are expressed;
//   traffic  all bytes read and written per second (2 or 3 x size / time).
// GB/s = 1e9 bytes per second, as in gsync-perf.

#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

/// Parses "64M", "1G", "4096" (1024-based suffixes).
std::optional<std::size_t> parse_size(std::string_view s) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
  std::size_t v = 0, i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (v > (std::numeric_limits<std::size_t>::max() - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<std::size_t>(s[i] - '0');
  }
  std::size_t mult = 1;
  if (i < s.size()) {
    switch (s[i]) {
      case 'k': case 'K': mult = std::size_t{1} << 10; break;
      case 'm': case 'M': mult = std::size_t{1} << 20; break;
      case 'g': case 'G': mult = std::size_t{1} << 30; break;
      default: return std::nullopt;
    }
    ++i;
  }
  if (i != s.size()) return std::nullopt;
  if (v > std::numeric_limits<std::size_t>::max() / mult) return std::nullopt;
  return v * mult;
}

/// The reduction kernel; kept out of line so that the compiler cannot fold it into the timing loop.
[[gnu::noinline]] void reduce_add(const float* __restrict a, const float* __restrict b, float* __restrict c,
                                  std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

[[gnu::noinline]] void copy_bytes(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }

// Cross-memory attach from this process, in the pieces the shared-memory link reads (1 MiB).
bool cma_copy(void* dst, const void* src, std::size_t n) {
  constexpr std::size_t piece = 1 << 20;
  for (std::size_t off = 0; off < n; off += piece) {
    const std::size_t k = std::min(piece, n - off);
    const iovec local{static_cast<char*>(dst) + off, k};
    const iovec remote{const_cast<char*>(static_cast<const char*>(src)) + off, k};
    if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(k)) return false;
  }
  return true;
}

/// Best time in seconds of `reps` runs of `f`.
template <class F>
double best_of(int reps, F&& f) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

/// Pins the calling thread to `cpu`; false where the affinity cannot be set.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) == 0;
}

/// The hand-off rate (see the file comment) in GB/s; 0 when this process may run on one CPU only.
double handoff_rate(std::size_t size) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) return 0;
  int cpus[2], found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  // Page-aligned buffers, and the flag on a line of its own, so that nothing but the data and the
  // flag crosses between the two cores.
  struct alignas(64) flag {
    std::atomic<int> turn{0};
  };
  flag f;
  std::vector<char> src(size, 1);
  char* shared = static_cast<char*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096));
  if (shared == nullptr) return 0;
  std::memset(shared, 0, size);
  // About 20 ms a batch at 8 GB/s.
  const int iters = static_cast<int>(std::clamp<std::size_t>((std::size_t{160} << 20) / size, 16, 100000));
  constexpr int batches = 5;
  long checksum = 0;
  std::thread reader([&f, shared, size, iters, cpu = cpus[1], &checksum] {
    pin_to(cpu);
    long sum = 0;
    for (int i = 0; i < (batches + 1) * iters; ++i) {
      while (f.turn.load(std::memory_order_acquire) != 1) {
      }
      for (std::size_t j = 0; j + sizeof(long) <= size; j += sizeof(long)) {
        long v;
        std::memcpy(&v, shared + j, sizeof v);
        sum += v;
      }
      f.turn.store(0, std::memory_order_release);
    }
    checksum = sum;
  });
  pin_to(cpus[0]);
  std::vector<double> rates;
  for (int b = 0; b < batches + 1; ++b) {  // the first batch warms up
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      while (f.turn.load(std::memory_order_acquire) != 0) {
      }
      copy_bytes(shared, src.data(), size);
      f.turn.store(1, std::memory_order_release);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (b > 0) rates.push_back(static_cast<double>(size) * iters / s / 1e9);
  }
  reader.join();
  std::free(shared);
  if (checksum == 0) return 0;  // the reader saw none of the bytes: not a measurement
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void usage(std::FILE* f) {
  std::fprintf(f,
               "usage: gsync-membw [--size SIZE] [--reps N] [--json FILE]\n"
               "       gsync-membw --handoff [--size SIZE]   (cross-core hand-off rate; SIZE default 64K)\n"
               "  --size SIZE   bytes per buffer, K/M/G suffixes (default 64M)\n"
               "  --reps N      runs per kernel, the best is reported (default 10)\n"
               "  --json FILE   also write the results to FILE as JSON\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t size = std::size_t{64} << 20;
  int reps = 10;
  std::string json_path;
  bool handoff = false, size_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gsync-membw: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--size") {
      const auto v = value();
      const auto s = parse_size(v);
      if (!s || *s < 4096) {
        std::fprintf(stderr, "gsync-membw: --size '%.*s' is not a size of at least 4K\n", static_cast<int>(v.size()),
                     v.data());
        return 2;
      }
      size = *s;
      size_given = true;
    } else if (a == "--handoff") {
      handoff = true;
    } else if (a == "--reps") {
      const std::string v(value());
      char* end = nullptr;
      const long r = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || r < 1 || r > 100000) {
        std::fprintf(stderr, "gsync-membw: --reps '%s' is not an integer in [1, 100000]\n", v.c_str());
        return 2;
      }
      reps = static_cast<int>(r);
    } else if (a == "--json") {
      json_path = std::string(value());
    } else {
      std::fprintf(stderr, "gsync-membw: unknown option '%s' (see -h)\n", argv[i]);
      return 2;
    }
  }

  if (handoff) {
    if (!size_given) size = std::size_t{64} << 10;
    const double r = handoff_rate(size);
    if (r == 0) {
      std::printf("handoff %zu B: n/a (one CPU)\n", size);
      return 0;
    }
    std::printf("handoff %zu B: %.2f GB/s\n", size, r);
    return 0;
  }

  const std::size_t n = size / sizeof(float);
  size = n * sizeof(float);
  std::vector<float> a(n), b(n), c(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1024);
    b[i] = static_cast<float>((i * 3) % 1024);
  }

  // One untimed run of each kernel, then the timed runs.
  copy_bytes(c.data(), a.data(), size);
  reduce_add(a.data(), b.data(), c.data(), n);
  const double t_copy = best_of(reps, [&] { copy_bytes(c.data(), a.data(), size); });
  if (std::memcmp(c.data(), a.data(), size) != 0) {
    std::fprintf(stderr, "gsync-membw: copy produced a wrong result\n");
    return 3;
  }
  const double t_reduce = best_of(reps, [&] { reduce_add(a.data(), b.data(), c.data(), n); });
  for (std::size_t i = 0; i < n; i += 4099) {
    if (c[i] != a[i] + b[i]) {
      std::fprintf(stderr, "gsync-membw: reduce produced a wrong result\n");
      return 3;
    }
  }
  // Cross-memory attach; 0 where the kernel refuses it (then reported as such).
  std::memset(c.data(), 0, size);
  bool cma_ok = cma_copy(c.data(), a.data(), size);
  const double t_cma = cma_ok ? best_of(reps, [&] { cma_ok = cma_copy(c.data(), a.data(), size) && cma_ok; }) : 0;
  if (cma_ok && std::memcmp(c.data(), a.data(), size) != 0) {
    std::fprintf(stderr, "gsync-membw: process_vm_readv produced a wrong result\n");
    return 3;
  }

  const double gb = static_cast<double>(size) / 1e9;
  const double copy_rate = gb / t_copy, copy_traffic = 2 * gb / t_copy;
  const double reduce_rate = gb / t_reduce, reduce_traffic = 3 * gb / t_reduce;
  const double cma_rate = cma_ok ? gb / t_cma : 0, cma_traffic = 2 * cma_rate;

  std::printf("# gsync-membw: single thread, %zu bytes per buffer (%.0f MiB), best of %d\n", size,
              static_cast<double>(size) / (1 << 20), reps);
  std::printf("# %-28s %10s %12s %14s\n", "kernel", "time (ms)", "rate (GB/s)", "traffic (GB/s)");
  std::printf("  %-28s %10.3f %12.2f %14.2f\n", "copy (memcpy)", t_copy * 1e3, copy_rate, copy_traffic);
  std::printf("  %-28s %10.3f %12.2f %14.2f\n", "reduce (c=a+b, float32)", t_reduce * 1e3, reduce_rate,
              reduce_traffic);
  if (cma_ok)
    std::printf("  %-28s %10.3f %12.2f %14.2f\n", "cma (process_vm_readv, 1M)", t_cma * 1e3, cma_rate, cma_traffic);
  else
    std::printf("  %-28s %10s\n", "cma (process_vm_readv, 1M)", "refused");
  std::printf("# rate = buffer bytes / time; traffic = all bytes read and written / time\n");

  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "gsync-membw: cannot open --json file '%s'\n", json_path.c_str());
      return 2;
    }
    std::fprintf(f,
                 "{\"bytes\": %zu, \"reps\": %d, \"threads\": 1,\n"
                 " \"copy\": {\"time_us\": %.6g, \"rate_gbs\": %.6g, \"traffic_gbs\": %.6g},\n"
                 " \"reduce\": {\"time_us\": %.6g, \"rate_gbs\": %.6g, \"traffic_gbs\": %.6g},\n"
                 " \"cma\": {\"time_us\": %.6g, \"rate_gbs\": %.6g, \"traffic_gbs\": %.6g}}\n",
                 size, reps, t_copy * 1e6, copy_rate, copy_traffic, t_reduce * 1e6, reduce_rate, reduce_traffic, t_cma * 1e6,
                 cma_rate, cma_traffic);
    const bool bad = std::ferror(f) != 0;
    if (std::fclose(f) != 0 || bad) {
      std::fprintf(stderr, "gsync-membw: writing '%s' failed\n", json_path.c_str());
      return 3;
    }
  }
  return 0;
}
