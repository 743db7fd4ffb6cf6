// The stand-in libibverbs' fabric: one POSIX shared-memory segment that every process of a test
// maps (at its own address, so it holds offsets and indices, never pointers). It holds the device
// table, one slot per attached process ("host": its LID, GIDs and two inbound rings), the QP records
// that route a QPN to its owner, the MR records, and the process-shared lock over the tables.
#pragma once
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ibv_emu {

constexpr uint32_t kMagic = 0x47494245u;  // "GIBE"
constexpr uint32_t kLayoutVersion = 1;
constexpr int kMaxDevices = 8;
constexpr int kMaxPorts = 4;
constexpr int kSlots = 64;        // processes attached at once
constexpr int kQpRecords = 4096;  // a QPN's low 12 bits are its record's index
constexpr int kMrRecords = 8192;
constexpr int kGids = 2;          // 0: fe80::/64 link-local, 1: ::ffff:10.0.x.y (RoCE v2 style)
constexpr uint64_t kCtrlRingBytes = 64u << 10;
constexpr uint64_t kDefaultBytes = 64ull << 20;
constexpr uint64_t kMinBytes = 16ull << 20;
constexpr uint64_t kMaxChunk = 64u << 10;

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Doorbells are shared futex words (not FUTEX_PRIVATE: the waiter and the wakers are different
// processes mapping the same page).
inline void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, int64_t timeout_ns) {
  if (timeout_ns <= 0) return;
  timespec ts{time_t(timeout_ns / 1000000000), long(timeout_ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}
inline void ring_doorbell(std::atomic<uint32_t>& word) {
  word.fetch_add(1, std::memory_order_release);
  futex_wake_all(&word);
}

// A robust, process-shared mutex. A holder that dies leaves it to the next locker (EOWNERDEAD),
// which marks it consistent: every update under it publishes with one final store (a ring's head,
// a record's key), so a half-done update is never seen.
struct shm_mutex {
  pthread_mutex_t m;
  void init() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m, &a);
    pthread_mutexattr_destroy(&a);
  }
  void lock() {
    int rc = pthread_mutex_lock(&m);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&m);
    else if (rc != 0) abort();
  }
  void unlock() { pthread_mutex_unlock(&m); }
};

struct shm_lock {
  shm_mutex& m;
  explicit shm_lock(shm_mutex& mm) : m(mm) { m.lock(); }
  ~shm_lock() { m.unlock(); }
  shm_lock(const shm_lock&) = delete;
  shm_lock& operator=(const shm_lock&) = delete;
};

// Records in a ring: 8-byte aligned, `bytes` counts the header. A pad record fills the end of the
// ring when the next record does not fit before it.
struct rec_hdr {
  uint32_t bytes;
  uint32_t type;
};
enum rec_type : uint32_t { rec_pad = 0, rec_request = 1, rec_ack = 2, rec_nak = 3, rec_port = 4 };

// One chunk of a request (an RDMA write or a send), then `len` payload bytes.
enum req_flags : uint32_t { req_first = 1, req_last = 2, req_solicited = 4 };
struct request {
  uint32_t src_qpn, dst_qpn;
  uint32_t psn, npkts;  // the message's first PSN and how many PSNs it spans
  uint32_t opcode;      // enum ibv_wr_opcode
  uint32_t flags;
  uint32_t imm;         // as posted: network byte order on the wire
  uint32_t rkey;
  uint64_t raddr;
  uint64_t total;       // the message's length
  uint64_t offset;      // of this chunk in the message
  uint32_t len;         // this chunk's payload
  uint32_t gen;         // the requester's retransmission round, echoed in NAKs
};

// The responder's answer, into the requester's control ring.
enum nak_code : uint32_t { nak_rnr = 1, nak_access = 2, nak_rem_op = 3, nak_inv_req = 4 };
struct reply {
  uint32_t src_qpn;  // the responder's QP
  uint32_t dst_qpn;  // the requester's QP
  uint32_t psn, gen;
  uint32_t code;     // nak_code (rec_nak)
  uint32_t detail;   // RNR: the responder's min_rnr_timer; access: the vendor_err to report
};

// A port changed state (control "port_down"/"port_up"): to every host's control ring, so each
// raises PORT_ERR / PORT_ACTIVE in order, however quickly the port goes down and up again.
struct port_event {
  uint32_t dev, port, state, pad;
};

// A multi-producer, single-consumer byte ring: any process appends under `producers`; the owner's
// progress thread consumes. head/tail count bytes since the ring was reset.
struct ring {
  shm_mutex producers;
  std::atomic<uint64_t> head;
  std::atomic<uint64_t> tail;
  uint64_t offset;  // of the ring's bytes from the segment's start
  uint64_t size;    // multiple of 8
};

inline constexpr uint64_t align8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

