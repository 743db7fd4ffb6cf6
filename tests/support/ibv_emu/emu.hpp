// The stand-in libibverbs' process-local objects. Every verbs object handed out is a wrapper whose
// first member is the real C struct from <infiniband/verbs.h> (so its layout is the real one), then
// a pointer to the implementation. One process-wide mutex guards all of it: the application's
// threads and the progress thread take it; the fabric's locks are taken under it, never around it.
#pragma once
#include "fabric.hpp"

#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#define IBV_EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace ibv_emu {

// Rules a test may switch off (GSYNC_IBV_EMU_LAX, or "lax RULE" through the control call).
enum rule : uint32_t {
  r_masks = 1u << 0,
  r_addr = 1u << 1,
  r_psn = 1u << 2,
  r_rkey = 1u << 3,
  r_bounds = 1u << 4,
  r_access = 1u << 5,
  r_lkey = 1u << 6,
  r_rnr = 1u << 7,
  r_depth = 1u << 8,
  r_order = 1u << 9,
  r_flush = 1u << 10,
  r_memlock = 1u << 11,
};
extern std::atomic<uint32_t> g_lax;
inline bool strict(rule r) { return (g_lax.load(std::memory_order_relaxed) & r) == 0; }
// The bits of a comma-separated list of rule names; false on an unknown name.
bool parse_rules(const char* list, uint32_t& bits);

// vendor_err of each error completion the stand-in makes (README.md lists them).
enum vendor_code : uint32_t {
  v_loc_prot = 1,   // local SGE outside an MR of its lkey in the QP's PD
  v_rkey = 2,       // no live MR of that rkey in the target (or another PD)
  v_bounds = 3,     // remote range outside the MR
  v_mr_access = 4,  // MR without IBV_ACCESS_REMOTE_WRITE
  v_qp_access = 5,  // target QP without IBV_ACCESS_REMOTE_WRITE
  v_retry = 6,      // no acknowledgement within the retry budget
  v_rnr = 7,        // RNR retries exhausted
  v_flush = 8,      // flushed: the QP is in the error state
  v_rem_op = 9,     // the responder failed on its receive WR (lkey)
  v_rem_inv = 10,   // the message was longer than the responder's receive WR
  v_loc_len = 11,   // (receive side) message longer than the receive WR
  v_recv_prot = 12, // (receive side) receive SGE outside an MR of its lkey
};

struct ctx_impl;
struct pd_impl;
struct mr_impl;
struct cq_impl;
struct qp_impl;
struct chan_impl;

struct emu_device {
  ibv_device dev;
  int index;
};
struct emu_context {
  verbs_context v;  // v.context is what the application holds; verbs_get_ctx() finds v from it
  ctx_impl* impl;
};
struct emu_pd {
  ibv_pd pd;
  pd_impl* impl;
};
struct emu_mr {
  ibv_mr mr;
  mr_impl* impl;
};
struct emu_cq {
  ibv_cq cq;
  cq_impl* impl;
};
struct emu_qp {
  ibv_qp qp;
  qp_impl* impl;
};
struct emu_chan {
  ibv_comp_channel ch;
  chan_impl* impl;
};
static_assert(std::is_standard_layout_v<emu_context> && std::is_standard_layout_v<emu_qp> &&
              std::is_standard_layout_v<emu_cq> && std::is_standard_layout_v<emu_mr>);

inline ctx_impl* impl_of(ibv_context* c) {
  return reinterpret_cast<emu_context*>(reinterpret_cast<char*>(c) - offsetof(emu_context, v.context))->impl;
}
inline pd_impl* impl_of(ibv_pd* p) { return reinterpret_cast<emu_pd*>(p)->impl; }
inline mr_impl* impl_of(ibv_mr* m) { return reinterpret_cast<emu_mr*>(m)->impl; }
inline cq_impl* impl_of(ibv_cq* c) { return reinterpret_cast<emu_cq*>(c)->impl; }
inline qp_impl* impl_of(ibv_qp* q) { return reinterpret_cast<emu_qp*>(q)->impl; }
inline chan_impl* impl_of(ibv_comp_channel* c) { return reinterpret_cast<emu_chan*>(c)->impl; }

