#pragma once
/// \file
/// CRC32C (Castagnoli, the iSCSI / ext4 polynomial 0x1EDC6F41, reflected 0x82F63B78), for the
/// optional payload checksum of the host transport (GSYNC_CHECKSUM, transport/mesh/data_path.ipp).
/// With the CPU's instruction where it has one (x86-64 SSE4.2 `crc32`, chosen at run time;
/// AArch64 with the CRC extension, at compile time), else eight table lookups per 8 bytes.
/// `crc32c(0, p, n)` of "123456789" is 0xE3069283, the standard check value.
///
/// The x86 path runs three independent streams over thirds of each block and joins them with
/// the polynomial's shift tables (`shifter`), so that the instruction's 3-cycle latency does not
/// bound it at 8 bytes per 3 cycles.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define GSYNC_CRC32C_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define GSYNC_CRC32C_ARM 1
#endif

namespace gsync::detail {

namespace crc32c_impl {

inline constexpr std::uint32_t poly = 0x82F63B78u;  // reflected Castagnoli

// The tables are filled at run time, once (microseconds), by functions that are deliberately not
// constexpr: the compiler would otherwise compute them while compiling every file that includes
// this header (about 0.4 s each, measured).
using table8 = std::array<std::array<std::uint32_t, 256>, 8>;
// t[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
inline table8 make_slicing_tables() noexcept {
  table8 x{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (poly & (0u - (c & 1u)));
    x[0][b] = c;
  }
  for (int k = 1; k < 8; ++k)
    for (std::uint32_t b = 0; b < 256; ++b) x[k][b] = (x[k - 1][b] >> 8) ^ x[0][x[k - 1][b] & 0xffu];
  return x;
}
inline const table8& slicing_tables() noexcept {
  static const table8 t = make_slicing_tables();
  return t;
}

inline std::uint32_t software(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  const table8& tables = slicing_tables();
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = tables[7][v & 0xff] ^ tables[6][(v >> 8) & 0xff] ^ tables[5][(v >> 16) & 0xff] ^ tables[4][(v >> 24) & 0xff] ^
          tables[3][(v >> 32) & 0xff] ^ tables[2][(v >> 40) & 0xff] ^ tables[1][(v >> 48) & 0xff] ^ tables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ tables[0][(crc ^ *p++) & 0xffu];
  return crc;
}

// Multiplication of two reflected polynomials modulo the CRC polynomial (bitwise; for tables).
inline std::uint32_t gf_mul(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t r = 0;
  for (int i = 0; i < 32; ++i) {
    if (b & 0x80000000u) r ^= a;
    b <<= 1;
    a = (a >> 1) ^ (poly & (0u - (a & 1u)));
  }
  return r;
}
// x^(8 n) mod P in the reflected representation: the operator that appends n zero bytes.
inline std::uint32_t x_pow_8n(std::size_t n) noexcept {
  std::uint32_t r = 0x80000000u;  // x^0
  std::uint32_t sq = 0x00800000u;  // x^8
  while (n) {
    if (n & 1) r = gf_mul(r, sq);
    sq = gf_mul(sq, sq);
    n >>= 1;
  }
  return r;
}
// The CRC register `crc` advanced over `block` zero bytes, as four table lookups (one per byte
// of the register): shift tables for a fixed block length.
struct shifter {
  std::array<std::array<std::uint32_t, 256>, 4> t{};
  explicit shifter(std::size_t block) {
    const std::uint32_t m = x_pow_8n(block);
    for (int k = 0; k < 4; ++k)
      for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = gf_mul(b << (8 * k), m);
  }
  std::uint32_t operator()(std::uint32_t crc) const noexcept {
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
  }
};

#if defined(GSYNC_CRC32C_X86)
inline constexpr std::size_t stripe = 2048;  // bytes per stream per round: 3 streams, 6 KiB a round
inline const shifter& shift_stripe() noexcept {
  static const shifter s{stripe};
  return s;
}

[[gnu::target("sse4.2")]] inline std::uint32_t one_stream(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  std::uint32_t c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

[[gnu::target("sse4.2")]] inline std::uint32_t hardware(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 3 * stripe) {
    std::uint64_t a = crc, b = 0, c = 0;
    const unsigned char *pa = p, *pb = p + stripe, *pc = p + 2 * stripe;
    for (std::size_t i = 0; i < stripe; i += 8) {
      std::uint64_t va, vb, vc;
      std::memcpy(&va, pa + i, 8);
      std::memcpy(&vb, pb + i, 8);
      std::memcpy(&vc, pc + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      c = _mm_crc32_u64(c, vc);
    }
    // CRC(A B C) = shift(shift(crcA) ^ crcB) ^ crcC, with crcB and crcC started from 0
    // (linearity: a CRC register moved past a block of zeros, xored with the block's own CRC).
    const shifter& shift = shift_stripe();
    crc = shift(shift(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b)) ^ static_cast<std::uint32_t>(c);
    p += 3 * stripe;
    n -= 3 * stripe;
  }
  return one_stream(crc, p, n);
}

inline bool have_sse42() noexcept {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace crc32c_impl

/// Whether crc32c() uses a CPU instruction here (for reports).
inline bool crc32c_hardware() noexcept {
#if defined(GSYNC_CRC32C_X86)
  return crc32c_impl::have_sse42();
#elif defined(GSYNC_CRC32C_ARM)
  return true;
#else
  return false;
#endif
}

/// Extends `crc` (0 to start) over [p, p+n): crc32c(crc32c(0, a), b) == crc32c(0, a b).
inline std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(GSYNC_CRC32C_X86)
  if (crc32c_impl::have_sse42()) return ~crc32c_impl::hardware(crc, p, n);
#elif defined(GSYNC_CRC32C_ARM)
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    crc = __crc32cd(crc, v);
    p += 8;
    n -= 8;
  }
  while (n--) crc = __crc32cb(crc, *p++);
  return ~crc;
#endif
  return ~crc32c_impl::software(crc, p, n);
}

}  // namespace gsync::detail
