#pragma once
/// \file
/// Single copy over shared memory: a large payload is not copied into the ring and out again;
/// the ring carries a by-reference message (stamp, frame header, the payload's address:
/// `shm::ref_slot` bytes) and the consumer copies the payload straight from the producer's memory
/// with process_vm_readv(2) (cross-memory attach, as Open MPI's shared-memory transport does),
/// into the receiver's buffer. The producer's buffer is free again once the consumer has answered
/// in the ring's `ref_answer`. A consumer that is reducing declines instead: copying the payload
/// out of the other process and then reducing it would cost it more than the producer's copy into
/// the ring (process_vm_readv copies at about two thirds of memcpy's rate here, pinning every page:
/// benchmarks/results/issue52/single_copy.md), so the producer then writes the payload into the ring
/// right after the reference, and it is read in place as any other. Nothing else goes into the ring
/// while a reference waits for its answer.
///
/// The kernel may refuse (Yama ptrace_scope 1 between ranks not each other's ancestors, 2 or 3; a
/// seccomp filter; ranks in different PID namespaces or users). So at set-up every consumer proves it can read each same-host producer:
/// the producer publishes, in its segment header, its pid, and the address and value of a random
/// word of its memory; the consumer reads that word and, only when it matches, sets the ring's
/// `single_copy` flag, which the producer reads before sending by reference. A refused pair keeps
/// the two copies through the ring (said at INFO), so both sides always agree message by message.

#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "gsync/transport/shm.hpp"

namespace gsync::transport::shm {

/// A random word of this process's memory that same-host peers read to prove they can
/// (see the file comment). One per process; the address is stable for its lifetime.
inline const std::uint64_t& single_copy_probe_word() noexcept {
  static const std::uint64_t w = detail::random::u64() | 1;  // never 0: a zeroed page cannot pass
  return w;
}

/// Publishes this process's probe in its segment header (the owner, at creation).
inline void publish_probe(segment_header& h) noexcept {
  h.owner_pid = static_cast<std::int64_t>(::getpid());
  h.probe_addr = reinterpret_cast<std::uintptr_t>(&single_copy_probe_word());
  h.probe_value = single_copy_probe_word();
}

/// Copies `n` bytes at address `src` of process `pid` to `dst`. Returns 0, or the errno of the
/// refusal (EFAULT also for a short copy: the range is not all mapped).
inline int read_peer(std::int64_t pid, std::uint64_t src, void* dst, std::size_t n) noexcept {
  while (n > 0) {
    const iovec local{dst, n};
    const iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(src)), n};
    const ssize_t r = ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return EFAULT;
    n -= static_cast<std::size_t>(r);  // the kernel may stop short at a page it cannot pin; go on from there
    src += static_cast<std::uint64_t>(r);
    dst = static_cast<std::byte*>(dst) + r;
  }
  return 0;
}

/// True when this process can read the memory of the owner of segment header `h` (its probe word
/// reads back as published); else `why` holds the reason.
inline bool probe_peer(const segment_header& h, int& why) noexcept {
  std::uint64_t v = 0;
  why = 0;
  if (h.owner_pid <= 0 || h.probe_value == 0) return why = EINVAL, false;
  if (const int e = read_peer(h.owner_pid, h.probe_addr, &v, sizeof v)) return why = e, false;
  if (v != h.probe_value) return why = ESRCH, false;  // another process behind that pid (a PID namespace)
  return true;
}

}  // namespace gsync::transport::shm
