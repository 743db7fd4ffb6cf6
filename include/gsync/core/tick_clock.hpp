#pragma once
/// \file
/// The clock every operation reads at its start and end (detail::op_scope): steady_clock's time,
/// read from the CPU's time-stamp counter where the kernel itself keeps time with it.
///
/// A call of steady_clock::now() goes through the vDSO: a sequence lock, the time-stamp counter and
/// a conversion, read twice per operation: a sizeable part of a small same-host allreduce, and
/// `rdtsc` alone is much cheaper (benchmarks/results/from_code_comments.md). So each thread
/// keeps a base pair (counter, steady time) and a rate, and converts counter readings to steady
/// time, re-reading steady_clock (and re-measuring the rate) once every ~10 ms. The first readings
/// of a thread (its first 2 ms) come from steady_clock while the rate is measured.
///
/// Accuracy: a base pair is taken only when the steady read sits between two counter reads at
/// most 4096 ticks apart (1-2 us); the rate is measured over >= 2 ms (error < 1e-3), then over each
/// ~10 ms interval (< 2e-4); a conversion is off by at most a few microseconds, and readings of
/// one thread never go backwards. What reads it: operation start and end (counters, trace spans, the
/// start a deadline counts from). Waits compare against steady_clock itself.
///
/// Used only where the counter is known to be invariant and synchronised across CPUs: x86-64 Linux
/// whose kernel clock source is "tsc" (it checked both at boot). Elsewhere (other CPUs, virtual
/// machines on kvm-clock, hpet) it is steady_clock::now() itself. GSYNC_TICK_CLOCK=0 turns it off.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gsync/core/config.hpp"

#if defined(__x86_64__) && defined(__linux__)
// __builtin_ia32_rdtsc: the compiler's own, without the intrinsics headers (60,000 lines) in every user file.
#define GSYNC_TICK_CLOCK_TSC 1
#else
#define GSYNC_TICK_CLOCK_TSC 0
#endif

namespace gsync::detail {

/// steady_clock's time, read cheaply (see file comment). Thread-safe: the state is per thread.
class tick_clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// The current steady time (never earlier than this thread's previous reading).
  static time_point now() noexcept {
#if GSYNC_TICK_CLOCK_TSC
    if (!usable()) return std::chrono::steady_clock::now();
    state& s = st;
    const std::uint64_t t = __builtin_ia32_rdtsc();
    const std::uint64_t d = t - s.tsc_base;
    if (d >= s.refresh_ticks) [[unlikely]]
      return s.refresh(t);
    std::int64_t ns = s.steady_base_ns + static_cast<std::int64_t>(static_cast<double>(d) * s.ns_per_tick);
    if (ns < s.last_ns) ns = s.last_ns;
    s.last_ns = ns;
    return time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(ns)));
#else
    return std::chrono::steady_clock::now();
#endif
  }

  /// True when readings come from the time-stamp counter (see file comment).
  static bool usable() noexcept {
#if GSYNC_TICK_CLOCK_TSC
    static const bool ok = [] {
      if (env_tick_clock_off()) return false;
      std::FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
      if (!f) return false;
      char buf[32] = {};
      const bool tsc = std::fgets(buf, sizeof buf, f) && std::strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == 0);
      std::fclose(f);
      return tsc;
    }();
    return ok;
#else
    return false;
#endif
  }

 private:
#if GSYNC_TICK_CLOCK_TSC
  // Zero-initialised, trivially constructible: a thread's first reading finds refresh_ticks == 0.
  struct state {
    std::uint64_t tsc_base;       // counter at the base pair
    std::int64_t steady_base_ns;  // steady time at the base pair
    std::uint64_t refresh_ticks;  // re-read steady_clock once the counter is this far past the base
    double ns_per_tick;           // measured rate (0 until the first 2 ms have passed)
    std::int64_t last_ns;         // the last reading handed out (readings never go backwards)

    time_point refresh(std::uint64_t t) noexcept {
      std::int64_t now_ns = 0;
      // A pair is taken only when the steady read sits between two counter reads close together
      // (~1-2 us): a thread preempted in between would pair times milliseconds apart.
      bool paired = false;
      for (int attempt = 0; attempt < 3 && !paired; ++attempt) {
        const std::uint64_t t1 = __builtin_ia32_rdtsc();
        now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
        const std::uint64_t t2 = __builtin_ia32_rdtsc();
        paired = t2 >= t1 && t2 - t1 < 4096;
        t = t1 + (t2 - t1) / 2;
      }
      const std::int64_t since = now_ns - steady_base_ns;
      if (!paired) {
        // leave the base as it is; this reading is steady_clock's own
      } else if (tsc_base == 0 || t <= tsc_base || since <= 0) {
        tsc_base = t;  // the first reading, or a counter that went backwards: start over
        steady_base_ns = now_ns;
        ns_per_tick = 0;
        refresh_ticks = 0;
      } else if (since >= 2000000) {  // >= 2 ms since the base: (re)measure the rate, move the base
        ns_per_tick = static_cast<double>(since) / static_cast<double>(t - tsc_base);
        tsc_base = t;
        steady_base_ns = now_ns;
        refresh_ticks = static_cast<std::uint64_t>(1e7 / ns_per_tick);  // ~10 ms
        if (refresh_ticks == 0) refresh_ticks = 1;
      }
      // else: still measuring the rate; this reading is steady_clock's own
      const std::int64_t ns = now_ns < last_ns ? last_ns : now_ns;
      last_ns = ns;
      return time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(ns)));
    }
  };
  static inline thread_local state st{};
#endif
};

}  // namespace gsync::detail
