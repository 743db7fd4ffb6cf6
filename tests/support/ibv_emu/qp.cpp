// Queue pairs: creation, the RC state machine of ibv_modify_qp(3) with the kernel's rules on
// attribute masks, query and destruction.
#include "emu.hpp"

using namespace ibv_emu;

namespace {

constexpr int kMaxInline = 512;
constexpr int kMaxWr = 32768;
constexpr int kMaxSge = 30;
constexpr int kMaxRdAtomic = 16;

template <class T>
T* fail(int e) {
  errno = e;
  return nullptr;
}

// Required and optional attributes of an RC transition (the kernel's qp_state_table, which
// ibv_modify_qp(3) tabulates); valid == false: no such transition.
struct transition {
  bool valid;
  int required, optional;
};
transition rc_transition(ibv_qp_state cur, ibv_qp_state next) {
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return {cur <= IBV_QPS_ERR, 0, 0};
  switch (cur) {
    case IBV_QPS_RESET:
      if (next == IBV_QPS_INIT) return {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
      break;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
      if (next == IBV_QPS_RTR)
        return {true,
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                    IBV_QP_MIN_RNR_TIMER,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      break;
    case IBV_QPS_RTR:
      if (next == IBV_QPS_RTS)
        return {true,
                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                    IBV_QP_PATH_MIG_STATE | IBV_QP_RATE_LIMIT};
      break;
    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS)
        return {true, 0,
                IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                    IBV_QP_MIN_RNR_TIMER | IBV_QP_RATE_LIMIT};
      break;
    default: break;
  }
  return {false, 0, 0};
}

void mirror(process& p, const qp_impl& q) {
  qp_rec& r = p.fab->qps[q.rec];
  r.state.store(q.state);
  r.port.store(q.attr.port_num ? q.attr.port_num : 1);
  r.dest_qpn.store(q.attr.dest_qp_num);
  r.rq_psn.store(q.attr.rq_psn);
  r.sq_psn.store(q.attr.sq_psn);
  r.access.store(q.attr.qp_access_flags);
}

}  // namespace

IBV_EMU_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (!pd || !init) return fail<ibv_qp>(EINVAL);
  if (init->qp_type != IBV_QPT_RC) return fail<ibv_qp>(EOPNOTSUPP);  // RC only
  if (init->srq) return fail<ibv_qp>(EOPNOTSUPP);                  // no SRQs
  if (!init->send_cq || !init->recv_cq || init->send_cq->context != pd->context ||
      init->recv_cq->context != pd->context)
    return fail<ibv_qp>(EINVAL);
  const ibv_qp_cap& c = init->cap;
  if (c.max_send_wr > kMaxWr || c.max_recv_wr > kMaxWr || c.max_send_sge > kMaxSge || c.max_recv_sge > kMaxSge ||
      c.max_inline_data > kMaxInline)
    return fail<ibv_qp>(EINVAL);
  ctx_impl* ctx = impl_of(pd->context);
  if (ctx->fatal) return fail<ibv_qp>(EIO);
  const int rec = alloc_qp_record(p, ctx->dev, 1, ctx->lid);
  if (rec < 0) return fail<ibv_qp>(ENOMEM);
  auto* q = new qp_impl;
  q->w = new emu_qp{};
  q->w->impl = q;
  q->ctx = ctx;
  q->pd = impl_of(pd);
  q->scq = impl_of(init->send_cq);
  q->rcq = impl_of(init->recv_cq);
  q->rec = rec;
  q->qpn = p.fab->qps[rec].qpn.load();
  q->cap = c;  // returned unchanged: exactly what was asked
  q->sq_sig_all = init->sq_sig_all != 0;
  ibv_qp& w = q->w->qp;
  w.context = pd->context;
  w.qp_context = init->qp_context;
  w.pd = pd;
  w.send_cq = init->send_cq;
  w.recv_cq = init->recv_cq;
  w.handle = uint32_t(rec);
  w.qp_num = q->qpn;
  w.state = IBV_QPS_RESET;
  w.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&w.mutex, nullptr);
  pthread_cond_init(&w.cond, nullptr);
  q->scq->qps.insert(q);
  q->rcq->qps.insert(q);
  q->pd->users++;
  p.qps[q->qpn] = q;
  return &w;
}

