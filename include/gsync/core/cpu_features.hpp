#pragma once
/// \file
/// Run-time choice of wider vector code for the element loops that are compute-bound (the int8
/// quantizer of grad/quantize.hpp): a binary built for baseline x86-64 (SSE2 only) runs AVX2
/// copies of those loops on CPUs that have AVX2 (Intel since 2013, AMD since 2015), and the
/// baseline code elsewhere.
///
/// How. A loop body is written once as an always-inline function; a second entry point marked
/// `GSYNC_AVX2_TARGET` (`[[gnu::target("avx2")]]`) inlines the same body, so the compiler
/// vectorizes it for AVX2 there, and a dispatcher calls that copy when `avx2_available()`. No FMA
/// is enabled, so no multiply-add is fused: both copies compute the same bits (the tests compare
/// them). Nothing else of the user's binary needs -mavx2. GSYNC_NO_AVX2=1 turns the wide copies
/// off (for comparisons).

#include <cstdlib>
#include <cstring>

#include "gsync/core/config.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
/// 1 when this compiler can build AVX2 copies of loops and choose them at run time.
#define GSYNC_HAVE_AVX2_PATH 1
/// Marks a function compiled for AVX2 (without FMA: no contraction, the same bits as baseline).
#define GSYNC_AVX2_TARGET [[gnu::target("avx2")]]
#else
#define GSYNC_HAVE_AVX2_PATH 0
#define GSYNC_AVX2_TARGET
#endif

#if defined(__GNUC__) || defined(__clang__)
/// Forces a loop body into each of its callers (so each caller's target options apply to it).
#define GSYNC_ALWAYS_INLINE [[gnu::always_inline]] inline
#else
#define GSYNC_ALWAYS_INLINE inline
#endif

namespace gsync::detail {

/// True when the CPU has AVX and the OS saves the YMM registers (CPUID leaf 1 ECX bits 28 AVX
/// and 27 OSXSAVE, XCR0 bits 1 and 2): the base of every 256-bit path. `ecx1` receives leaf 1's
/// ECX (for the caller's own feature bits).
inline bool avx_state_usable([[maybe_unused]] unsigned* ecx1 = nullptr) noexcept {
#if GSYNC_HAVE_AVX2_PATH
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  if (ecx1) *ecx1 = ecx;
  constexpr unsigned avx = 1u << 28, osxsave = 1u << 27;
  if ((ecx & (avx | osxsave)) != (avx | osxsave)) return false;
  unsigned lo = 0;
  __asm__("xgetbv" : "=a"(lo) : "c"(0) : "edx");  // XCR0's upper half (edx) is not needed
  return (lo & 6u) == 6u;
#else
  return false;
#endif
}

/// True when this CPU and OS run AVX2 code (`avx_state_usable` and CPUID leaf 7 EBX bit 5) and
/// GSYNC_NO_AVX2 is not set. Evaluated once per process.
inline bool avx2_available() noexcept {
#if GSYNC_HAVE_AVX2_PATH
  static const bool ok = [] {
    if (env_no_avx2() || !avx_state_usable()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    return (ebx & (1u << 5)) != 0;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace gsync::detail
