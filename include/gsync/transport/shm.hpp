#pragma once
/// \file
/// Shared-memory building blocks of the host transport (non-templated): a POSIX shared-memory
/// segment per rank, single-producer single-consumer byte rings inside it, and a doorbell (a futex
/// word) on which the segment's owner sleeps when it has nothing to do.
///
/// Layout of rank r's segment (created by r, mapped by every other rank of its host):
///   [segment_header: magic, geometry, r's doorbell]                      4 KiB
///   [ring from local rank 0] [ring from local rank 1] ... [from L-1]     L x (128 B + ring_bytes)
/// The ring "from local rank j" is written by j and read by r: r's inbound traffic lives in r's
/// own memory. A message occupies [8-byte stamp][48-byte frame header][payload], starting on a
/// 64-byte boundary of the ring; payload bytes start 8-byte aligned, so pieces whose length is a
/// multiple of an element size (1, 2, 4 or 8) never split an element at the ring's wrap point
/// (ring_bytes is a multiple of 64).
///
/// The stamp: the producer writes the header and the payload's first bytes (`stamped_payload`:
/// up to 968, as far as the ring's end), then stores the stamp (release), then publishes `head`.
/// A consumer waiting for a message polls the stamp slot where the message will start, not
/// `head`: the stamp shares a cache line with the header and a small payload, so one cache line
/// crosses cores per small message instead of two in a row (the control line holding `head`, then
/// the data), which shortens a small message's round trip (benchmarks/results/from_code_comments.md).
/// A stamp is the message's ring position (+1) xor a random key the ring's owner draws at creation
/// (`ring_ctl::stamp_key`), so neither an older lap's stamp nor a user's payload bytes left in the
/// ring can pass for a new message (a payload would have to contain the key). Bytes past the
/// stamped ones are waited for through `head`, as before.
///
/// Signalling is lock-free: the producer publishes `head` (release), the consumer `tail`. A rank
/// that must wait spins a bounded time, then announces itself in its doorbell's `sleepers` and
/// sleeps on the futex word `bell` with a timeout; whoever publishes something the sleeper may
/// need (data into its inbound ring, space in a ring it writes) bumps `bell` and wakes it. The
/// store-fence-load on both sides (see `notify` and `arm`) rules out a lost wake-up.
///
/// The fence on the producer's side sits on every message's path (a full fence waits until the
/// store of `head` has reached the other core, a sizeable part of a small message's round trip:
/// benchmarks/results/from_code_comments.md). When every rank of the host has registered for
/// membarrier(2)'s GLOBAL_EXPEDITED command, the fences are made
/// asymmetric: the producer's becomes a compiler barrier only, and a sleeper, on its way to sleep,
/// issues membarrier(GLOBAL_EXPEDITED), which runs a full barrier on every CPU that is running a
/// registered process. Either that barrier falls between a producer's stores (the stamp, then
/// `head`) and its load of `sleepers` (the stores are visible to the sleeper's re-check of the
/// stamp or `head`), or before the stores (the load sees `sleepers` set), or after both (the
/// stores were drained by the barrier before the sleeper's re-check). The sleeper pays a few microseconds, once per sleep, which follows a spin of
/// tens of microseconds or more. Should the call fail after a successful registration, a wake-up may
/// be lost: sleeps are timed (at most 100 ms), and the waiter re-checks after each one.
///
/// Cleanup: segments are unlinked as soon as every rank of the host has mapped them (end of
/// setup), so the kernel frees them when the last process exits or is killed; nothing is left in
/// /dev/shm after a crash. Segment names carry the creator's pid so that a launcher can remove the
/// segments of a child it saw die during setup (gsyncrun does).

#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "gsync/core/error.hpp"
#include "gsync/detail/posix_shm.hpp"
#include "gsync/detail/random.hpp"