// A queue of events behind an eventfd in semaphore mode: the fd is readable while one is queued;
// the application may make it non-blocking (then an empty queue reads EAGAIN), as with the real fds.
struct event_fd {
  int fd = -1;
  void post() const;
  // One unit from the fd (blocking unless O_NONBLOCK): 0, or -1 with errno.
  int take() const;
};

struct ctx_impl {
  emu_context* w = nullptr;
  int dev = 0;
  uint32_t lid = 1;  // its ports' LID; GIDs from gids_for_lid
  bool fatal = false;
  event_fd async;
  std::deque<ibv_async_event> events;
};

struct pd_impl {
  emu_pd* w = nullptr;
  ctx_impl* ctx = nullptr;
  int users = 0;  // MRs and QPs
};

struct mr_impl {
  emu_mr* w = nullptr;
  pd_impl* pd = nullptr;
  uint64_t addr = 0, length = 0, iova = 0;
  unsigned access = 0;
  uint32_t lkey = 0, rkey = 0;
  int rec = -1;
  uint64_t pinned = 0;  // bytes counted against RLIMIT_MEMLOCK
};

struct chan_impl {
  emu_chan* w = nullptr;
  ctx_impl* ctx = nullptr;
  event_fd fd;
  std::deque<cq_impl*> events;
};

struct cqe {
  ibv_wc wc;
  bool is_send;
  bool solicited;  // wakes a CQ armed for solicited completions only
  uint64_t seq;    // the WR's posting number in its queue
};

struct cq_impl {
  emu_cq* w = nullptr;
  ctx_impl* ctx = nullptr;
  chan_impl* chan = nullptr;
  std::deque<cqe> q;
  std::atomic<size_t> count{0};  // q.size(), read without the lock by an empty poll
  int capacity = 0;
  bool armed = false, solicited_only = false, overrun = false;
  uint32_t events_got = 0, events_acked = 0;  // completion events
  uint32_t async_got = 0, async_acked = 0;    // CQ_ERR
  std::set<qp_impl*> qps;
};

struct send_wr {
  uint64_t wr_id = 0;
  uint64_t seq = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false, solicited = false, inlined = false;
  std::vector<ibv_sge> sges;
  std::vector<uint8_t> inline_data;
  uint64_t len = 0;
  uint64_t raddr = 0;
  uint32_t rkey = 0, imm = 0;
  uint32_t psn = 0, npkts = 1;
  uint64_t tx_off = 0;  // bytes pushed in this round
};

struct recv_wr {
  uint64_t wr_id = 0;
  uint64_t seq = 0;
  std::vector<ibv_sge> sges;
};

struct qp_impl {
  emu_qp* w = nullptr;
  ctx_impl* ctx = nullptr;
  pd_impl* pd = nullptr;
  cq_impl *scq = nullptr, *rcq = nullptr;
  int rec = -1;
  uint32_t qpn = 0;
  ibv_qp_state state = IBV_QPS_RESET;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  ibv_qp_attr attr{};  // what modify_qp set (port, path, PSNs, timers, access)
  // Requester.
  std::deque<send_wr> sq;  // posted and not completed
  size_t next_tx = 0;      // sq index of the first WR not fully pushed in this round
  uint32_t next_psn = 0;
  uint32_t gen = 1;
  int retry_left = 0, rnr_left = 0;
  int64_t deadline = 0;   // of the current attempt; 0: no timer
  int64_t rnr_until = 0;  // paused after an RNR NAK until then
  uint64_t sq_posted = 0, sq_retired = 0;  // WRs posted; WRs retired (their or a later CQE polled)
  // Responder.
  std::deque<recv_wr> rq;
  uint64_t rq_posted = 0, rq_retired = 0;
  uint32_t epsn = 0;       // the next expected PSN
  bool cur_valid = false;  // a message at epsn is being placed
  uint32_t async_got = 0, async_acked = 0;
};

