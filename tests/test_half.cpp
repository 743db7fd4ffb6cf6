// Tests for gsync/core/half.hpp: gsync::half (IEEE binary16) and gsync::bfloat16.
//
// The conversions under test are bit tricks; the expectations here come from an independent
// reference written with double arithmetic (frexp / ldexp / floor, explicit ties-to-even), so a
// bug in the bit manipulation cannot cancel itself out.

#include <gsync/core/half.hpp>
#include <gsync/core/half_simd.hpp>
#include <gsync/core/ops.hpp>
#include <gsync/core/reduce.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using gsync::bfloat16;
using gsync::half;

// ---- compile-time properties ----------------------------------------------------------------

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<half> && std::is_trivially_copyable_v<bfloat16>);
static_assert(std::is_standard_layout_v<half> && std::is_standard_layout_v<bfloat16>);
static_assert(std::is_trivially_default_constructible_v<half>);
static_assert(std::is_trivially_default_constructible_v<bfloat16>);
static_assert(!std::is_convertible_v<float, half>, "construction from float must be explicit");
static_assert(!std::is_convertible_v<float, bfloat16>, "construction from float must be explicit");
static_assert(std::is_constructible_v<half, float> && std::is_constructible_v<bfloat16, float>);
static_assert(std::is_convertible_v<half, float> && std::is_convertible_v<bfloat16, float>);
static_assert(std::is_nothrow_constructible_v<half, float>);
static_assert(std::is_nothrow_constructible_v<bfloat16, float>);

// constexpr-friendly
static_assert(half(1.0f).bits() == 0x3c00);
static_assert(half(-2.0f).bits() == 0xc000);
static_assert(half(65504.0f).bits() == 0x7bff);
static_assert(half(65520.0f).bits() == 0x7c00);
static_assert(float(half::from_bits(0x3555)) == 0x1.554p-2f);
static_assert(float(half::from_bits(0x0001)) == 0x1p-24f);
static_assert(bfloat16(1.0f).bits() == 0x3f80);
static_assert(float(bfloat16::from_bits(0xc049)) == -3.140625f);
static_assert(gsync::to_float(half::from_bits(0x4200)) == 3.0f);
static_assert(gsync::to_float(bfloat16::from_bits(0x4040)) == 3.0f);

// ---- independent reference ------------------------------------------------------------------

constexpr double kInf = std::numeric_limits<double>::infinity();

std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float bits_float(std::uint32_t u) { return std::bit_cast<float>(u); }

// Value of a binary16 bit pattern (NaN for NaNs).
double ref_half_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0) {
    v = std::ldexp(m, -24);
  } else if (e == 31) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : kInf;
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return (h & 0x8000) != 0 ? -v : v;
}

// Value of a bfloat16 bit pattern (NaN for NaNs).
double ref_bf16_value(std::uint16_t b) {
  const int e = (b >> 7) & 0xff;
  const int m = b & 0x7f;
  double v;
  if (e == 0) {
    v = std::ldexp(m, -133);
  } else if (e == 255) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : kInf;
  } else {
    v = std::ldexp(128 + m, e - 134);
  }
  return (b & 0x8000) != 0 ? -v : v;
}

// Rounds the finite value v to a binary format with `p` significand bits (implicit bit
// included), minimum normal exponent `emin` (subnormals below it), and overflow threshold
// `limit` = 2^(emax+1): round to nearest, ties to even, done with plain double arithmetic.
double ref_round(double v, int p, int emin, double limit) {
  if (v == 0.0) return v;
  const double av = std::fabs(v);
  int E = 0;
  (void)std::frexp(av, &E);  // av = f * 2^E with f in [0.5, 1): floor(log2(av)) = E - 1
  const int e = std::max(E - 1, emin);
  const double q = std::ldexp(1.0, e - (p - 1));  // spacing of representable values near av
  const double r = av / q;                        // exact: av has at most 24 significant bits
  const double fl = std::floor(r);
  const double frac = r - fl;
  double n = fl;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0.0)) n = fl + 1.0;
  double res = n * q;
  if (res >= limit) res = kInf;
  return std::copysign(res, v);
}

double ref_float_to_half(float f) { return ref_round(f, 11, -14, 65536.0); }
double ref_float_to_bf16(float f) { return ref_round(f, 8, -126, std::ldexp(1.0, 128)); }

