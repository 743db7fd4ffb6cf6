// The progress thread: it carries requests between processes and answers them.
//
// Requester: post_send (ops.cpp) queues the WR (an inline payload is copied then); the progress
// thread reads the local buffer and pushes the message, in chunks, into the target process's data
// ring, then waits for the responder's ACK (or NAK) in its own control ring. It retransmits from the
// oldest unacknowledged WR (go-back-N) when the ack timer expires or after an RNR NAK's delay.
// Responder: the target's progress thread checks each message (QP state, connection, PSN, rkey,
// bounds, access, receive WR), places the bytes, makes the receive completion, then ACKs. So data
// lands without the target application calling anything, and a send completes only once its
// bytes are placed.
#include "emu.hpp"

#include <algorithm>
#include <sys/eventfd.h>

namespace ibv_emu {
namespace {

constexpr int64_t kTick = 50'000'000;        // the longest sleep of the progress thread
constexpr int64_t kBlockedRetry = 200'000;   // retry a push into a full ring after this
constexpr int kBatch = 256;                  // data records per lock hold

// IB spec table of RNR NAK timer codes (o9-... "Minimum RNR NAK timer field encoding"), in ns.
constexpr int64_t kRnrNs[32] = {
    655'360'000, 10'000,     20'000,     30'000,     40'000,      60'000,      80'000,      120'000,
    160'000,     240'000,    320'000,    480'000,    640'000,     960'000,     1'280'000,   1'920'000,
    2'560'000,   3'840'000,  5'120'000,  7'680'000,  10'240'000,  15'360'000,  20'480'000,  30'720'000,
    40'960'000,  61'440'000, 81'920'000, 122'880'000, 163'840'000, 245'760'000, 327'680'000, 491'520'000};

// PSNs are 24 bits: the signed distance of a from b.
int32_t psn_diff(uint32_t a, uint32_t b) { return int32_t((a - b) << 8) >> 8; }

bool needs_recv(uint32_t op) { return op != IBV_WR_RDMA_WRITE; }

uint8_t port_of(const qp_impl& q) { return q.attr.port_num ? q.attr.port_num : 1; }

bool port_up(process& p, int dev, int port) {
  if (port < 1 || port > kMaxPorts) return false;
  return p.fab->dev[dev].port_state[port - 1].load(std::memory_order_relaxed) == IBV_PORT_ACTIVE;
}
uint32_t link_layer(process& p, int dev, int port) { return p.fab->dev[dev].link_layer[(port - 1) & (kMaxPorts - 1)]; }

// Does address vector `ah` (on a port of link layer `ll`) reach the port of LID `lid`?
bool av_reaches(const ibv_ah_attr& ah, uint32_t ll, uint32_t lid) {
  uint8_t gid[kGids][16];
  gids_for_lid(lid, gid);
  auto gid_is_target = [&] {
    return std::memcmp(ah.grh.dgid.raw, gid[0], 16) == 0 || std::memcmp(ah.grh.dgid.raw, gid[1], 16) == 0;
  };
  if (ll == IBV_LINK_LAYER_ETHERNET) return ah.is_global && gid_is_target();
  if (ah.dlid != lid) return false;
  return !ah.is_global || gid_is_target();
}

// The MR of `key` in this process (lkeys or rkeys), or nullptr.
mr_impl* find_key(std::unordered_map<uint32_t, mr_impl*>& m, uint32_t key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : it->second;
}

// Bytes [iova, iova+len) of MR m, as an address of this process; nullptr if not inside.
uint8_t* in_mr(const mr_impl* m, uint64_t iova, uint64_t len) {
  if (!m || iova < m->iova || len > m->length || iova - m->iova > m->length - len) return nullptr;
  return reinterpret_cast<uint8_t*>(uintptr_t(m->addr + (iova - m->iova)));
}

// Places bytes as the HCA would. Small aligned writes (credit words, flags) go in 8-byte atomic
// stores (release: bytes placed before are visible to an acquire load that sees the word), so an
// application polling them with atomic loads never sees a torn word, nor a race under TSan.
void place(process& p, uint8_t* dst, const uint8_t* src, uint64_t len) {
  if (len <= 64 && len % 8 == 0 && uintptr_t(dst) % 8 == 0) {
    for (uint64_t i = 0; i < len; i += 8) {
      uint64_t v;
      std::memcpy(&v, src + i, 8);
      __atomic_store_n(reinterpret_cast<uint64_t*>(dst + i), v, __ATOMIC_RELEASE);
    }
  } else if (len) {
    std::memcpy(dst, src, len);
  }
  p.placed.fetch_add(1, std::memory_order_release);
}

// Every local SGE of a send lies in an MR of its lkey in the QP's PD (the `lkey` rule).
bool local_sges_ok(process& p, const qp_impl& q, const std::vector<ibv_sge>& sges) {
  for (const ibv_sge& s : sges) {
    if (s.length == 0) continue;
    mr_impl* m = find_key(p.lkeys, s.lkey);
    if (!m || m->pd != q.pd || !in_mr(m, s.addr, s.length)) return false;
  }
  return true;
}

// Copies bytes [off, off+len) of a send WR's payload to dst.
void gather(process& p, const send_wr& w, uint64_t off, uint64_t len, uint8_t* dst) {
  if (w.inlined) {
    std::memcpy(dst, w.inline_data.data() + off, len);
    return;
  }
  for (const ibv_sge& s : w.sges) {
    if (!len) break;
    if (off >= s.length) {
      off -= s.length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(s.length - off, len);
    mr_impl* m = find_key(p.lkeys, s.lkey);
    const uint8_t* src = m ? in_mr(m, s.addr + off, n) : nullptr;
    // Without the lkey rule, the SGE's address is read as it is.
    if (!src) src = reinterpret_cast<const uint8_t*>(uintptr_t(s.addr + off));
    std::memcpy(dst, src, n);
    dst += n;
    len -= n;
    off = 0;
  }
}

void go_back(qp_impl& q) {
  ++q.gen;
  q.next_tx = 0;
  for (send_wr& w : q.sq) w.tx_off = 0;
}

// The slot the QP's requests go to, or -1 when they go nowhere (wrong address, no such QP, a port
// down on either side: the requester's ack timer then runs out).
int reachable(process& p, const qp_impl& q) {
  const int port = port_of(q);
  if (!port_up(p, q.ctx->dev, port)) return -1;
  int rec = -1;
  const int s = route(p, q.attr.dest_qp_num, &rec);
  if (s < 0) return -1;
  const qp_rec& t = p.fab->qps[rec];
  const int tdev = int(t.dev.load()), tport = int(t.port.load());
  if (!port_up(p, tdev, tport)) return -1;
  const uint32_t ll = link_layer(p, q.ctx->dev, port);
  if (link_layer(p, tdev, tport) != ll) return -1;
  if (strict(r_addr) && !av_reaches(q.attr.ah_attr, ll, t.lid.load())) return -1;
  return s;
}

// The responder's ACK/NAK to the requester QP `to_qpn`. It reaches it only through the responder's
// own address vector (the `addr` rule on this side), as on the wire.
void send_reply(process& p, const qp_impl& q, uint32_t type, uint32_t to_qpn, uint32_t psn, uint32_t gen,
                uint32_t code, uint32_t detail) {
  const int port = port_of(q);
  if (!port_up(p, q.ctx->dev, port)) return;
  int rec = -1;
  const int s = route(p, to_qpn, &rec);
  if (s < 0) return;
  if (strict(r_addr) && !av_reaches(q.attr.ah_attr, link_layer(p, q.ctx->dev, port), p.fab->qps[rec].lid.load()))
    return;
  reply r{q.qpn, to_qpn, psn, gen, code, detail};
  // Replies to one host stay in order: behind those still waiting for room in its ring.
  const bool waiting =
      std::any_of(p.outbox.begin(), p.outbox.end(), [s](const pending_reply& o) { return o.slot == s; });
  if (waiting || !ring_push(p.base, p.fab->slots[s].ctrl, type, &r, sizeof r))
    p.outbox.push_back({s, type, r});
  else
    ring_doorbell(p.fab->slots[s].doorbell);
}

// Pushes the replies that now fit; a host whose ring is still full holds up only its own.
void flush_outbox(process& p) {
  bool full[kSlots] = {};
  for (auto it = p.outbox.begin(); it != p.outbox.end();) {
    slot& s = p.fab->slots[it->slot];
    if (full[it->slot] || (s.pid.load() != 0 && !ring_push(p.base, s.ctrl, it->type, &it->r, sizeof it->r))) {
      full[it->slot] = true;
      ++it;
      continue;
    }
    ring_doorbell(s.doorbell);
    it = p.outbox.erase(it);
  }
}

// The responder fails a message: its QP goes to ERR (flushing its receive WRs); an access
// violation also raises IBV_EVENT_QP_ACCESS_ERR on it.
void responder_error(process& p, qp_impl& q, bool access_event) {
  qp_to_error(p, q, IBV_WC_SUCCESS, 0);
  if (access_event) raise_async(p, *q.ctx, IBV_EVENT_QP_ACCESS_ERR, &q.w->qp);
}

// Receive-side failure on the receive WR at the head: its completion carries the error.
void fail_recv_head(process& p, qp_impl& q, ibv_wc_status status, uint32_t vendor) {
  recv_wr r = std::move(q.rq.front());
  q.rq.pop_front();
  push_cqe(p, *q.rcq, cqe{error_wc(q, r.wr_id, status, vendor), false, false, r.seq});
}

// Looks up the MR a write targets; vendor code of the violation, or 0. Without a rule, *mr may
// still be null: the bytes are then dropped, not placed.
uint32_t check_remote(process& p, qp_impl& q, const request& r, mr_impl** mr) {
  mr_impl* m = find_key(p.rkeys, r.rkey);
  if (m && m->pd != q.pd) m = nullptr;  // an rkey of another PD is no key for this QP
  if (!m) {
    if (strict(r_rkey)) return v_rkey;
    for (auto& [k, cand] : p.rkeys)  // lax: any MR holding the range
      if (cand->pd == q.pd && in_mr(cand, r.raddr, r.total)) m = cand;
  }
  if (m && !in_mr(m, r.raddr, r.total)) {
    if (strict(r_bounds)) return v_bounds;
    m = nullptr;
  }
  if (strict(r_access)) {
    if (m && !(m->access & IBV_ACCESS_REMOTE_WRITE)) return v_mr_access;
    if (!(q.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) return v_qp_access;
  }
  *mr = m;
  return 0;
}

// Where the receive WR's SGEs take bytes [off, off+len) of a send; false if an SGE is not in an MR
// of its lkey (`lkey` rule, receive side).
bool recv_sges_ok(process& p, const qp_impl& q, const recv_wr& r) {
  for (const ibv_sge& s : r.sges) {
    if (s.length == 0) continue;
    mr_impl* m = find_key(p.lkeys, s.lkey);
    if (!m || m->pd != q.pd || !(m->access & IBV_ACCESS_LOCAL_WRITE) || !in_mr(m, s.addr, s.length)) return false;
  }
  return true;
}
void scatter(process& p, const recv_wr& r, uint64_t off, const uint8_t* src, uint64_t len) {
  for (const ibv_sge& s : r.sges) {
    if (!len) break;
    if (off >= s.length) {
      off -= s.length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(s.length - off, len);
    mr_impl* m = find_key(p.lkeys, s.lkey);
    uint8_t* dst = m ? in_mr(m, s.addr + off, n) : nullptr;
    if (dst) place(p, dst, src, n);  // (lax lkey: bytes for an unregistered SGE are dropped)
    src += n;
    len -= n;
    off = 0;
  }
}

void handle_request(process& p, const request& r, const uint8_t* payload) {
  auto it = p.qps.find(r.dst_qpn);
  if (it == p.qps.end()) return;
  qp_impl& q = *it->second;
  // A QP that is not ready to receive, or in ERR, drops the packet: no answer.
  if (q.state != IBV_QPS_RTR && q.state != IBV_QPS_RTS) return;
  if (!port_up(p, q.ctx->dev, port_of(q))) return;
  if (strict(r_addr) && q.attr.dest_qp_num != r.src_qpn) return;  // not this connection's peer
  int32_t d = psn_diff(r.psn, q.epsn);
  if (d != 0 && !strict(r_psn) && r.offset == 0) {
    q.epsn = r.psn;  // lax: take whatever PSN comes
    d = 0;
  }
  if (d < 0) {  // a duplicate (a retransmission of what was placed): acknowledge it again
    if (r.flags & req_last) send_reply(p, q, rec_ack, r.src_qpn, r.psn, r.gen, 0, 0);
    return;
  }
  if (d > 0) return;  // ahead of a message that was refused: dropped until the requester goes back
  if (r.offset == 0) {
    q.cur_valid = false;
    if (is_write(r.opcode) && r.total > 0) {  // a zero-length write checks no key (IB spec)
      mr_impl* m = nullptr;
      if (uint32_t v = check_remote(p, q, r, &m)) {
        responder_error(p, q, true);
        send_reply(p, q, rec_nak, r.src_qpn, r.psn, r.gen, nak_access, v);
        return;
      }
    }
    // A send needs its receive WR before any byte lands (RNR NAK now); a write with immediate
    // places its bytes first and needs one only with its last packet (below), as on the wire.
    if (!is_write(r.opcode)) {
      if (q.rq.empty()) {
        if (strict(r_rnr)) {
          send_reply(p, q, rec_nak, r.src_qpn, r.psn, r.gen, nak_rnr, q.attr.min_rnr_timer);
          return;
        }
      } else {
        const recv_wr& rw = q.rq.front();
        uint64_t room = 0;
        for (const ibv_sge& s : rw.sges) room += s.length;
        if (r.total > room) {
          fail_recv_head(p, q, IBV_WC_LOC_LEN_ERR, v_loc_len);
          responder_error(p, q, false);
          send_reply(p, q, rec_nak, r.src_qpn, r.psn, r.gen, nak_inv_req, 0);
          return;
        }
        if (strict(r_lkey) && !recv_sges_ok(p, q, rw)) {
          fail_recv_head(p, q, IBV_WC_LOC_PROT_ERR, v_recv_prot);
          responder_error(p, q, false);
          send_reply(p, q, rec_nak, r.src_qpn, r.psn, r.gen, nak_rem_op, 0);
          return;
        }
      }
    }
    q.cur_valid = true;
  }
  if (!q.cur_valid) return;  // the rest of a message whose start was refused or lost
  if (r.len) {
    if (is_write(r.opcode)) {
      mr_impl* m = nullptr;
      // Again per chunk: the MR may have been deregistered since the first one.
      if (uint32_t v = check_remote(p, q, r, &m)) {
        responder_error(p, q, true);
        send_reply(p, q, rec_nak, r.src_qpn, r.psn, r.gen, nak_access, v);
        return;
      }
      if (uint8_t* dst = in_mr(m, r.raddr + r.offset, r.len)) place(p, dst, payload, r.len);
    } else if (!q.rq.empty()) {
      scatter(p, q.rq.front(), r.offset, payload, r.len);
    }
  }
  if (!(r.flags & req_last)) return;
  q.cur_valid = false;
  if (r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM && q.rq.empty() && strict(r_rnr)) {
    send_reply(p, q, rec_nak, r.src_qpn, r.psn, r.gen, nak_rnr, q.attr.min_rnr_timer);
    return;  // the requester sends the message again after the RNR timer
  }
  q.epsn = (q.epsn + r.npkts) & 0xffffff;
  if (needs_recv(r.opcode) && !q.rq.empty()) {
    recv_wr rw = std::move(q.rq.front());
    q.rq.pop_front();
    ibv_wc wc{};
    wc.wr_id = rw.wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = is_write(r.opcode) ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    wc.byte_len = uint32_t(r.total);
    if (has_imm(r.opcode)) {
      wc.imm_data = r.imm;  // the bytes as posted: network byte order
      wc.wc_flags = IBV_WC_WITH_IMM;
    }
    wc.qp_num = q.qpn;
    wc.src_qp = r.src_qpn;
    int rec = -1;
    wc.slid = route(p, r.src_qpn, &rec) >= 0 && link_layer(p, q.ctx->dev, port_of(q)) == IBV_LINK_LAYER_INFINIBAND
                  ? uint16_t(p.fab->qps[rec].lid.load()) : 0;
    push_cqe(p, *q.rcq, cqe{wc, false, (r.flags & req_solicited) != 0, rw.seq});
  }
  send_reply(p, q, rec_ack, r.src_qpn, r.psn, r.gen, 0, 0);
}

// The first n send WRs are acknowledged: signaled ones complete.
void complete_front(process& p, qp_impl& q, size_t n, int64_t now) {
  if (!n) return;
  for (size_t i = 0; i < n; ++i) {
    send_wr w = std::move(q.sq.front());
    q.sq.pop_front();
    if (!w.signaled) continue;
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = is_write(w.opcode) ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
    wc.byte_len = uint32_t(w.len);
    wc.qp_num = q.qpn;
    push_cqe(p, *q.scq, cqe{wc, true, false, w.seq});
    if (q.state == IBV_QPS_ERR) return;  // the CQ overran: the rest was flushed
  }
  q.next_tx = q.next_tx > n ? q.next_tx - n : 0;
  q.retry_left = q.attr.retry_cnt & 7;
  q.rnr_left = q.attr.rnr_retry & 7;
  q.deadline = q.sq.empty() ? 0 : now + ack_timeout_ns(q);
}

void handle_reply(process& p, uint32_t type, const reply& r, int64_t now) {
  auto it = p.qps.find(r.dst_qpn);
  if (it == p.qps.end()) return;
  qp_impl& q = *it->second;
  if (q.state != IBV_QPS_RTS) return;
  if (!port_up(p, q.ctx->dev, port_of(q))) return;
  if (strict(r_addr) && q.attr.dest_qp_num != r.src_qpn) return;
  size_t idx = 0;
  while (idx < q.sq.size() && q.sq[idx].psn != r.psn) ++idx;
  if (idx == q.sq.size()) return;  // for a WR already completed
  if (type == rec_ack) {
    complete_front(p, q, idx + 1, now);
    return;
  }
  complete_front(p, q, idx, now);  // a NAK acknowledges everything before it
  if (q.state != IBV_QPS_RTS || q.sq.empty()) return;
  switch (r.code) {
    case nak_rnr: {
      if (r.gen != q.gen) return;  // answers a round already gone back from
      const bool forever = (q.attr.rnr_retry & 7) == 7;  // IB spec: 7 retries forever
      if (!forever && q.rnr_left <= 0) {
        qp_to_error(p, q, IBV_WC_RNR_RETRY_EXC_ERR, v_rnr);
        return;
      }
      if (!forever) --q.rnr_left;
      go_back(q);
      q.rnr_until = now + kRnrNs[r.detail & 31];
      q.deadline = 0;
      return;
    }
    case nak_access: qp_to_error(p, q, IBV_WC_REM_ACCESS_ERR, r.detail); return;
    case nak_rem_op: qp_to_error(p, q, IBV_WC_REM_OP_ERR, v_rem_op); return;
    case nak_inv_req: qp_to_error(p, q, IBV_WC_REM_INV_REQ_ERR, v_rem_inv); return;
    default: return;
  }
}

void drive_sender(process& p, qp_impl& q, int64_t now, int64_t& wake) {
  if (q.state != IBV_QPS_RTS) return;
  if (q.sq.empty()) {
    q.deadline = 0;
    return;
  }
  if (q.rnr_until) {
    if (now < q.rnr_until) {
      wake = std::min(wake, q.rnr_until);
      return;
    }
    q.rnr_until = 0;
  }
  const int64_t timeout = ack_timeout_ns(q);
  if (!q.deadline) q.deadline = now + timeout;
  if (now >= q.deadline) {
    if (q.retry_left <= 0) {
      qp_to_error(p, q, IBV_WC_RETRY_EXC_ERR, v_retry);
      return;
    }
    --q.retry_left;
    go_back(q);
    q.deadline = now + timeout;
  }
  while (q.next_tx < q.sq.size()) {
    send_wr& w = q.sq[q.next_tx];
    if (!w.inlined && strict(r_lkey) && !local_sges_ok(p, q, w.sges)) {
      if (q.next_tx == 0) {
        qp_to_error(p, q, IBV_WC_LOC_PROT_ERR, v_loc_prot);
        return;
      }
      break;  // completes in order, once every WR before it is acknowledged
    }
    const int s = reachable(p, q);
    ring* target = s >= 0 ? &p.fab->slots[s].data : nullptr;
    const uint64_t chunk_max = target ? std::min<uint64_t>(kMaxChunk, target->size / 4) : kMaxChunk;
    bool blocked = false, pushed = false;
    do {
      const uint64_t n = std::min<uint64_t>(chunk_max, w.len - w.tx_off);
      request h{};
      h.src_qpn = q.qpn;
      h.dst_qpn = q.attr.dest_qp_num;
      h.psn = w.psn;
      h.npkts = w.npkts;
      h.opcode = w.opcode;
      h.flags = (w.tx_off == 0 ? uint32_t(req_first) : 0u) | (w.tx_off + n == w.len ? uint32_t(req_last) : 0u) |
                (w.solicited ? uint32_t(req_solicited) : 0u);
      h.imm = w.imm;
      h.rkey = w.rkey;
      h.raddr = w.raddr;
      h.total = w.len;
      h.offset = w.tx_off;
      h.len = uint32_t(n);
      h.gen = q.gen;
      if (target && !ring_push(p.base, *target, rec_request, &h, sizeof h, n,
                               [&](uint8_t* dst) { gather(p, w, w.tx_off, n, dst); })) {
        blocked = true;
        break;
      }
      pushed = target != nullptr;
      w.tx_off += n;  // (unreachable: the packet is sent, and lost)
    } while (w.tx_off < w.len);
    if (pushed) ring_doorbell(p.fab->slots[s].doorbell);
    if (blocked) {
      wake = std::min(wake, now + kBlockedRetry);
      break;
    }
    ++q.next_tx;
  }
  wake = std::min(wake, q.deadline);
}

void port_changed(process& p, const port_event& e) {
  for (ctx_impl* c : p.contexts)
    if (uint32_t(c->dev) == e.dev)
      raise_async(p, *c, e.state == IBV_PORT_ACTIVE ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR,
                  reinterpret_cast<void*>(uintptr_t(e.port)));
}

// One round of work under p.mu; true when more is waiting at once.
bool service(process& p, int64_t& wake) {
  const int64_t now = now_ns();
  slot& me = p.fab->slots[p.slot];
  bool again = false;
  if (!p.stalled.load()) {
    while (const rec_hdr* h = ring_peek(p.base, me.ctrl)) {
      if (h->type == rec_port) {
        port_event e;
        std::memcpy(&e, h + 1, sizeof e);
        port_changed(p, e);
      } else {
        reply r;
        std::memcpy(&r, h + 1, sizeof r);
        handle_reply(p, h->type, r, now);
      }
      ring_pop(me.ctrl, h);
    }
    int n = 0;
    while (const rec_hdr* h = ring_peek(p.base, me.data)) {
      request r;
      std::memcpy(&r, h + 1, sizeof r);
      if (h->type == rec_request) handle_request(p, r, reinterpret_cast<const uint8_t*>(h + 1) + sizeof r);
      ring_pop(me.data, h);
      if (++n == kBatch) {
        again = true;
        break;
      }
    }
  }
  flush_outbox(p);
  if (!p.outbox.empty()) wake = std::min(wake, now + kBlockedRetry);
  for (auto& [qpn, q] : p.qps) drive_sender(p, *q, now, wake);
  return again;
}

void progress_main(process* pp) {
  process& p = *pp;
  std::atomic<uint32_t>& bell = p.fab->slots[p.slot].doorbell;
  while (!p.stop.load()) {
    const uint32_t seen = bell.load(std::memory_order_acquire);
    int64_t wake = now_ns() + kTick;
    bool again;
    {
      std::lock_guard<std::mutex> l(p.mu);
      again = service(p, wake);
    }
    if (!again && !p.stop.load()) futex_wait(&bell, seen, wake - now_ns());
  }
}

}  // namespace

void start_progress(process& p) {
  p.stop.store(false);
  p.progress = std::thread(progress_main, &p);
}

void stop_progress(process& p) {
  p.stop.store(true);
  if (p.slot >= 0) ring_doorbell(p.fab->slots[p.slot].doorbell);
  if (p.progress.joinable()) p.progress.join();
}

}  // namespace ibv_emu
