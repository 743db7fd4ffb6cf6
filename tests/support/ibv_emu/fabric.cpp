// Creating and joining the fabric segment; slots, QP and MR records, keys.
#include "emu.hpp"

#include <cstdio>
#include <fcntl.h>
#include <new>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>

namespace ibv_emu {
namespace {

uint64_t parse_bytes(const char* s) {
  if (!s || !*s) return kDefaultBytes;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  switch (end && *end ? *end : 0) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
  }
  return v < kMinBytes ? kMinBytes : v;
}

// GSYNC_IBV_EMU_DEVICES: comma-separated NAME[:PORTS][:ib|:eth][:down][:mtuN], default "emu0".
bool parse_devices(const char* spec, header& h) {
  std::string s = spec && *spec ? spec : "emu0";
  h.ndev = 0;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? s.size() + 1 : comma + 1;
    if (item.empty()) continue;
    if (h.ndev == kMaxDevices) return false;
    dev_rec& d = h.dev[h.ndev];
    std::vector<std::string> tok;
    for (size_t p = 0;;) {
      size_t c = item.find(':', p);
      tok.push_back(item.substr(p, c == std::string::npos ? std::string::npos : c - p));
      if (c == std::string::npos) break;
      p = c + 1;
    }
    if (tok[0].empty() || tok[0].size() >= sizeof d.name) return false;
    std::snprintf(d.name, sizeof d.name, "%s", tok[0].c_str());
    uint32_t ports = 1, ll = IBV_LINK_LAYER_INFINIBAND, state = IBV_PORT_ACTIVE, mtu = 0;
    for (size_t i = 1; i < tok.size(); ++i) {
      const std::string& t = tok[i];
      if (t == "ib") ll = IBV_LINK_LAYER_INFINIBAND;
      else if (t == "eth") ll = IBV_LINK_LAYER_ETHERNET;
      else if (t == "down") state = IBV_PORT_DOWN;
      else if (t.size() > 3 && t.compare(0, 3, "mtu") == 0) {
        int v = std::atoi(t.c_str() + 3);
        mtu = v == 256 ? IBV_MTU_256 : v == 512 ? IBV_MTU_512 : v == 1024 ? IBV_MTU_1024
            : v == 2048 ? IBV_MTU_2048 : v == 4096 ? IBV_MTU_4096 : 0;
        if (!mtu) return false;
      } else if (!t.empty() && t.find_first_not_of("0123456789") == std::string::npos) {
        ports = uint32_t(std::atoi(t.c_str()));
        if (ports < 1 || ports > kMaxPorts) return false;
      } else {
        return false;
      }
    }
    d.nports = ports;
    for (uint32_t p = 0; p < ports; ++p) {
      d.link_layer[p] = ll;
      // RoCE on a 1500-byte Ethernet MTU gives active_mtu 1024; InfiniBand 4096.
      d.active_mtu[p] = mtu ? mtu : ll == IBV_LINK_LAYER_ETHERNET ? uint32_t(IBV_MTU_1024) : uint32_t(IBV_MTU_4096);
      d.port_state[p].store(state);
    }
    ++h.ndev;
  }
  return h.ndev > 0;
}

uint64_t random64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != sizeof v) v = uint64_t(now_ns()) ^ (uint64_t(getpid()) << 32);
  return v;
}

void init_segment(uint8_t* base, uint64_t bytes) {
  auto* h = new (base) header();
  h->magic = kMagic;
  h->version = kLayoutVersion;
  h->bytes = bytes;
  h->secret = random64();
  h->lock.init();
  h->key_counter.store(uint32_t(h->secret >> 32));
  const uint64_t rings_at = (sizeof(header) + 4095) & ~uint64_t(4095);
  const uint64_t data_bytes = ((bytes - rings_at - kSlots * kCtrlRingBytes) / kSlots) & ~uint64_t(4095);
  for (int i = 0; i < kSlots; ++i) {
    slot& s = h->slots[i];
    s.ctrl.producers.init();
    s.ctrl.offset = rings_at + uint64_t(i) * kCtrlRingBytes;
    s.ctrl.size = kCtrlRingBytes;
    s.data.producers.init();
    s.data.offset = rings_at + kSlots * kCtrlRingBytes + uint64_t(i) * data_bytes;
    s.data.size = data_bytes;
  }
}