namespace gsync::transport::shm {

/// Wait/wake word of one rank, in its segment (see file comment).
struct alignas(64) doorbell {
  std::atomic<std::uint32_t> bell{0};      ///< bumped on every event the owner may wait for
  std::atomic<std::uint32_t> sleepers{0};  ///< threads of the owner (about to be) asleep on `bell` (several: shared mode)
  std::atomic<std::uint32_t> failed{0};    ///< 1 once the owner has failed: peers stop waiting for it
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free && sizeof(std::atomic<std::uint32_t>) == 4);

/// Registers this process for asymmetric fences (membarrier GLOBAL_EXPEDITED, see the file comment)
/// and checks that the command runs. Once per process; the result is remembered. False on kernels
/// without it (before 4.16) or where a seccomp profile forbids membarrier.
inline bool asymmetric_fences_available() noexcept {
#ifdef SYS_membarrier
  static const bool ok = [] {
    const long q = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    const long need = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
    if (q < 0 || (q & need) != need) return false;
    if (::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) != 0) return false;
    return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

/// Wakes the owner of `d` if it sleeps. Call after publishing: the fence orders the publication
/// before the read of `sleepers` (the sleeper's `arm` orders its announcement before its re-check).
/// With `light` (every rank of the host uses asymmetric fences, see the file comment) the fence is
/// a compiler barrier only: the sleeper's membarrier supplies the other half.
inline void notify(doorbell& d, bool light = false) noexcept {
  if (light) std::atomic_signal_fence(std::memory_order_seq_cst);
  else std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d.sleepers.load(std::memory_order_relaxed)) {
    d.bell.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&d.bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

/// Announces that the owner is about to sleep; returns the bell value to sleep on. The caller must
/// re-check its wait condition after `arm` and before `sleep`. With `light` (as given to the
/// producers' `notify`), the fence is membarrier(GLOBAL_EXPEDITED): a barrier on every CPU running
/// a registered process.
inline std::uint32_t arm(doorbell& d, bool light = false) noexcept {
  d.sleepers.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
#ifdef SYS_membarrier
  if (light) ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
#endif
  return d.bell.load(std::memory_order_seq_cst);
}

/// Sleeps until `bell` differs from `seen`, a wake, or `ms` milliseconds; then withdraws from `sleepers`.
/// Returns true when the sleep lasted the whole `ms` (nobody rang).
inline bool sleep(doorbell& d, std::uint32_t seen, int ms) noexcept {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  const long rc = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&d.bell), FUTEX_WAIT, seen, &ts, nullptr, 0);
  const bool timed_out = rc != 0 && errno == ETIMEDOUT;
  d.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return timed_out;
}

/// Cancels an `arm` without sleeping.
inline void disarm(doorbell& d) noexcept { d.sleepers.fetch_sub(1, std::memory_order_relaxed); }

/// Control words of one ring; head and tail on separate cache lines (no false sharing).
struct ring_ctl {
  alignas(64) std::atomic<std::uint64_t> head{0};  ///< bytes ever published by the producer
  alignas(64) std::atomic<std::uint64_t> tail{0};  ///< bytes ever released by the consumer
  std::uint64_t stamp_key = 0;  ///< drawn by the ring's owner at creation, read once by the producer
  /// The consumer's answer to the by-reference message it is at (single copy:
  /// transport/shm_single_copy.hpp): (its number << 1) | 1 when it declines it (the producer then
  /// writes the payload into the ring after it), (its number << 1) once it has read the payload
  /// out of the producer's memory (the producer's buffer is then free again).
  std::atomic<std::uint64_t> ref_answer{0};
  /// Set by the consumer once it has read the producer's memory at set-up (the probe of
  /// shm_single_copy.hpp): from then on the producer may send large payloads by reference.
  std::atomic<std::uint32_t> single_copy{0};
};
static_assert(sizeof(ring_ctl) == 128);

/// Bytes of a message's stamp and frame header in the ring (the payload follows at once).
inline constexpr std::size_t header_slot = 56;
/// Offset of the frame header in a message (after the stamp).
inline constexpr std::size_t header_offset = 8;
/// Most payload bytes written before a message's stamp (header and payload within 1 KiB).
inline constexpr std::size_t stamped_payload_max = 1024 - header_slot;

/// Rounds `x` up to a multiple of 64 (message starts).
constexpr std::uint64_t align64(std::uint64_t x) noexcept { return (x + 63) & ~std::uint64_t{63}; }

/// The stamp of the message starting at ring position `start` (a multiple of 64) of a ring with
/// key `key` (low 6 bits clear, so a stamp is never 0, the value of a ring never written).
constexpr std::uint64_t stamp_of(std::uint64_t start, std::uint64_t key) noexcept { return (start + 1) ^ key; }
/// The stamp of a by-reference message (its payload stays in the producer's memory; the 8 bytes
/// after the header hold its address: transport/shm_single_copy.hpp): the top bit flipped, which
/// no ring position reaches, so it never equals a plain message's stamp.
constexpr std::uint64_t ref_stamp_of(std::uint64_t start, std::uint64_t key) noexcept {
  return stamp_of(start, key) ^ (std::uint64_t{1} << 63);
}
/// Ring bytes of a by-reference message: stamp, header and the payload's address (one cache line).
inline constexpr std::size_t ref_slot = 64;

/// Payload bytes of an n-byte message starting at `start` that its stamp vouches for: the first
/// ones, up to stamped_payload_max, as far as the end of a ring of `cap` bytes (the producer
/// writes them before the stamp, the consumer reads them without looking at `head`).
constexpr std::size_t stamped_payload(std::uint64_t start, std::size_t n, std::uint64_t cap) noexcept {
  const std::uint64_t to_end = cap - (start + header_slot) % cap;  // >= 8: a header never wraps (starts are 64-aligned)
  return static_cast<std::size_t>(std::min<std::uint64_t>({n, stamped_payload_max, to_end}));
}

/// Stores a stamp (release: what was written before it is visible to whoever reads the stamp).
inline void put_stamp(std::byte* at, std::uint64_t v) noexcept {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at)).store(v, std::memory_order_release);
}
/// Reads a stamp (acquire).
inline std::uint64_t get_stamp(std::byte* at) noexcept {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at)).load(std::memory_order_acquire);
}