// Appends one record (header part `a`, then `payload` bytes written by fill(dst)); false when it
// does not fit now (the caller retries later: back-pressure).
template <class Fill>
bool ring_push(uint8_t* base, ring& r, uint32_t type, const void* a, uint32_t alen, uint64_t payload,
               Fill&& fill) {
  const uint64_t need = align8(sizeof(rec_hdr) + alen + payload);
  shm_lock l(r.producers);
  uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint64_t tail = r.tail.load(std::memory_order_acquire);
  uint64_t pos = head % r.size;
  const uint64_t room_to_end = r.size - pos;
  const uint64_t pad = room_to_end < need ? room_to_end : 0;
  if (head + pad + need - tail > r.size) return false;
  uint8_t* data = base + r.offset;
  if (pad) {
    rec_hdr p{uint32_t(pad), rec_pad};
    std::memcpy(data + pos, &p, sizeof p);
    head += pad;
    pos = 0;
  }
  rec_hdr h{uint32_t(need), type};
  std::memcpy(data + pos, &h, sizeof h);
  std::memcpy(data + pos + sizeof h, a, alen);
  if (payload) fill(data + pos + sizeof h + alen);
  r.head.store(head + need, std::memory_order_release);
  return true;
}
inline bool ring_push(uint8_t* base, ring& r, uint32_t type, const void* a, uint32_t alen) {
  return ring_push(base, r, type, a, alen, 0, [](uint8_t*) {});
}

// The next record, or nullptr (pads are skipped here).
inline const rec_hdr* ring_peek(uint8_t* base, ring& r) {
  uint64_t tail = r.tail.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t head = r.head.load(std::memory_order_acquire);
    if (tail == head) return nullptr;
    const auto* h = reinterpret_cast<const rec_hdr*>(base + r.offset + tail % r.size);
    if (h->type != rec_pad) return h;
    tail += h->bytes;
    r.tail.store(tail, std::memory_order_release);
  }
}
inline void ring_pop(ring& r, const rec_hdr* h) {
  r.tail.store(r.tail.load(std::memory_order_relaxed) + h->bytes, std::memory_order_release);
}

struct dev_rec {
  char name[64];
  uint32_t nports;
  uint32_t link_layer[kMaxPorts];  // IBV_LINK_LAYER_INFINIBAND or _ETHERNET
  uint32_t active_mtu[kMaxPorts];  // enum ibv_mtu
  std::atomic<uint32_t> port_state[kMaxPorts];  // enum ibv_port_state: fabric-wide
};

// One attached process, with its progress thread's doorbell and inbound rings.
struct slot {
  std::atomic<int32_t> pid;  // 0: free; set last when claimed
  std::atomic<uint32_t> doorbell;  // the progress thread sleeps on it
  ring data;  // requests with payload
  ring ctrl;  // ACKs and NAKs: apart, so replies flow while the data ring is full
};

struct qp_rec {
  std::atomic<uint32_t> qpn;  // 0: free
  std::atomic<uint32_t> gen;  // bumped on each reuse of the record, so a QPN is never reused
  std::atomic<int32_t> slot;
  std::atomic<uint32_t> dev, port;
  std::atomic<uint32_t> lid;  // the owning context's address (its GIDs follow from it)
  // Mirrors for diagnostics ("stats"); every check uses the owner's own copy.
  std::atomic<uint32_t> state, dest_qpn, rq_psn, sq_psn, access;
};

struct mr_rec {
  std::atomic<int32_t> pid;  // 0: free
  int32_t slot;
  uint64_t addr, length, iova;
  uint32_t access, lkey, rkey, pd;
};

struct header {
  std::atomic<uint32_t> ready;  // set by the creator once everything below is written
  uint32_t magic, version;
  uint64_t bytes;
  uint64_t secret;  // scrambles keys: rkeys are unique and not trivially guessable
  shm_mutex lock;   // slot claims, QP and MR record allocation
  std::atomic<uint32_t> key_counter, qp_cursor, mr_cursor;
  std::atomic<uint32_t> auto_lids;  // LIDs handed to contexts under GSYNC_IBV_EMU_LID=auto
  uint32_t ndev;
  dev_rec dev[kMaxDevices];
  slot slots[kSlots];
  qp_rec qps[kQpRecords];
  mr_rec mrs[kMrRecords];
};

// Bijective 32-bit mix (the murmur3 finalizer): distinct counters give distinct keys.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

inline void gids_for_lid(uint32_t lid, uint8_t (&gid)[kGids][16]) {
  std::memset(gid, 0, sizeof gid);
  // fe80::200:ff:fe00:LID, the link-local GID of a port whose MAC is 02:00:00:00:LIDhi:LIDlo.
  gid[0][0] = 0xfe;
  gid[0][1] = 0x80;
  gid[0][8] = 0x02;
  gid[0][11] = 0xff;
  gid[0][12] = 0xfe;
  gid[0][14] = uint8_t(lid >> 8);
  gid[0][15] = uint8_t(lid);
  // ::ffff:10.0.LIDhi.LIDlo, an IPv4-mapped GID as RoCE v2 uses.
  gid[1][10] = 0xff;
  gid[1][11] = 0xff;
  gid[1][12] = 10;
  gid[1][14] = uint8_t(lid >> 8);
  gid[1][15] = uint8_t(lid);
}

// GSYNC_IBV_EMU_LID=auto: every context gets a LID of its own from here up.
constexpr uint32_t kAutoLidBase = 0x1000;

inline uint32_t mtu_bytes(uint32_t mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 4096u; }

}  // namespace ibv_emu