bool same_value(double a, double b) {  // equal including the sign of zero
  return a == b && std::signbit(a) == std::signbit(b);
}

bool half_is_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// Checks one float -> half conversion against the reference; returns false on mismatch.
bool check_half_conversion(float f) {
  const std::uint16_t got = half(f).bits();
  if (std::isnan(f)) {
    return half_is_nan(got) && (got & 0x0200) != 0 && ((got & 0x8000) != 0) == std::signbit(f);
  }
  return same_value(ref_half_value(got), ref_float_to_half(f));
}

bool check_bf16_conversion(float f) {
  const std::uint16_t got = bfloat16(f).bits();
  if (std::isnan(f)) {
    return bf16_is_nan(got) && (got & 0x0040) != 0 && ((got & 0x8000) != 0) == std::signbit(f);
  }
  return same_value(ref_bf16_value(got), ref_float_to_bf16(f));
}

constexpr int kMaxReported = 10;

// "0x..." for failure messages (doctest stringifies each operand separately, so stream
// manipulators such as std::hex do not carry over).
std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", static_cast<unsigned>(v));
  return buf;
}

}  // namespace

// ---- half ------------------------------------------------------------------------------------

TEST_CASE("half: half -> float is exact for all 65536 bit patterns") {
  int failures = 0;
  for (std::uint32_t i = 0; i < 0x10000 && failures < kMaxReported; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = half::from_bits(h);
    const double want = ref_half_value(h);
    bool ok;
    if (half_is_nan(h)) {
      // quiet NaN, same sign, payload kept in the top mantissa bits
      const std::uint32_t u = float_bits(f);
      ok = std::isnan(f) && (u & 0x400000u) != 0 && (u >> 31) == (i >> 15) &&
           ((u >> 13) & 0x1ffu) == (i & 0x1ffu);
    } else {
      ok = same_value(static_cast<double>(f), want);
    }
    if (!ok) {
      ++failures;
      FAIL_CHECK("half bits " << hex(i) << " -> float " << f << " (bits " << hex(float_bits(f))
                              << "), expected " << want);
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("half: half -> float -> half round trip for all 65536 bit patterns") {
  int failures = 0;
  for (std::uint32_t i = 0; i < 0x10000 && failures < kMaxReported; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const std::uint16_t back = half(float(half::from_bits(h))).bits();
    bool ok;
    if (half_is_nan(h)) {
      // stays NaN, becomes quiet, keeps sign and payload
      ok = half_is_nan(back) && back == (h | 0x0200);
    } else {
      ok = back == h;
    }
    if (!ok) {
      ++failures;
      FAIL_CHECK("half bits " << hex(i) << " round-tripped to " << hex(back));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("half: float -> half rounds every midpoint to even, and +-1 float ulp away from it") {
  // For every finite half h >= 0 and its successor (for 65504 the successor is 2^16, i.e. Inf),
  // the midpoint is exactly representable as a float.
  int failures = 0;
  for (std::uint32_t i = 0; i < 0x7c00 && failures < kMaxReported; ++i) {
    const auto lo = static_cast<std::uint16_t>(i);
    const auto hi = static_cast<std::uint16_t>(i + 1);
    const double vlo = ref_half_value(lo);
    const double vhi = hi == 0x7c00 ? 65536.0 : ref_half_value(hi);
    const double mid_d = (vlo + vhi) / 2.0;
    const auto mid = static_cast<float>(mid_d);
    REQUIRE(static_cast<double>(mid) == mid_d);
    const std::uint16_t even = (lo & 1) == 0 ? lo : hi;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
    for (const int s : {0, 1}) {
      const float sg = s != 0 ? -1.0f : 1.0f;
      const std::uint16_t sb = s != 0 ? 0x8000 : 0;
      const std::uint16_t got_mid = half(sg * mid).bits();
      const std::uint16_t got_below = half(sg * below).bits();
      const std::uint16_t got_above = half(sg * above).bits();
      if (got_mid != (even | sb) || got_below != (lo | sb) || got_above != (hi | sb)) {
        ++failures;
        FAIL_CHECK("between half " << hex(lo | sb) << " and " << hex(hi | sb) << ": midpoint -> "
                                   << hex(got_mid) << ", below -> " << hex(got_below)
                                   << ", above -> " << hex(got_above));
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("half: special values") {
  const float inf = std::numeric_limits<float>::infinity();
  // signed zero
  CHECK(half(0.0f).bits() == 0x0000);
  CHECK(half(-0.0f).bits() == 0x8000);
  CHECK(std::signbit(float(half::from_bits(0x8000))));
  // Inf
  CHECK(half(inf).bits() == 0x7c00);
  CHECK(half(-inf).bits() == 0xfc00);
  CHECK(float(half::from_bits(0x7c00)) == inf);
  CHECK(float(half::from_bits(0xfc00)) == -inf);
  // overflow boundary: midpoint 65520 between 65504 and 2^16 ties to even = Inf
  CHECK(half(65504.0f).bits() == 0x7bff);
  CHECK(half(65519.99f).bits() == 0x7bff);
  CHECK(half(std::nextafter(65520.0f, 0.0f)).bits() == 0x7bff);
  CHECK(half(65520.0f).bits() == 0x7c00);
  CHECK(half(-65520.0f).bits() == 0xfc00);
  CHECK(half(-65519.99f).bits() == 0xfbff);
  CHECK(half(65536.0f).bits() == 0x7c00);
  CHECK(half(1e30f).bits() == 0x7c00);
  CHECK(half(-1e30f).bits() == 0xfc00);
  CHECK(half(std::numeric_limits<float>::max()).bits() == 0x7c00);
  // subnormals and underflow
  CHECK(half(0x1p-24f).bits() == 0x0001);
  CHECK(half(0x1p-25f).bits() == 0x0000);  // tie -> even (zero)
  CHECK(half(-0x1p-25f).bits() == 0x8000);
  CHECK(half(std::nextafter(0x1p-25f, 1.0f)).bits() == 0x0001);
  CHECK(half(0x1.8p-24f).bits() == 0x0002);  // 1.5 * 2^-24: tie -> even (2)
  CHECK(half(0x1.4p-23f).bits() == 0x0002);  // 2.5 * 2^-24: tie -> even (2)
  CHECK(half(0x1p-26f).bits() == 0x0000);
  CHECK(half(std::numeric_limits<float>::denorm_min()).bits() == 0x0000);
  CHECK(half(-std::numeric_limits<float>::denorm_min()).bits() == 0x8000);
  CHECK(half(std::numeric_limits<float>::min()).bits() == 0x0000);
  CHECK(half(0x3ffp-24f).bits() == 0x03ff);  // largest subnormal
  CHECK(half(0x7ffp-25f).bits() == 0x0400);  // 1023.5 * 2^-24: tie -> even = 2^-14 (normal)
  CHECK(half(0x1p-14f).bits() == 0x0400);    // smallest normal
  CHECK(float(half::from_bits(0x03ff)) == 0x3ffp-24f);
  CHECK(float(half::from_bits(0x8001)) == -0x1p-24f);
  // ordinary values
  CHECK(half(1.0f).bits() == 0x3c00);
  CHECK(half(-1.5f).bits() == 0xbe00);
  CHECK(half(0.1f).bits() == 0x2e66);
  CHECK(half(3.14159265f).bits() == 0x4248);
  CHECK(half(1.0f + 0x1p-11f).bits() == 0x3c00);  // tie -> even (down)
  CHECK(half(1.0f + 0x3p-11f).bits() == 0x3c02);  // tie -> even (up)
  CHECK(half(2048.0f + 1.0f).bits() == 0x6800);   // 2049 -> 2048
  CHECK(half(2048.0f + 3.0f).bits() == 0x6802);   // 2051 -> 2052
  // NaN: stays NaN, quiet, sign kept
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = bits_float(0x7f800001u);
  for (const float n :
       {qnan, -qnan, snan, -snan, bits_float(0x7fbfe000u), bits_float(0xffc00001u)}) {
    const std::uint16_t h = half(n).bits();
    CHECK(half_is_nan(h));
    CHECK((h & 0x0200) != 0);
    CHECK(((h & 0x8000) != 0) == std::signbit(n));
  }
  CHECK(half(bits_float(0x7fbfe000u)).bits() == 0x7fff);  // top payload bits kept
  CHECK(std::isnan(float(half::from_bits(0x7c01))));      // signalling half NaN -> quiet
  CHECK((float_bits(float(half::from_bits(0x7c01))) & 0x400000u) != 0);
  CHECK(std::isnan(float(half::from_bits(0xfe00))));
  CHECK(std::signbit(float(half::from_bits(0xfe00))));
}

TEST_CASE("half: float -> half matches the reference on a strided sweep of all float bits") {
  int failures = 0;
  std::uint64_t checked = 0;
  // Odd strides, so the low (rounding) bits vary as well as sign and exponent.
  for (const std::uint64_t stride : {65537ull, 4099ull}) {
    for (std::uint64_t u = 0; u <= 0xffffffffull && failures < kMaxReported; u += stride) {
      const float f = bits_float(static_cast<std::uint32_t>(u));
      ++checked;
      if (!check_half_conversion(f)) {
        ++failures;
        FAIL_CHECK("float bits " << hex(static_cast<std::uint32_t>(u)) << " (" << f << ") -> half "
                                 << hex(half(f).bits()) << ", expected value "
                                 << ref_float_to_half(f));
      }
    }
  }
  CHECK(checked > 1000000);
  CHECK(failures == 0);
}

TEST_CASE("half: float -> half matches the reference for every float near the subnormal range") {
  // Floats with magnitude in [2^-26, 2^-13), sampled densely (every 61st bit pattern, both
  // signs): gradual underflow, rounding into and out of the subnormal range.
  int failures = 0;
  const std::uint32_t lo = float_bits(0x1p-26f);
  const std::uint32_t hi = float_bits(0x1p-13f);
  for (std::uint32_t u = lo; u < hi && failures < kMaxReported; u += 61) {
    for (const std::uint32_t sign : {0u, 0x80000000u}) {
      const float f = bits_float(u | sign);
      if (!check_half_conversion(f)) {
        ++failures;
        FAIL_CHECK("float bits " << hex(u | sign) << " (" << f << ") -> half "
                                 << hex(half(f).bits()) << ", expected value "
                                 << ref_float_to_half(f));
      }
    }
  }
  CHECK(failures == 0);
}

// ---- bfloat16 --------------------------------------------------------------------------------

TEST_CASE("bfloat16: bfloat16 -> float is exact for all 65536 bit patterns") {
  int failures = 0;
  for (std::uint32_t i = 0; i < 0x10000 && failures < kMaxReported; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = bfloat16::from_bits(b);
    bool ok;
    if (bf16_is_nan(b)) {
      const std::uint32_t u = float_bits(f);
      ok = std::isnan(f) && (u & 0x400000u) != 0 && (u >> 16) == (i | 0x40u);
    } else {
      ok = same_value(static_cast<double>(f), ref_bf16_value(b));
    }
    if (!ok) {
      ++failures;
      FAIL_CHECK("bfloat16 bits " << hex(i) << " -> float " << f << " (bits " << hex(float_bits(f))
                                  << "), expected " << ref_bf16_value(b));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("bfloat16: bfloat16 -> float -> bfloat16 round trip for all 65536 bit patterns") {
  int failures = 0;
  for (std::uint32_t i = 0; i < 0x10000 && failures < kMaxReported; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const std::uint16_t back = bfloat16(float(bfloat16::from_bits(b))).bits();
    const bool ok = bf16_is_nan(b) ? (bf16_is_nan(back) && back == (b | 0x40)) : back == b;
    if (!ok) {
      ++failures;
      FAIL_CHECK("bfloat16 bits " << hex(i) << " round-tripped to " << hex(back));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("bfloat16: float -> bfloat16 rounds every midpoint to even, and +-1 float ulp away") {
  int failures = 0;
  for (std::uint32_t i = 0; i < 0x7f80 && failures < kMaxReported; ++i) {
    const auto lo = static_cast<std::uint16_t>(i);
    const auto hi = static_cast<std::uint16_t>(i + 1);
    const double vlo = ref_bf16_value(lo);
    const double vhi = hi == 0x7f80 ? std::ldexp(1.0, 128) : ref_bf16_value(hi);
    const double mid_d = (vlo + vhi) / 2.0;
    const auto mid = static_cast<float>(mid_d);
    REQUIRE(static_cast<double>(mid) == mid_d);
    const std::uint16_t even = (lo & 1) == 0 ? lo : hi;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
    for (const int s : {0, 1}) {
      const float sg = s != 0 ? -1.0f : 1.0f;
      const std::uint16_t sb = s != 0 ? 0x8000 : 0;
      const std::uint16_t got_mid = bfloat16(sg * mid).bits();
      const std::uint16_t got_below = bfloat16(sg * below).bits();
      const std::uint16_t got_above = bfloat16(sg * above).bits();
      if (got_mid != (even | sb) || got_below != (lo | sb) || got_above != (hi | sb)) {
        ++failures;
        FAIL_CHECK("between bfloat16 " << hex(lo | sb) << " and " << hex(hi | sb)
                                       << ": midpoint -> " << hex(got_mid) << ", below -> "
                                       << hex(got_below) << ", above -> " << hex(got_above));
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("bfloat16: special values") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(bfloat16(0.0f).bits() == 0x0000);
  CHECK(bfloat16(-0.0f).bits() == 0x8000);
  CHECK(bfloat16(inf).bits() == 0x7f80);
  CHECK(bfloat16(-inf).bits() == 0xff80);
  CHECK(bfloat16(std::numeric_limits<float>::max()).bits() == 0x7f80);  // rounds up to Inf
  CHECK(bfloat16(-std::numeric_limits<float>::max()).bits() == 0xff80);
  CHECK(bfloat16(0x1.fep127f).bits() == 0x7f7f);  // largest finite bfloat16
  CHECK(bfloat16(std::numeric_limits<float>::denorm_min()).bits() == 0x0000);
  CHECK(bfloat16(0x1p-133f).bits() == 0x0001);  // smallest bfloat16 subnormal
  CHECK(bfloat16(0x1p-134f).bits() == 0x0000);  // tie -> even (zero)
  CHECK(bfloat16(std::nextafter(0x1p-134f, 1.0f)).bits() == 0x0001);
  CHECK(bfloat16(1.0f).bits() == 0x3f80);
  CHECK(bfloat16(1.0f + 0x1p-8f).bits() == 0x3f80);  // tie -> even (down)
  CHECK(bfloat16(1.0f + 0x3p-8f).bits() == 0x3f82);  // tie -> even (up)
  CHECK(bfloat16(3.14159265f).bits() == 0x4049);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  for (const float n :
       {qnan, -qnan, bits_float(0x7f800001u), bits_float(0xff800001u), bits_float(0x7fffffffu)}) {
    const std::uint16_t b = bfloat16(n).bits();
    CHECK(bf16_is_nan(b));
    CHECK((b & 0x40) != 0);
    CHECK(((b & 0x8000) != 0) == std::signbit(n));
  }
  CHECK(bfloat16(bits_float(0x7fffffffu)).bits() == 0x7fff);  // no carry out of a NaN payload
  CHECK((float_bits(float(bfloat16::from_bits(0x7f81))) & 0x400000u) != 0);  // quieted
}

TEST_CASE(
    "bfloat16: float -> bfloat16 matches the reference on a strided sweep of all float bits") {
  int failures = 0;
  std::uint64_t checked = 0;
  for (const std::uint64_t stride : {65537ull, 4099ull}) {
    for (std::uint64_t u = 0; u <= 0xffffffffull && failures < kMaxReported; u += stride) {
      const float f = bits_float(static_cast<std::uint32_t>(u));
      ++checked;
      if (!check_bf16_conversion(f)) {
        ++failures;
        FAIL_CHECK("float bits " << hex(static_cast<std::uint32_t>(u)) << " (" << f
                                 << ") -> bfloat16 " << hex(bfloat16(f).bits())
                                 << ", expected value " << ref_float_to_bf16(f));
      }
    }
  }
  CHECK(checked > 1000000);
  CHECK(failures == 0);
}

// ---- use in an element-wise loop (the shape reductions use) ----------------------------------

TEST_CASE("element-wise sum loops over half and bfloat16 match per-element conversion") {
  constexpr std::size_t n = 4099;
  std::vector<half> ha(n), hb(n), ho(n);
  std::vector<bfloat16> ba(n), bb(n), bo(n);
  std::uint32_t state = 12345u;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<std::uint16_t>(state >> 16);
  };
  for (std::size_t i = 0; i < n; ++i) {
    ha[i] = half::from_bits(next());
    hb[i] = half::from_bits(next());
    ba[i] = bfloat16::from_bits(next());
    bb[i] = bfloat16::from_bits(next());
  }
  for (std::size_t i = 0; i < n; ++i) ho[i] = half(float(ha[i]) + float(hb[i]));
  for (std::size_t i = 0; i < n; ++i) bo[i] = bfloat16(float(ba[i]) + float(bb[i]));
  int failures = 0;
  for (std::size_t i = 0; i < n && failures < kMaxReported; ++i) {
    const double hs = static_cast<double>(float(ha[i]) + float(hb[i]));
    const double bs = static_cast<double>(float(ba[i]) + float(bb[i]));
    const bool hok = std::isnan(hs) ? half_is_nan(ho[i].bits())
                                    : same_value(ref_half_value(ho[i].bits()),
                                                 ref_float_to_half(static_cast<float>(hs)));
    const bool bok = std::isnan(bs) ? bf16_is_nan(bo[i].bits())
                                    : same_value(ref_bf16_value(bo[i].bits()),
                                                 ref_float_to_bf16(static_cast<float>(bs)));
    if (!hok || !bok) {
      ++failures;
      FAIL_CHECK("element " << i << ": half ok " << hok << ", bfloat16 ok " << bok);
    }
  }
  CHECK(failures == 0);
}

// ---- hardware conversions (core/half_simd.hpp) -------------------------------------------------

TEST_CASE("half: bulk conversions (F16C where the CPU has it) equal the portable ones bit for bit") {
  const std::string hw = std::string("F16C in use: ") + (gsync::detail::f16c_available() ? "yes" : "no");
  MESSAGE(hw);
  // Every half, widened in bulk.
  std::vector<half> all(65536);
  for (std::uint32_t u = 0; u < 65536; ++u) all[u] = half::from_bits(static_cast<std::uint16_t>(u));
  std::vector<float> wide(all.size());
  gsync::detail::halves_to_floats(all.data(), wide.data(), all.size());
  int failures = 0;
  for (std::uint32_t u = 0; u < 65536 && failures < kMaxReported; ++u)
    if (float_bits(wide[u]) != float_bits(float(all[u]))) {
      ++failures;
      FAIL_CHECK("half bits " << hex(u) << " widened to " << hex(float_bits(wide[u])));
    }
  // Floats narrowed in bulk: a strided sweep of all bit patterns, every float near the subnormal
  // range and the midpoints, in one odd-length array (so the scalar tail runs too).
  std::vector<float> f;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 40009) f.push_back(bits_float(static_cast<std::uint32_t>(u)));
  for (std::uint32_t u = float_bits(0x1p-26f); u < float_bits(0x1p-13f); u += 997) f.push_back(bits_float(u)), f.push_back(-bits_float(u));
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {  // between each half and the next: the midpoint and its neighbours
    const float mid = (float(half::from_bits(static_cast<std::uint16_t>(h))) + float(half::from_bits(static_cast<std::uint16_t>(h + 1)))) / 2;
    for (const std::uint32_t d : {0u, 1u}) f.push_back(bits_float(float_bits(mid) + d)), f.push_back(bits_float(float_bits(mid) - d));
  }
  if (f.size() % 2 == 0) f.push_back(65520.0f);
  std::vector<half> narrow(f.size());
  gsync::detail::floats_to_halves(f.data(), narrow.data(), f.size());
  for (std::size_t i = 0; i < f.size() && failures < kMaxReported; ++i)
    if (narrow[i].bits() != half(f[i]).bits()) {
      ++failures;
      FAIL_CHECK("float bits " << hex(float_bits(f[i])) << " narrowed to " << hex(narrow[i].bits()) << ", expected "
                               << hex(half(f[i]).bits()));
    }
  CHECK(f.size() > 100000);
  CHECK(failures == 0);
}

/// The reduction loops over T (reduce_to, both in-place forms, with and without finalize) against
/// per-element combination in float, on random bit patterns; any NaN matches any NaN (which input's
/// payload a NaN result carries depends on the order the compiler gave the operands).
/// \tparam T half or bfloat16. \param is_nan tells a NaN bit pattern of T.
template <class T>
void check_reduction_loops(bool (*is_nan)(std::uint16_t), std::uint32_t seed) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{32}, std::size_t{33}, std::size_t{64},
                              std::size_t{65}, std::size_t{4099}}) {
    CAPTURE(n);
    std::vector<T> a(n), b(n), expect(n), expect_avg(n), got(n);
    std::uint32_t state = seed + static_cast<std::uint32_t>(n);
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<std::uint16_t>(state >> 16);
    };
    for (std::size_t i = 0; i < n; ++i) a[i] = T::from_bits(next()), b[i] = T::from_bits(next());
    for (std::size_t i = 0; i < n; ++i) {
      expect[i] = T(float(a[i]) + float(b[i]));
      expect_avg[i] = T((float(a[i]) + float(b[i])) / 3.0f);
    }
    auto same = [&](const std::vector<T>& x, const std::vector<T>& y) {
      for (std::size_t i = 0; i < n; ++i)
        if (x[i].bits() != y[i].bits() && !(is_nan(x[i].bits()) && is_nan(y[i].bits()))) return false;
      return true;
    };
    const gsync::op::sum sum;
    const gsync::op::avg avg;
    gsync::detail::reduce_to<false>(got.data(), a.data(), b.data(), n, sum, 3);
    CHECK(same(got, expect));
    got = a;
    gsync::detail::reduce_inplace<false>(got.data(), b.data(), n, sum, 3);
    CHECK(same(got, expect));
    got = b;
    gsync::detail::reduce_inplace_rhs<false>(got.data(), a.data(), n, sum, 3);
    CHECK(same(got, expect));
    gsync::detail::reduce_to<true>(got.data(), a.data(), b.data(), n, avg, 3);
    CHECK(same(got, expect_avg));
  }
}

TEST_CASE("half: the reduction loops (F16C where the CPU has it) equal per-element combination, in and out of place") {
  check_reduction_loops<half>(half_is_nan, 777u);
}

TEST_CASE("bfloat16: bulk conversions and reduction loops (AVX2 where the CPU has it) equal the portable ones bit for bit") {
  MESSAGE("AVX2 in use: " << std::string(gsync::detail::avx2_available() ? "yes" : "no"));
  // Every bfloat16, widened in bulk.
  std::vector<bfloat16> all(65536);
  for (std::uint32_t u = 0; u < 65536; ++u) all[u] = bfloat16::from_bits(static_cast<std::uint16_t>(u));
  std::vector<float> wide(all.size());
  gsync::detail::bfloat16s_to_floats(all.data(), wide.data(), all.size());
  int failures = 0;
  for (std::uint32_t u = 0; u < 65536 && failures < kMaxReported; ++u)
    if (float_bits(wide[u]) != float_bits(float(all[u]))) {
      ++failures;
      FAIL_CHECK("bfloat16 bits " << hex(u) << " widened to " << hex(float_bits(wide[u])));
    }
  // Floats narrowed in bulk: a strided sweep of all bit patterns plus every midpoint between
  // neighbouring bfloat16 values of one exponent range and its +-1 ulp neighbours, odd length.
  std::vector<float> f;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 40009) f.push_back(bits_float(static_cast<std::uint32_t>(u)));
  for (std::uint32_t b = 0x3f00; b < 0x4080; ++b)
    for (const std::uint32_t d : {0u, 1u}) {
      const std::uint32_t mid = (b << 16) | 0x8000u;
      f.push_back(bits_float(mid + d)), f.push_back(bits_float(mid - d)), f.push_back(-bits_float(mid + d));
    }
  if (f.size() % 2 == 0) f.push_back(3.0e38f);
  std::vector<bfloat16> narrow(f.size());
  gsync::detail::floats_to_bfloat16s(f.data(), narrow.data(), f.size());
  for (std::size_t i = 0; i < f.size() && failures < kMaxReported; ++i)
    if (narrow[i].bits() != bfloat16(f[i]).bits()) {
      ++failures;
      FAIL_CHECK("float bits " << hex(float_bits(f[i])) << " narrowed to " << hex(narrow[i].bits()) << ", expected "
                               << hex(bfloat16(f[i]).bits()));
    }
  CHECK(failures == 0);
  // The reduction loops, in and out of place, with and without finalize.
  check_reduction_loops<bfloat16>(bf16_is_nan, 99u);
}
