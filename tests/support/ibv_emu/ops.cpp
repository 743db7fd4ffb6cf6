// The context ops behind verbs.h's inline ibv_post_send, ibv_post_recv, ibv_poll_cq and
// ibv_req_notify_cq, and what makes completions: CQ entries (order, overrun, notification),
// flushes, the error state, async events.
#include "emu.hpp"

#include <algorithm>

namespace ibv_emu {
namespace {

int emu_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  process& p = proc();
  qp_impl& q = *impl_of(qp);
  std::lock_guard<std::mutex> l(p.mu);
  for (ibv_send_wr* w = wr; w; w = w->next) {
    int err = 0;
    if (q.state == IBV_QPS_RESET || (q.state != IBV_QPS_RTS && q.state != IBV_QPS_ERR && strict(r_masks)))
      err = EINVAL;  // only an RTS QP sends (or an ERR one, which flushes)
    else if (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
             w->opcode != IBV_WR_SEND && w->opcode != IBV_WR_SEND_WITH_IMM)
      err = EINVAL;  // RDMA read, atomics and the rest are not emulated
    else if (w->num_sge < 0 || uint32_t(w->num_sge) > q.cap.max_send_sge || (w->num_sge && !w->sg_list))
      err = EINVAL;
    else if (strict(r_depth) && q.sq_posted - q.sq_retired >= q.cap.max_send_wr)
      err = ENOMEM;  // the send queue is full until completions are polled
    uint64_t len = 0;
    for (int i = 0; !err && i < w->num_sge; ++i) len += w->sg_list[i].length;
    if (!err && (w->send_flags & IBV_SEND_INLINE) && len > q.cap.max_inline_data) err = EINVAL;
    if (err) {
      *bad_wr = w;
      return err;
    }
    send_wr s;
    s.wr_id = w->wr_id;
    s.seq = q.sq_posted++;
    s.opcode = w->opcode;
    s.signaled = q.sq_sig_all || (w->send_flags & IBV_SEND_SIGNALED);
    s.solicited = (w->send_flags & IBV_SEND_SOLICITED) != 0;
    s.len = len;
    s.raddr = w->wr.rdma.remote_addr;
    s.rkey = w->wr.rdma.rkey;
    s.imm = has_imm(w->opcode) ? w->imm_data : 0;
    if (w->send_flags & IBV_SEND_INLINE) {
      s.inlined = true;  // the payload is taken now: the buffer is free once post_send returns
      s.inline_data.resize(len);
      uint64_t off = 0;
      for (int i = 0; i < w->num_sge; ++i) {
        if (w->sg_list[i].length)
          std::memcpy(s.inline_data.data() + off, reinterpret_cast<const void*>(uintptr_t(w->sg_list[i].addr)),
                      w->sg_list[i].length);
        off += w->sg_list[i].length;
      }
    } else {
      s.sges.assign(w->sg_list, w->sg_list + w->num_sge);
    }
    if (q.state == IBV_QPS_ERR) {  // completes at once, flushed (unsignaled too)
      flush_wr_completion(p, q, true, s.wr_id, s.seq);
      continue;
    }
    const uint64_t mtu = mtu_bytes(q.attr.path_mtu);
    s.npkts = len ? uint32_t((len + mtu - 1) / mtu) : 1;
    s.psn = q.next_psn;
    q.next_psn = (q.next_psn + s.npkts) & 0xffffff;
    q.sq.push_back(std::move(s));
  }
  if (p.slot >= 0) ring_doorbell(p.fab->slots[p.slot].doorbell);
  return 0;
}

int emu_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  process& p = proc();
  qp_impl& q = *impl_of(qp);
  std::lock_guard<std::mutex> l(p.mu);
  for (ibv_recv_wr* w = wr; w; w = w->next) {
    int err = 0;
    if (q.state == IBV_QPS_RESET && strict(r_masks)) err = EINVAL;
    else if (w->num_sge < 0 || uint32_t(w->num_sge) > q.cap.max_recv_sge || (w->num_sge && !w->sg_list)) err = EINVAL;
    else if (strict(r_depth) && q.rq_posted - q.rq_retired >= q.cap.max_recv_wr) err = ENOMEM;
    if (err) {
      *bad_wr = w;
      return err;
    }
    recv_wr r;
    r.wr_id = w->wr_id;
    r.seq = q.rq_posted++;
    r.sges.assign(w->sg_list, w->sg_list + w->num_sge);
    if (q.state == IBV_QPS_ERR) {
      flush_wr_completion(p, q, false, r.wr_id, r.seq);
      continue;
    }
    q.rq.push_back(std::move(r));
  }
  return 0;
}

int emu_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  cq_impl& c = *impl_of(cq);
  process& p = proc();
  p.placed.load(std::memory_order_acquire);
  if (num_entries < 0) return -1;
  if (c.count.load(std::memory_order_acquire) == 0 || num_entries == 0) return 0;  // no lock for an empty poll
  std::lock_guard<std::mutex> l(p.mu);
  int n = 0;
  while (n < num_entries && !c.q.empty()) {
    const cqe e = c.q.front();
    c.q.pop_front();
    wc[n++] = e.wc;
    retire_polled(p, e);
  }
  c.count.store(c.q.size(), std::memory_order_release);
  return n;
}

