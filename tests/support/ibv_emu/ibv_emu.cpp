// A stand-in libibverbs.so.1 for testing a verbs link without RDMA hardware (README.md in this
// folder). This file: devices, contexts, PDs, MRs, CQs, completion channels, async events and the
// string helpers. qp.cpp: QPs. datapath.cpp: the ops and the progress thread. control.cpp: the
// test hook. fabric.cpp: the shared segment.
#include "emu.hpp"

#include <endian.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>

using namespace ibv_emu;

namespace {

int index_of(process& p, ibv_device* d) {
  for (int i = 0; i < p.ndev; ++i)
    if (&p.devices[i].dev == d) return i;
  return -1;
}

bool port_ok(process& p, ibv_context* ctx, unsigned port) {
  return port >= 1 && port <= p.fab->dev[impl_of(ctx)->dev].nports;
}

// A host's GUID: from its LID (from the pid where each context has a LID of its own).
uint64_t node_guid(const process& p, int dev) {
  const uint64_t host = p.lid_auto ? uint32_t(p.pid) & 0xffffff : p.lid;
  return 0x0002c90000000000ull | (host << 8) | uint64_t(dev);
}

template <class T>
T* fail(int e) {
  errno = e;
  return nullptr;
}

}  // namespace

// --- devices and contexts ---

IBV_EMU_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (num_devices) *num_devices = 0;
  if (!p.pid) p.pid = getpid();
  // Without GSYNC_IBV_EMU this is a host without RDMA: NULL and ENOSYS, as the real library.
  if (int e = fabric_attach(p)) return fail<ibv_device*>(e);
  auto** list = static_cast<ibv_device**>(std::calloc(size_t(p.ndev) + 1, sizeof(ibv_device*)));
  if (!list) return fail<ibv_device*>(ENOMEM);
  for (int i = 0; i < p.ndev; ++i) list[i] = &p.devices[i].dev;
  if (num_devices) *num_devices = p.ndev;
  return list;
}

IBV_EMU_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

IBV_EMU_EXPORT const char* ibv_get_device_name(ibv_device* device) { return device ? device->name : nullptr; }

IBV_EMU_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  const int i = index_of(p, device);
  return i < 0 ? 0 : htobe64(node_guid(p, i));
}

IBV_EMU_EXPORT int ibv_get_device_index(ibv_device* device) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  return index_of(p, device);
}

IBV_EMU_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  process& p = proc();
  std::lock_guard<std::mutex> lf(p.life);
  std::lock_guard<std::mutex> l(p.mu);
  const int dev = index_of(p, device);
  if (dev < 0 || !p.fab) return fail<ibv_context>(ENODEV);
  if (p.contexts.empty()) {
    // The first context attaches this process as a host and starts its progress thread.
    if (int e = claim_slot(p)) return fail<ibv_context>(e);
    start_progress(p);
  }
  auto* c = new ctx_impl;
  auto* e = new emu_context{};
  e->impl = c;
  c->w = e;
  c->dev = dev;
  c->lid = p.lid_auto ? kAutoLidBase + p.fab->auto_lids.fetch_add(1) % (0xc000 - kAutoLidBase) : p.lid;
  c->async.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  e->v.sz = sizeof(verbs_context);
  ibv_context& ctx = e->v.context;
  ctx.device = device;
  install_ops(ctx.ops);
  ctx.cmd_fd = -1;
  ctx.async_fd = c->async.fd;
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;  // verbs.h's inlines then read ops and v.sz
  p.contexts.insert(c);
  return &ctx;
}

IBV_EMU_EXPORT int ibv_destroy_qp(ibv_qp* qp);
IBV_EMU_EXPORT int ibv_dereg_mr(ibv_mr* mr);