/// First bytes of every segment.
struct segment_header {
  std::uint32_t magic = 0x4D485347u;  ///< "GSHM"
  std::uint32_t version = 3;          ///< 2: messages carry stamps; 3: by-reference messages
  std::uint32_t slots = 0;            ///< rings in the segment (ranks on the host)
  std::uint32_t reserved = 0;
  std::uint64_t ring_bytes = 0;       ///< data bytes of every ring
  doorbell db;                        ///< the owner's doorbell
  std::int64_t owner_pid = 0;         ///< the owner's process id, as it sees it (single copy)
  std::uint64_t probe_addr = 0;       ///< where `probe_value` lies in the owner's memory (single copy)
  std::uint64_t probe_value = 0;      ///< a random word the peers read there to prove they can
};

/// Where the rings start in a segment.
inline constexpr std::size_t rings_offset = 4096;
static_assert(sizeof(segment_header) <= rings_offset);

/// Bytes of a segment with `slots` rings of `ring_bytes` each.
constexpr std::size_t segment_bytes(std::size_t slots, std::size_t ring_bytes) noexcept {
  return rings_offset + slots * (sizeof(ring_ctl) + ring_bytes);
}

/// A mapped segment (RAII: unmaps on destruction; the creator also unlinks if still linked).
class segment {
 public:
  segment() = default;

