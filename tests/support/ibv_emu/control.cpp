// The rule switches, the process state's life across fork, and the test hook
// gsync_ibv_emu_control (version node GSYNC_IBV_EMU_1; tests find it with dlsym).
#include "emu.hpp"

#include <cstdio>
#include <sstream>
#include <sys/mman.h>

namespace ibv_emu {

std::atomic<uint32_t> g_lax{0};

namespace {

struct rule_name {
  const char* name;
  uint32_t bits;
};
constexpr rule_name kRules[] = {
    {"masks", r_masks}, {"addr", r_addr},   {"psn", r_psn},     {"rkey", r_rkey},   {"bounds", r_bounds},
    {"access", r_access}, {"lkey", r_lkey}, {"rnr", r_rnr},     {"depth", r_depth}, {"order", r_order},
    {"flush", r_flush}, {"memlock", r_memlock}, {"all", 0xfffu}};

process* g_proc = nullptr;

// A forked child starts without the parent's verbs objects, threads or slot (as with the real
// library, resources do not cross fork): it gets a fresh state. The parent's is left as it was.
void fresh_state_in_child() {
  auto* fresh = new process();
  fresh->parent_state = g_proc;
  g_proc = fresh;
}

__attribute__((constructor)) void load() {
  g_proc = new process();
  pthread_atfork(nullptr, nullptr, fresh_state_in_child);
  uint32_t bits = 0;
  const char* lax = std::getenv("GSYNC_IBV_EMU_LAX");
  if (lax && *lax) {
    if (parse_rules(lax, bits)) g_lax.store(bits);
    else std::fprintf(stderr, "ibv_emu: GSYNC_IBV_EMU_LAX=%s names an unknown rule; all rules stay on\n", lax);
  }
}

int fail(int e) {
  errno = e;
  return -1;
}

}  // namespace

process& proc() { return *g_proc; }

bool parse_rules(const char* list, uint32_t& bits) {
  bits = 0;
  std::string s(list ? list : "");
  for (char& c : s)
    if (c == ',') c = ' ';
  std::istringstream in(s);
  std::string name;
  while (in >> name) {
    bool found = false;
    for (const rule_name& r : kRules)
      if (name == r.name) {
        bits |= r.bits;
        found = true;
      }
    if (!found) return false;
  }
  return true;
}

}  // namespace ibv_emu

using namespace ibv_emu;

IBV_EMU_EXPORT int gsync_ibv_emu_control(const char* command) {
  if (!command) return fail(EINVAL);
  std::istringstream in(command);
  std::string verb;
  in >> verb;
  process& p = proc();
  if (verb == "lax" || verb == "strict") {
    std::string rest;
    std::getline(in, rest);
    uint32_t bits = 0;
    if (!parse_rules(rest.c_str(), bits) || !bits) return fail(EINVAL);
    if (verb == "lax") g_lax.fetch_or(bits);
    else g_lax.fetch_and(~bits);
    return 0;
  }
  if (verb == "stall" || verb == "resume") {
    p.stalled.store(verb == "stall");
    std::lock_guard<std::mutex> l(p.mu);
    if (p.slot >= 0) ring_doorbell(p.fab->slots[p.slot].doorbell);
    return 0;
  }
  if (verb == "qp_error") {
    std::string arg;
    in >> arg;
    const uint32_t qpn = uint32_t(std::strtoul(arg.c_str(), nullptr, 0));
    std::lock_guard<std::mutex> l(p.mu);
    auto it = p.qps.find(qpn);
    if (it == p.qps.end()) return fail(ENOENT);
    qp_impl& q = *it->second;
    qp_to_error(p, q, IBV_WC_SUCCESS, 0);
    raise_async(p, *q.ctx, IBV_EVENT_QP_FATAL, &q.w->qp);
    return 0;
  }
  if (verb == "port_down" || verb == "port_up") {
    std::string dev;
    unsigned port = 0;
    in >> dev >> port;
    std::lock_guard<std::mutex> l(p.mu);
    if (!p.pid) p.pid = getpid();
    if (!p.fab)
      if (int e = fabric_attach(p)) return fail(e);
    int d = 0;
    while (d < p.ndev && dev != p.fab->dev[d].name) ++d;
    if (d == p.ndev || port < 1 || port > p.fab->dev[d].nports) return fail(EINVAL);
    const uint32_t state = verb == "port_up" ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    p.fab->dev[d].port_state[port - 1].store(state);
    // Every host hears of it, in order: its progress thread raises PORT_ERR / PORT_ACTIVE.
    const port_event e{uint32_t(d), port, state, 0};
    for (slot& s : p.fab->slots) {
      if (s.pid.load() == 0) continue;
      ring_push(p.base, s.ctrl, rec_port, &e, sizeof e);
      ring_doorbell(s.doorbell);
    }
    return 0;
  }
  if (verb == "device_fatal") {
    std::lock_guard<std::mutex> l(p.mu);
    if (p.contexts.empty()) return fail(ENODEV);
    for (ctx_impl* c : p.contexts) {
      c->fatal = true;
      raise_async(p, *c, IBV_EVENT_DEVICE_FATAL, nullptr);
    }
    for (auto& [qpn, q] : p.qps)
      if (q->state != IBV_QPS_ERR) qp_to_error(p, *q, IBV_WC_SUCCESS, 0);
    return 0;
  }
  if (verb == "unlink") {
    std::lock_guard<std::mutex> l(p.mu);
    std::string name = p.name;
    if (name.empty()) {
      const char* env = std::getenv("GSYNC_IBV_EMU");
      if (!env || !*env) return fail(ENOENT);
      name = env[0] == '/' ? env : std::string("/") + env;
    }
    return shm_unlink(name.c_str()) == 0 ? 0 : -1;
  }
  if (verb == "stats") {
    std::lock_guard<std::mutex> l(p.mu);
    if (!p.fab) return fail(ENODEV);
    size_t sq = 0, rq = 0;
    for (auto& [qpn, q] : p.qps) {
      sq += q->sq.size();
      rq += q->rq.size();
    }
    std::fprintf(stderr, "ibv_emu[%d]: fabric %s slot %d lid %u lax 0x%x stalled %d qps %zu (sq %zu rq %zu) "
                 "mrs %zu pinned %llu outbox %zu\n", int(p.pid), p.name.c_str(), p.slot, p.lid, g_lax.load(),
                 int(p.stalled.load()), p.qps.size(), sq, rq, p.rkeys.size(), (unsigned long long)p.pinned,
                 p.outbox.size());
    return 0;
  }
  return fail(EINVAL);
}
