#pragma once
/// \file
/// Random bytes for set-up (non-templated): the job nonce, the shared-memory rings' stamp keys and,
/// without OpenSSL, the authentication challenges.
///
/// std::random_device throws when its source cannot be opened (a container without /dev/urandom,
/// a seccomp profile that forbids getrandom, a descriptor limit reached), and an exception there
/// failed set-up for a value that only has to differ between jobs and rings. So the kernel is asked
/// directly: getrandom(2), then /dev/urandom. `os_bytes` reports failure instead of throwing; where
/// the value only has to be unpredictable to accidents (a stale stamp, a rank of an earlier job),
/// `u64` falls back to a mix of the clocks, the pid, an address and a counter. Where it must be
/// unpredictable to an attacker (the authentication challenge), the caller fails instead.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace gsync::detail::random {

/// Fills `n` bytes at `p` from the kernel's generator (getrandom, then /dev/urandom). False when
/// neither could deliver them all; never throws.
inline bool os_bytes(void* p, std::size_t n) noexcept {
  auto* b = static_cast<unsigned char*>(p);
  std::size_t got = 0;
#ifdef SYS_getrandom
  while (got < n) {
    const long r = ::syscall(SYS_getrandom, b + got, n - got, 0);
    if (r > 0) got += static_cast<std::size_t>(r);
    else if (r < 0 && errno == EINTR) continue;
    else break;
  }
  if (got == n) return true;
#endif
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (got < n) {
    const ssize_t r = ::read(fd, b + got, n - got);
    if (r > 0) got += static_cast<std::size_t>(r);
    else if (r < 0 && errno == EINTR) continue;
    else break;
  }
  ::close(fd);
  return got == n;
}

/// splitmix64's finaliser: spreads every input bit over the whole word.
inline std::uint64_t mix(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// 64 random bits from the kernel; where it has none to give, a value that still differs between
/// processes, calls and moments (clocks, pid, a stack address, a counter), not one an attacker
/// could not guess. Never throws.
inline std::uint64_t u64() noexcept {
  std::uint64_t v = 0;
  if (os_bytes(&v, sizeof v)) return v;
  static std::atomic<std::uint64_t> counter{0};
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto wall = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  int here = 0;
  v = mix(now ^ mix(wall ^ mix(static_cast<std::uint64_t>(::getpid()) ^
                                mix(reinterpret_cast<std::uintptr_t>(&here) ^ mix(counter.fetch_add(1))))));
  return v;
}

}  // namespace gsync::detail::random