bool wait_for(const std::atomic<uint32_t>& flag, int64_t limit_ns) {
  const int64_t until = now_ns() + limit_ns;
  while (!flag.load(std::memory_order_acquire)) {
    if (now_ns() > until) return false;
    usleep(1000);
  }
  return true;
}

}  // namespace

int fabric_attach(process& p) {
  const char* env = std::getenv("GSYNC_IBV_EMU");
  if (!env || !*env) return ENOSYS;
  std::string name = env[0] == '/' ? env : std::string("/") + env;
  if (name.size() < 2 || name.find('/', 1) != std::string::npos || name.size() > 200) return EINVAL;
  if (p.fab && p.name == name) return 0;
  if (p.fab) {
    if (!p.contexts.empty()) return 0;  // a fabric in use stays; the new name applies once all is closed
    munmap(p.base, p.bytes);
    p.fab = nullptr;
    p.base = nullptr;
  }
  // GSYNC_IBV_EMU_LID: this process's LID (default 1); "auto": one of its own for each context.
  const char* lid_env = std::getenv("GSYNC_IBV_EMU_LID");
  long lid = 1;
  if (lid_env && std::strcmp(lid_env, "auto") == 0) lid = 0;
  else if (lid_env && *lid_env) lid = std::strtol(lid_env, nullptr, 0);
  if (lid < 0 || lid > 0xbfff || (lid_env && *lid_env && lid == 0 && std::strcmp(lid_env, "auto") != 0)) {
    std::fprintf(stderr, "ibv_emu: GSYNC_IBV_EMU_LID=%s is not a unicast LID (1..0xbfff) nor \"auto\"\n", lid_env);
    return EINVAL;
  }
  uint64_t bytes = parse_bytes(std::getenv("GSYNC_IBV_EMU_BYTES"));
  bool creator = true;
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    creator = false;
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) return errno;
  if (creator) {
    if (ftruncate(fd, off_t(bytes)) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      return e;
    }
  } else {
    // The creator may not have sized it yet.
    struct stat st{};
    const int64_t until = now_ns() + 5000000000LL;
    while (fstat(fd, &st) == 0 && uint64_t(st.st_size) < sizeof(header) && now_ns() < until) usleep(1000);
    if (uint64_t(st.st_size) < sizeof(header)) {
      close(fd);
      return ETIMEDOUT;
    }
    bytes = uint64_t(st.st_size);
  }
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return errno;
  auto* base = static_cast<uint8_t*>(m);
  auto* h = reinterpret_cast<header*>(base);
  if (creator) {
    init_segment(base, bytes);
    if (!parse_devices(std::getenv("GSYNC_IBV_EMU_DEVICES"), *h)) {
      std::fprintf(stderr, "ibv_emu: GSYNC_IBV_EMU_DEVICES=%s: expected NAME[:PORTS][:ib|:eth][:down][:mtuN],... "
                   "(at most %d devices of 1..%d ports)\n",
                   std::getenv("GSYNC_IBV_EMU_DEVICES"), kMaxDevices, kMaxPorts);
      munmap(m, bytes);
      shm_unlink(name.c_str());
      return EINVAL;
    }
    h->ready.store(1, std::memory_order_release);
  } else if (!wait_for(h->ready, 5000000000LL) || h->magic != kMagic || h->version != kLayoutVersion ||
             h->bytes != bytes) {
    std::fprintf(stderr, "ibv_emu: %s is not a fabric segment of this version\n", name.c_str());
    munmap(m, bytes);
    return EPROTO;
  }
  p.fab = h;
  p.base = base;
  p.bytes = bytes;
  p.name = name;
  p.lid_auto = lid == 0;
  p.lid = p.lid_auto ? 0 : uint32_t(lid);
  p.ndev = int(h->ndev);
  for (int i = 0; i < p.ndev; ++i) {
    emu_device& d = p.devices[i];
    std::memset(&d.dev, 0, sizeof d.dev);
    d.index = i;
    d.dev.node_type = IBV_NODE_CA;
    d.dev.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d.dev.name, sizeof d.dev.name, "%s", h->dev[i].name);
    std::snprintf(d.dev.dev_name, sizeof d.dev.dev_name, "uverbs%d", i);
    std::snprintf(d.dev.dev_path, sizeof d.dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d", i);
    std::snprintf(d.dev.ibdev_path, sizeof d.dev.ibdev_path, "/sys/class/infiniband/%s", h->dev[i].name);
  }
  return 0;
}