// Replies the responder could not push yet (the requester's control ring was full).
struct pending_reply {
  int slot;
  uint32_t type;
  reply r;
};

struct process {
  // Held while the first context opens (and the progress thread starts) and through a context's
  // close (and the progress thread's stop after the last): an open racing a close cannot start a
  // thread while the old one is being joined. Taken before `mu`; the progress thread never takes it.
  std::mutex life;
  std::mutex mu;
  header* fab = nullptr;
  uint8_t* base = nullptr;
  size_t bytes = 0;
  std::string name;
  pid_t pid = 0;
  int slot = -1;
  uint32_t lid = 1;       // GSYNC_IBV_EMU_LID, every context's LID
  bool lid_auto = false;  // "auto": each context gets its own instead
  emu_device devices[kMaxDevices]{};
  int ndev = 0;
  std::set<ctx_impl*> contexts;
  std::unordered_map<uint32_t, qp_impl*> qps;
  std::unordered_map<uint32_t, mr_impl*> rkeys, lkeys;
  std::set<pd_impl*> pds;
  std::set<cq_impl*> cqs;
  std::set<chan_impl*> chans;
  uint64_t pinned = 0;
  std::thread progress;
  std::atomic<bool> stop{false};
  std::atomic<bool> stalled{false};
  // Bumped (release) after bytes are placed; every ibv_poll_cq reads it (acquire). Only for
  // ThreadSanitizer: it orders the application after the placements a CQ poll could observe.
  std::atomic<uint64_t> placed{0};
  std::deque<pending_reply> outbox;
  process* parent_state = nullptr;  // a forked child keeps its parent's (unused) state reachable
};
process& proc();

// fabric.cpp
int fabric_attach(process& p);           // maps GSYNC_IBV_EMU (creating it); 0 or an errno
int claim_slot(process& p);              // under p.mu, on the first ibv_open_device
void release_slot(process& p);           // under p.mu, on the last ibv_close_device
uint32_t new_key(process& p);            // a fresh lkey/rkey, unique in the fabric
int alloc_qp_record(process& p, int dev, int port, uint32_t lid);  // record index (QPN in qps[].qpn), or -1
void free_qp_record(process& p, int rec);
int alloc_mr_record(process& p, const mr_impl& m);
void free_mr_record(process& p, int rec);
// The slot owning QPN `qpn` (and its record), or -1.
int route(process& p, uint32_t qpn, int* rec_out);

// datapath.cpp
void start_progress(process& p);  // under p.mu
void stop_progress(process& p);   // without p.mu

// ops.cpp
void install_ops(ibv_context_ops& ops);
void push_cqe(process& p, cq_impl& cq, const cqe& e);
// Moves a QP to ERR: the head send WR completes with `status` (unless IBV_WC_SUCCESS), the rest
// of both queues is flushed.
void qp_to_error(process& p, qp_impl& q, ibv_wc_status status, uint32_t vendor);
void raise_async(process& p, ctx_impl& c, ibv_event_type type, void* element);
void retire_polled(process& p, const cqe& e);
void flush_wr_completion(process& p, qp_impl& q, bool is_send, uint64_t wr_id, uint64_t seq);
int64_t ack_timeout_ns(const qp_impl& q);
// The fields that are undefined on an error completion get values no one should trust.
ibv_wc error_wc(const qp_impl& q, uint64_t wr_id, ibv_wc_status status, uint32_t vendor);

inline bool is_write(uint32_t op) { return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM; }
inline bool has_imm(uint32_t op) { return op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_IMM; }

}  // namespace ibv_emu