IBV_EMU_EXPORT int ibv_close_device(ibv_context* context) {
  process& p = proc();
  ctx_impl* c = impl_of(context);
  std::lock_guard<std::mutex> lf(p.life);
  bool last;
  {
    std::unique_lock<std::mutex> l(p.mu);
    // What the application left open goes with the context, as the kernel cleans up a closed fd.
    std::vector<qp_impl*> qps;
    for (auto& [n, q] : p.qps)
      if (q->ctx == c) qps.push_back(q);
    std::vector<mr_impl*> mrs;
    for (auto& [k, m] : p.rkeys)
      if (m->pd->ctx == c) mrs.push_back(m);
    l.unlock();
    for (qp_impl* q : qps) {
      q->async_acked = q->async_got;
      ibv_destroy_qp(&q->w->qp);
    }
    for (mr_impl* m : mrs) ibv_dereg_mr(&m->w->mr);
    l.lock();
    for (auto it = p.cqs.begin(); it != p.cqs.end();) {
      cq_impl* q = *it;
      if (q->ctx != c) {
        ++it;
        continue;
      }
      if (q->chan) q->chan->w->ch.refcnt--;
      pthread_mutex_destroy(&q->w->cq.mutex);
      pthread_cond_destroy(&q->w->cq.cond);
      delete q->w;
      delete q;
      it = p.cqs.erase(it);
    }
    for (auto it = p.chans.begin(); it != p.chans.end();) {
      if ((*it)->ctx != c) {
        ++it;
        continue;
      }
      close((*it)->fd.fd);
      delete (*it)->w;
      delete *it;
      it = p.chans.erase(it);
    }
    for (auto it = p.pds.begin(); it != p.pds.end();) {
      if ((*it)->ctx != c) {
        ++it;
        continue;
      }
      delete (*it)->w;
      delete *it;
      it = p.pds.erase(it);
    }
    p.contexts.erase(c);
    last = p.contexts.empty();
  }
  if (last) {
    stop_progress(p);
    std::lock_guard<std::mutex> l(p.mu);
    release_slot(p);  // no open could come in between: `life` is held
  }
  close(c->async.fd);
  pthread_mutex_destroy(&context->mutex);
  delete c->w;
  delete c;
  return 0;
}

IBV_EMU_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* a) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  const int dev = impl_of(context)->dev;
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "gsync-ibv-emu 1");
  a->node_guid = htobe64(node_guid(p, dev));
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = ~uint64_t(0);
  a->page_size_cap = 0xfffff000u;
  a->max_qp = kQpRecords;
  a->max_qp_wr = 32768;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_CHANGE_PHY_PORT;
  a->max_sge = 30;
  a->max_sge_rd = 30;
  a->max_cq = 65536;
  a->max_cqe = 4194303;
  a->max_mr = kMrRecords;
  a->max_pd = 1 << 20;
  a->max_qp_rd_atom = 16;
  a->max_res_rd_atom = 16 * kQpRecords;
  a->max_qp_init_rd_atom = 16;
  a->atomic_cap = IBV_ATOMIC_NONE;  // atomics are not emulated
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = uint8_t(p.fab->dev[dev].nports);
  return 0;
}

// Exported with the old struct's name, as the real one, which also fills the whole ibv_port_attr
// (verbs.h's inline wrapper hands it one).
IBV_EMU_EXPORT int(ibv_query_port)(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* attr) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (!port_ok(p, context, port_num)) return EINVAL;
  const dev_rec& d = p.fab->dev[impl_of(context)->dev];
  auto* a = reinterpret_cast<ibv_port_attr*>(attr);
  std::memset(a, 0, sizeof *a);
  const bool up = d.port_state[port_num - 1].load() == IBV_PORT_ACTIVE;
  const bool eth = d.link_layer[port_num - 1] == IBV_LINK_LAYER_ETHERNET;
  a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = static_cast<ibv_mtu>(d.active_mtu[port_num - 1]);
  a->gid_tbl_len = kGids;
  a->port_cap_flags = eth ? 0 : IBV_PORT_CM_SUP;
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->lid = eth ? 0 : uint16_t(impl_of(context)->lid);  // RoCE has no LIDs
  a->sm_lid = eth ? 0 : 1;
  a->max_vl_num = 4;
  a->subnet_timeout = 18;
  a->active_width = 2;   // 4x
  a->active_speed = 32;  // EDR
  a->phys_state = up ? 5 : 3;  // LinkUp / Disabled
  a->link_layer = uint8_t(d.link_layer[port_num - 1]);
  return 0;
}

IBV_EMU_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (!port_ok(p, context, port_num) || index < 0 || index >= kGids) {
    errno = EINVAL;
    return -1;
  }
  uint8_t g[kGids][16];
  gids_for_lid(impl_of(context)->lid, g);
  std::memcpy(gid->raw, g[index], 16);
  return 0;
}

IBV_EMU_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (flags || entry_size < sizeof *entry || port_num > 255 || !port_ok(p, context, port_num) || gid_index >= kGids)
    return EINVAL;
  uint8_t g[kGids][16];
  gids_for_lid(impl_of(context)->lid, g);
  std::memset(entry, 0, sizeof *entry);
  std::memcpy(entry->gid.raw, g[gid_index], 16);
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  const bool eth = p.fab->dev[impl_of(context)->dev].link_layer[port_num - 1] == IBV_LINK_LAYER_ETHERNET;
  entry->gid_type = !eth ? IBV_GID_TYPE_IB : gid_index == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  return 0;
}