int claim_slot(process& p) {
  header& h = *p.fab;
  shm_lock l(h.lock);
  for (int i = 0; i < kSlots; ++i) {
    slot& s = h.slots[i];
    const int32_t owner = s.pid.load(std::memory_order_acquire);
    if (owner != 0 && !(kill(owner, 0) != 0 && errno == ESRCH)) continue;
    // Free or left by a dead process: its records go with it.
    for (auto& q : h.qps)
      if (q.qpn.load() != 0 && q.slot.load() == i) q.qpn.store(0);
    for (auto& m : h.mrs)
      if (m.pid.load() != 0 && m.slot == i) m.pid.store(0);
    for (ring* r : {&s.data, &s.ctrl}) {
      shm_lock rl(r->producers);
      r->head.store(0);
      r->tail.store(0);
    }
    s.pid.store(p.pid, std::memory_order_release);
    p.slot = i;
    return 0;
  }
  return ENOSPC;
}

void release_slot(process& p) {
  if (p.slot < 0) return;
  header& h = *p.fab;
  shm_lock l(h.lock);
  for (auto& q : h.qps)
    if (q.qpn.load() != 0 && q.slot.load() == p.slot) q.qpn.store(0);
  for (auto& m : h.mrs)
    if (m.pid.load() == p.pid) m.pid.store(0);
  h.slots[p.slot].pid.store(0, std::memory_order_release);
  p.slot = -1;
}

uint32_t new_key(process& p) {
  for (;;) {
    uint32_t k = mix32(p.fab->key_counter.fetch_add(1) ^ uint32_t(p.fab->secret));
    if (k != 0) return k;
  }
}

int alloc_qp_record(process& p, int dev, int port, uint32_t lid) {
  header& h = *p.fab;
  shm_lock l(h.lock);
  const uint32_t start = h.qp_cursor.load();
  for (uint32_t n = 0; n < kQpRecords; ++n) {
    const uint32_t i = (start + n) % kQpRecords;
    qp_rec& q = h.qps[i];
    if (q.qpn.load() != 0) continue;
    uint32_t gen = (q.gen.load() + 1) & 0xfff;
    if (gen == 0) gen = 1;  // QPNs stay above 0xfff, clear of the special QPs 0 and 1
    q.gen.store(gen);
    q.slot.store(p.slot);
    q.dev.store(uint32_t(dev));
    q.port.store(uint32_t(port));
    q.lid.store(lid);
    q.state.store(IBV_QPS_RESET);
    q.dest_qpn.store(0);
    q.qpn.store((gen << 12) | i, std::memory_order_release);
    h.qp_cursor.store(i + 1);
    return int(i);
  }
  return -1;
}

void free_qp_record(process& p, int rec) {
  if (rec < 0) return;
  shm_lock l(p.fab->lock);
  p.fab->qps[rec].qpn.store(0, std::memory_order_release);
}

int alloc_mr_record(process& p, const mr_impl& m) {
  header& h = *p.fab;
  shm_lock l(h.lock);
  const uint32_t start = h.mr_cursor.load();
  for (uint32_t n = 0; n < kMrRecords; ++n) {
    const uint32_t i = (start + n) % kMrRecords;
    mr_rec& r = h.mrs[i];
    if (r.pid.load() != 0) continue;
    r.slot = p.slot;
    r.addr = m.addr;
    r.length = m.length;
    r.iova = m.iova;
    r.access = m.access;
    r.lkey = m.lkey;
    r.rkey = m.rkey;
    r.pd = m.pd->w->pd.handle;
    r.pid.store(p.pid, std::memory_order_release);
    h.mr_cursor.store(i + 1);
    return int(i);
  }
  return -1;
}

void free_mr_record(process& p, int rec) {
  if (rec < 0) return;
  shm_lock l(p.fab->lock);
  p.fab->mrs[rec].pid.store(0, std::memory_order_release);
}

int route(process& p, uint32_t qpn, int* rec_out) {
  const uint32_t i = qpn & 0xfff;
  if (qpn <= 0xfff || !p.fab) return -1;
  const qp_rec& q = p.fab->qps[i];
  if (q.qpn.load(std::memory_order_acquire) != qpn) return -1;
  const int s = q.slot.load();
  if (q.qpn.load(std::memory_order_acquire) != qpn || s < 0 || s >= kSlots) return -1;
  if (p.fab->slots[s].pid.load(std::memory_order_acquire) == 0) return -1;
  if (rec_out) *rec_out = int(i);
  return s;
}

}  // namespace ibv_emu