IBV_EMU_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (!attr) return EINVAL;
  qp_impl& q = *impl_of(qp);
  const ibv_qp_state cur = q.state;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (next > IBV_QPS_ERR || next == IBV_QPS_SQD || next == IBV_QPS_SQE) return EINVAL;  // not emulated
  const dev_rec& d = p.fab->dev[q.ctx->dev];
  const int port = (mask & IBV_QP_PORT) ? attr->port_num : (q.attr.port_num ? q.attr.port_num : 1);
  if (strict(r_masks)) {
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
    const transition t = rc_transition(cur, next);
    if (!t.valid) return EINVAL;
    if ((mask & t.required) != t.required) return EINVAL;                               // missing attribute
    if (mask & ~(t.required | t.optional | IBV_QP_STATE)) return EINVAL;                // not allowed here
    if ((mask & IBV_QP_PORT) && (port < 1 || port > int(d.nports))) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;  // a one-entry P_Key table
    if ((mask & IBV_QP_PATH_MTU) &&
        (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096 || attr->path_mtu > d.active_mtu[port - 1]))
      return EINVAL;  // above the port's active MTU
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > kMaxRdAtomic) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > kMaxRdAtomic) return EINVAL;
  }
  if ((mask & IBV_QP_PORT) && (port < 1 || port > int(d.nports))) return EINVAL;  // never routable
  if ((mask & IBV_QP_AV) && strict(r_addr) && port >= 1 && port <= int(d.nports)) {
    // RoCE needs a GRH (the kernel's rdma_check_ah_attr); a GID index must exist.
    if (d.link_layer[port - 1] == IBV_LINK_LAYER_ETHERNET && !attr->ah_attr.is_global) return EINVAL;
    if (attr->ah_attr.is_global && attr->ah_attr.grh.sgid_index >= kGids) return EINVAL;
  }
  // Valid: apply.
  ibv_qp_attr& a = q.attr;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_PORT) a.port_num = attr->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_AV) a.ah_attr = attr->ah_attr;
  if (mask & IBV_QP_PATH_MTU) a.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr->dest_qp_num & 0xffffff;
  if (mask & IBV_QP_RQ_PSN) a.rq_psn = attr->rq_psn & 0xffffff;
  if (mask & IBV_QP_SQ_PSN) a.sq_psn = attr->sq_psn & 0xffffff;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr->max_rd_atomic;
  // 5- and 3-bit fields of the QP context: larger values are cut, as the hardware's fields do.
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr->min_rnr_timer & 31;
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr->timeout & 31;
  if (mask & IBV_QP_RETRY_CNT) a.retry_cnt = attr->retry_cnt & 7;
  if (mask & IBV_QP_RNR_RETRY) a.rnr_retry = attr->rnr_retry & 7;
  if (mask & IBV_QP_PATH_MIG_STATE) a.path_mig_state = attr->path_mig_state;
  if (mask & IBV_QP_RATE_LIMIT) a.rate_limit = attr->rate_limit;
  if (next != cur || next == IBV_QPS_RESET) {
    switch (next) {
      case IBV_QPS_RESET: {
        // Back to the start: WRs are dropped without completions, as a reset work queue.
        q.sq.clear();
        q.rq.clear();
        q.sq_retired = q.sq_posted;
        q.rq_retired = q.rq_posted;
        q.next_tx = 0;
        q.deadline = q.rnr_until = 0;
        q.cur_valid = false;
        a = ibv_qp_attr{};
        break;
      }
      case IBV_QPS_RTR:
        q.epsn = a.rq_psn;
        q.cur_valid = false;
        break;
      case IBV_QPS_RTS:
        if (cur != IBV_QPS_RTS) {
          q.next_psn = a.sq_psn;
          q.retry_left = a.retry_cnt;
          q.rnr_left = a.rnr_retry;
          q.deadline = 0;
          ++q.gen;
        }
        break;
      default: break;
    }
    q.state = next;
    if (next == IBV_QPS_ERR) qp_to_error(p, q, IBV_WC_SUCCESS, 0);  // flushes what is outstanding
  }
  qp->state = next;  // as libibverbs does after a successful modify
  mirror(p, q);
  if (p.slot >= 0) ring_doorbell(p.fab->slots[p.slot].doorbell);  // WRs may now go
  return 0;
}

IBV_EMU_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (!attr || !init) return EINVAL;
  qp_impl& q = *impl_of(qp);
  *attr = q.attr;
  attr->qp_state = q.state;  // ERR too when the QP failed on its own
  attr->cur_qp_state = q.state;
  attr->cap = q.cap;
  std::memset(init, 0, sizeof *init);
  init->qp_context = qp->qp_context;
  init->send_cq = qp->send_cq;
  init->recv_cq = qp->recv_cq;
  init->cap = q.cap;
  init->qp_type = IBV_QPT_RC;
  init->sq_sig_all = q.sq_sig_all;
  return 0;
}

IBV_EMU_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  qp_impl* q = impl_of(qp);
  // The real library waits for every async event got on it to be acknowledged; the stand-in
  // refuses instead (EBUSY), so a missing ibv_ack_async_event shows, not hangs.
  if (q->async_got != q->async_acked) return EBUSY;
  auto& ev = q->ctx->events;
  for (auto it = ev.begin(); it != ev.end();) {
    const bool mine = it->event_type != IBV_EVENT_CQ_ERR && it->event_type != IBV_EVENT_PORT_ACTIVE &&
                      it->event_type != IBV_EVENT_PORT_ERR && it->event_type != IBV_EVENT_DEVICE_FATAL &&
                      it->element.qp == qp;
    it = mine ? ev.erase(it) : it + 1;
  }
  q->scq->qps.erase(q);
  q->rcq->qps.erase(q);
  q->pd->users--;
  p.qps.erase(q->qpn);
  free_qp_record(p, q->rec);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  delete q->w;
  delete q;
  return 0;
}