int emu_req_notify_cq(ibv_cq* cq, int solicited_only) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  cq_impl& c = *impl_of(cq);
  c.armed = true;
  c.solicited_only = solicited_only != 0;
  return 0;
}

}  // namespace

ibv_wc error_wc(const qp_impl& q, uint64_t wr_id, ibv_wc_status status, uint32_t vendor) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = static_cast<ibv_wc_opcode>(0xff);
  wc.vendor_err = vendor;
  wc.byte_len = 0xffffffffu;
  wc.imm_data = 0xffffffffu;
  wc.qp_num = q.qpn;
  return wc;
}

int64_t ack_timeout_ns(const qp_impl& q) {
  const int t = q.attr.timeout & 31;
  // 4.096 us * 2^timeout; 0 means "infinite" in the spec, capped at 60 s here.
  return t == 0 ? 60'000'000'000LL : int64_t(4096) << t;
}

void install_ops(ibv_context_ops& ops) {
  ops.post_send = emu_post_send;
  ops.post_recv = emu_post_recv;
  ops.poll_cq = emu_poll_cq;
  ops.req_notify_cq = emu_req_notify_cq;
}

void push_cqe(process& p, cq_impl& cq, const cqe& e) {
  if (cq.overrun) return;  // a CQ in error takes no more completions
  if (int(cq.q.size()) >= cq.capacity && strict(r_depth)) {
    cq.overrun = true;
    raise_async(p, *cq.ctx, IBV_EVENT_CQ_ERR, &cq.w->cq);
    const std::set<qp_impl*> qps = cq.qps;
    for (qp_impl* q : qps)
      if (q->state != IBV_QPS_ERR) qp_to_error(p, *q, IBV_WC_SUCCESS, 0);
    return;
  }
  auto at = cq.q.end();
  if (!strict(r_order)) {  // lax: ahead of the previous completion of the same queue
    for (auto it = cq.q.end(); it != cq.q.begin();) {
      --it;
      if (it->wc.qp_num == e.wc.qp_num && it->is_send == e.is_send) {
        at = it;
        break;
      }
    }
  }
  cq.q.insert(at, e);
  cq.count.store(cq.q.size(), std::memory_order_release);
  if (cq.armed && (!cq.solicited_only || e.solicited || e.wc.status != IBV_WC_SUCCESS)) {
    cq.armed = false;
    if (cq.chan) {
      cq.chan->events.push_back(&cq);
      cq.chan->fd.post();
    }
  }
}

void flush_wr_completion(process& p, qp_impl& q, bool is_send, uint64_t wr_id, uint64_t seq) {
  if (!strict(r_flush)) return;  // lax: the WR vanishes without a completion
  push_cqe(p, is_send ? *q.scq : *q.rcq, cqe{error_wc(q, wr_id, IBV_WC_WR_FLUSH_ERR, v_flush), is_send, false, seq});
}

void qp_to_error(process& p, qp_impl& q, ibv_wc_status status, uint32_t vendor) {
  q.state = IBV_QPS_ERR;
  if (q.rec >= 0) p.fab->qps[q.rec].state.store(IBV_QPS_ERR);
  std::deque<send_wr> sq;
  std::deque<recv_wr> rq;
  sq.swap(q.sq);
  rq.swap(q.rq);
  q.next_tx = 0;
  q.deadline = 0;
  q.rnr_until = 0;
  q.cur_valid = false;
  if (status != IBV_WC_SUCCESS && !sq.empty()) {  // the failing WR: an error completion even unsignaled
    push_cqe(p, *q.scq, cqe{error_wc(q, sq.front().wr_id, status, vendor), true, false, sq.front().seq});
    sq.pop_front();
  }
  for (const send_wr& w : sq) flush_wr_completion(p, q, true, w.wr_id, w.seq);
  for (const recv_wr& r : rq) flush_wr_completion(p, q, false, r.wr_id, r.seq);
}

void raise_async(process& p, ctx_impl& c, ibv_event_type type, void* element) {
  (void)p;
  ibv_async_event ev{};
  ev.event_type = type;
  switch (type) {
    case IBV_EVENT_CQ_ERR: ev.element.cq = static_cast<ibv_cq*>(element); break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR: ev.element.port_num = int(reinterpret_cast<uintptr_t>(element)); break;
    case IBV_EVENT_DEVICE_FATAL: break;
    default: ev.element.qp = static_cast<ibv_qp*>(element); break;
  }
  c.events.push_back(ev);
  c.async.post();
}

void retire_polled(process& p, const cqe& e) {
  auto it = p.qps.find(e.wc.qp_num);
  if (it == p.qps.end()) return;  // of a destroyed QP
  qp_impl& q = *it->second;
  // A send WR is outstanding until its own or a later completion of its QP is polled.
  if (e.is_send) q.sq_retired = std::max(q.sq_retired, e.seq + 1);
  else q.rq_retired = std::max(q.rq_retired, e.seq + 1);
}

void event_fd::post() const {
  const uint64_t one = 1;
  while (write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

int event_fd::take() const {
  uint64_t v;
  for (;;) {
    const ssize_t n = read(fd, &v, sizeof v);
    if (n == sizeof v) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

}  // namespace ibv_emu