IBV_EMU_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (!port_ok(p, context, port_num) || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

// --- protection domains and memory regions ---

IBV_EMU_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  static uint32_t handles = 0;
  auto* d = new pd_impl;
  d->w = new emu_pd{};
  d->w->impl = d;
  d->ctx = impl_of(context);
  d->w->pd.context = context;
  d->w->pd.handle = ++handles;
  p.pds.insert(d);
  return &d->w->pd;
}

IBV_EMU_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  pd_impl* d = impl_of(pd);
  if (d->users) return EBUSY;  // MRs or QPs still use it (the kernel refuses too)
  p.pds.erase(d);
  delete d->w;
  delete d;
  return 0;
}

namespace {

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  access &= ~unsigned(IBV_ACCESS_OPTIONAL_RANGE);  // optional bits (relaxed ordering) are hints
  constexpr unsigned known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                             IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB;
  if (!pd || (!addr && length) || (access & ~known)) return fail<ibv_mr>(EINVAL);
  // Remote write (or atomic) access needs local write access (ibv_reg_mr(3)).
  if (strict(r_access) && (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return fail<ibv_mr>(EINVAL);
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t first = uintptr_t(addr) & ~(page - 1);
  const uint64_t end = (uintptr_t(addr) + length + page - 1) & ~(page - 1);
  const uint64_t pinned = length ? end - first : 0;
  if (pinned) {
    // The pages must exist, as pinning them would need (EFAULT otherwise).
    std::vector<unsigned char> vec(pinned / page);
    if (mincore(reinterpret_cast<void*>(first), pinned, vec.data()) != 0) return fail<ibv_mr>(EFAULT);
  }
  if (strict(r_memlock)) {
    // As a process without CAP_IPC_LOCK: registered bytes count against RLIMIT_MEMLOCK.
    rlimit rl{};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && p.pinned + pinned > rl.rlim_cur) return fail<ibv_mr>(ENOMEM);
  }
  auto* m = new mr_impl;
  m->w = new emu_mr{};
  m->w->impl = m;
  m->pd = impl_of(pd);
  m->addr = uintptr_t(addr);
  m->length = length;
  m->iova = iova;
  m->access = access;
  m->lkey = new_key(p);
  m->rkey = new_key(p);
  m->pinned = pinned;
  m->rec = alloc_mr_record(p, *m);
  if (m->rec < 0) {
    delete m->w;
    delete m;
    return fail<ibv_mr>(ENOMEM);
  }
  ibv_mr& r = m->w->mr;
  r.context = pd->context;
  r.pd = pd;
  r.addr = addr;
  r.length = length;
  r.handle = uint32_t(m->rec);
  r.lkey = m->lkey;
  r.rkey = m->rkey;
  p.pinned += pinned;
  p.lkeys[m->lkey] = m;
  p.rkeys[m->rkey] = m;
  m->pd->users++;
  return &r;
}

}  // namespace

IBV_EMU_EXPORT ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, uintptr_t(addr), unsigned(access));
}
IBV_EMU_EXPORT ibv_mr*(ibv_reg_mr_iova)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return reg_mr(pd, addr, length, iova, unsigned(access));
}
IBV_EMU_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  return reg_mr(pd, addr, length, iova, access);
}

// The emulated device cannot reach device memory: no dma-buf registration.
IBV_EMU_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return fail<ibv_mr>(EOPNOTSUPP);
}

IBV_EMU_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  mr_impl* m = impl_of(mr);
  p.lkeys.erase(m->lkey);
  p.rkeys.erase(m->rkey);
  free_mr_record(p, m->rec);
  p.pinned -= m->pinned;
  m->pd->users--;
  delete m->w;
  delete m;
  return 0;
}

// --- completion channels and CQs ---

IBV_EMU_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* c = new chan_impl;
  c->w = new emu_chan{};
  c->w->impl = c;
  c->ctx = impl_of(context);
  c->fd.fd = fd;
  c->w->ch.context = context;
  c->w->ch.fd = fd;
  c->w->ch.refcnt = 0;
  p.chans.insert(c);
  return &c->w->ch;
}

IBV_EMU_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  chan_impl* c = impl_of(channel);
  if (channel->refcnt) return EBUSY;  // CQs still use it
  close(c->fd.fd);
  p.chans.erase(c);
  delete c->w;
  delete c;
  return 0;
}

IBV_EMU_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                    int comp_vector) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  if (cqe < 1 || cqe > 4194303 || comp_vector < 0 || comp_vector >= context->num_comp_vectors ||
      (channel && channel->context != context))
    return fail<ibv_cq>(EINVAL);
  auto* c = new cq_impl;
  c->w = new emu_cq{};
  c->w->impl = c;
  c->ctx = impl_of(context);
  c->capacity = cqe;  // exactly what was asked: the strictest "at least cqe" a device may give
  ibv_cq& q = c->w->cq;
  q.context = context;
  q.channel = channel;
  q.cq_context = cq_context;
  q.cqe = cqe;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  if (channel) {
    c->chan = impl_of(channel);
    channel->refcnt++;
  }
  p.cqs.insert(c);
  return &q;
}