  /// Creates, sizes (memory reserved now, so a full /dev/shm is an error here, not a SIGBUS later)
  /// and maps segment `name` with `slots` rings of `ring_bytes`. Throws errc::system on failure.
  static segment create(const std::string& name, std::uint32_t slots, std::size_t ring_bytes) {
    const std::size_t bytes = segment_bytes(slots, ring_bytes);
    gsync::detail::posix_shm::failure why;
    segment s;
    s.m_ = gsync::detail::posix_shm::create(name, bytes, /*populate=*/true, why);
    if (!s.m_) {
      if (why.call != std::string_view("posix_fallocate"))
        throw error(errc::system, std::string(why.call) + "(" + name + ", create): " + std::strerror(why.err));
      std::string room;  // the limit, as the file system says it
      struct statvfs v {};
      if (::statvfs("/dev/shm", &v) == 0)
        room = "/dev/shm holds " + std::to_string((static_cast<unsigned long long>(v.f_blocks) * v.f_frsize) >> 10) + " KiB, " +
               std::to_string((static_cast<unsigned long long>(v.f_bavail) * v.f_frsize) >> 10) + " KiB free; ";
      throw error(errc::system, "cannot reserve " + std::to_string(bytes >> 10) + " KiB of shared memory for " + name + ": " +
                                    std::strerror(why.err) + " (" + room + "make it larger: mount -o remount,size=... /dev/shm, in docker --shm-size; "
                                    "GSYNC_SHM_BYTES makes the rings smaller, GSYNC_SHM_DISABLE=1 uses TCP)");
    }
    // MAP_POPULATE faults every page in now; otherwise each message that reaches a page of the ring
    // not yet touched pays a page fault in both processes. On virtual machines with shadow page
    // tables that is still not enough: the first access of each process to each page costs a
    // hypervisor exit, invisible as a guest page fault (both costs: benchmarks/results/from_code_comments.md).
    // So the owner writes the whole segment now and each writer writes its ring at set-up
    // (shm_endpoint::connect).
    std::memset(s.m_.data(), 0, bytes);
    auto* h = new (s.m_.data()) segment_header{};
    h->slots = slots;
    h->ring_bytes = ring_bytes;
    for (std::uint32_t i = 0; i < slots; ++i) {
      auto* c = new (s.m_.data() + rings_offset + i * (sizeof(ring_ctl) + ring_bytes)) ring_ctl{};
      c->stamp_key = detail::random::u64() & ~std::uint64_t{63};
    }
    return s;
  }

  /// Maps the existing segment `name`, checking that it has the expected geometry.
  static segment open(const std::string& name, std::uint32_t slots, std::size_t ring_bytes) {
    gsync::detail::posix_shm::failure why;
    segment s;
    s.m_ = gsync::detail::posix_shm::open(name, segment_bytes(slots, ring_bytes), /*populate=*/true, why);
    if (!s.m_ && why.err == EBADMSG) throw error(errc::mismatch, "shared-memory segment " + name + " has an unexpected size");
    if (!s.m_)
      throw error(errc::system, std::string(why.call) + "(" + name + "): " + std::strerror(why.err) +
                                    " (ranks of one host must run as the same user; GSYNC_SHM_DISABLE=1 falls back to TCP)");
    const auto& h = s.header();
    if (h.magic != segment_header{}.magic || h.version != segment_header{}.version || h.slots != slots || h.ring_bytes != ring_bytes)
      throw error(errc::mismatch, "shared-memory segment " + name + " has an unexpected layout (different gsync versions?)");
    return s;
  }

  /// Removes the name (the memory lives on while mapped). Idempotent.
  void unlink() noexcept { m_.unlink(); }

  /// The owner's doorbell.
  doorbell& bell() const noexcept { return header().db; }
  /// The segment's first bytes.
  segment_header& header() const noexcept { return *reinterpret_cast<segment_header*>(m_.data()); }
  /// Control words of ring `slot`.
  ring_ctl& ctl(std::uint32_t slot) const noexcept {
    return *reinterpret_cast<ring_ctl*>(m_.data() + rings_offset + slot * (sizeof(ring_ctl) + header().ring_bytes));
  }
  /// Data bytes of ring `slot`.
  std::byte* data(std::uint32_t slot) const noexcept { return reinterpret_cast<std::byte*>(&ctl(slot)) + sizeof(ring_ctl); }
  /// True when mapped.
  explicit operator bool() const noexcept { return static_cast<bool>(m_); }

 private:
  gsync::detail::posix_shm m_;
};

}  // namespace gsync::transport::shm