IBV_EMU_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  cq_impl* c = impl_of(cq);
  // The real library waits until every event got is acknowledged; the stand-in refuses instead,
  // so a missing ibv_ack_cq_events shows as EBUSY, not as a hang. QPs still attached: EBUSY (kernel).
  if (!c->qps.empty() || c->events_got != c->events_acked || c->async_got != c->async_acked) return EBUSY;
  if (c->chan) {
    auto& ev = c->chan->events;
    for (auto it = ev.begin(); it != ev.end();) it = *it == c ? ev.erase(it) : it + 1;
    cq->channel->refcnt--;
  }
  auto& aev = c->ctx->events;
  for (auto it = aev.begin(); it != aev.end();)
    it = it->event_type == IBV_EVENT_CQ_ERR && it->element.cq == cq ? aev.erase(it) : it + 1;
  p.cqs.erase(c);
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  delete c->w;
  delete c;
  return 0;
}

IBV_EMU_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  process& p = proc();
  chan_impl* c = impl_of(channel);
  for (;;) {
    // Blocks (or EAGAIN with O_NONBLOCK) on the fd, outside the lock.
    if (c->fd.take() != 0) return -1;
    std::lock_guard<std::mutex> l(p.mu);
    if (c->events.empty()) continue;  // the event's CQ was destroyed meanwhile
    cq_impl* q = c->events.front();
    c->events.pop_front();
    q->events_got++;
    *cq = &q->w->cq;
    *cq_context = q->w->cq.cq_context;
    return 0;
  }
}

IBV_EMU_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  impl_of(cq)->events_acked += nevents;
  cq->comp_events_completed += nevents;
}

// --- async events ---

IBV_EMU_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  process& p = proc();
  ctx_impl* c = impl_of(context);
  for (;;) {
    if (c->async.take() != 0) return -1;
    std::lock_guard<std::mutex> l(p.mu);
    if (c->events.empty()) continue;  // its object was destroyed meanwhile
    *event = c->events.front();
    c->events.pop_front();
    switch (event->event_type) {
      case IBV_EVENT_CQ_ERR: impl_of(event->element.cq)->async_got++; break;
      case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_DEVICE_FATAL: break;
      default: impl_of(event->element.qp)->async_got++; break;
    }
    return 0;
  }
}

IBV_EMU_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  process& p = proc();
  std::lock_guard<std::mutex> l(p.mu);
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      impl_of(event->element.cq)->async_acked++;
      event->element.cq->async_events_completed++;
      break;
    case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_DEVICE_FATAL: break;
    default:
      impl_of(event->element.qp)->async_acked++;
      event->element.qp->events_completed++;
      break;
  }
}

// --- fork and strings ---

IBV_EMU_EXPORT int ibv_fork_init(void) { return 0; }
IBV_EMU_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

IBV_EMU_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const s[] = {"success", "local length error", "local QP operation error",
      "local EE context operation error", "local protection error", "Work Request Flushed Error",
      "memory management operation error", "bad response error", "local access error",
      "remote invalid request error", "remote access error", "remote operation error",
      "transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
      "remote invalid RD request", "aborted error", "invalid EE context number", "invalid EE context state",
      "fatal error", "response timeout error", "general error", "TM error", "TM software rendezvous"};
  const unsigned i = unsigned(status);
  return i < sizeof s / sizeof *s ? s[i] : "unknown";
}

IBV_EMU_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const s[] = {"CQ error", "local work queue catastrophic error",
      "invalid request local work queue error", "local access violation work queue error",
      "communication established", "send queue drained", "path migrated", "path migration request error",
      "local catastrophic error", "port active", "port error", "LID change", "P_Key change", "SM change",
      "SRQ catastrophic error", "SRQ limit reached", "last WQE reached", "client reregistration",
      "GID table change", "WQ fatal"};
  const unsigned i = unsigned(event);
  return i < sizeof s / sizeof *s ? s[i] : "unknown";
}

IBV_EMU_EXPORT const char* ibv_port_state_str(ibv_port_state state) {
  static const char* const s[] = {"no state change (NOP)", "down", "init", "armed", "active", "active defer"};
  const unsigned i = unsigned(state);
  return i < sizeof s / sizeof *s ? s[i] : "unknown";
}

IBV_EMU_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const s[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
      "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
  const unsigned i = unsigned(node_type);
  return i < sizeof s / sizeof *s ? s[i] : "unknown";
}
