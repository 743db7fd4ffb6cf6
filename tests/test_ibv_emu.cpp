// Conformance tests of the stand-in libibverbs (tests/support/ibv_emu): small verbs programs that use
// only <infiniband/verbs.h> (and the stand-in's control hook, found with dlsym), most of them across
// two processes forked per test case on a fabric of their own. Each child checks with EXPECT (a
// failure prints and exits the child with 1); the test case checks how the children exited.
#include <doctest/doctest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <functional>
#include <poll.h>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

#define EXPECT(cond)                                                                                \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      std::fprintf(stderr, "%s:%d: in child %d: EXPECT(%s) failed\n", __FILE__, __LINE__, int(getpid()), #cond); \
      std::fflush(stderr);                                                                          \
      _exit(1);                                                                                     \
    }                                                                                               \
  } while (0)
#define EXPECT_EQ(a, b)                                                                             \
  do {                                                                                              \
    const long long a_ = (long long)(a), b_ = (long long)(b);                                       \
    if (a_ != b_) {                                                                                 \
      std::fprintf(stderr, "%s:%d: in child %d: EXPECT_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, \
                   int(getpid()), #a, #b, a_, b_);                                                  \
      std::fflush(stderr);                                                                          \
      _exit(1);                                                                                     \
    }                                                                                               \
  } while (0)

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

int control(const char* command) {
  using fn = int (*)(const char*);
  static const auto f = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "gsync_ibv_emu_control"));
  EXPECT(f != nullptr);
  return f(command);
}
void control_ok(const std::string& command) {
  if (control(command.c_str()) != 0) {
    std::fprintf(stderr, "control(\"%s\") failed: %s\n", command.c_str(), std::strerror(errno));
    _exit(1);
  }
}

// A fabric of the test case's own (a unique shared-memory name), removed at its end.
struct fabric {
  std::string name;
  explicit fabric(const char* devices = nullptr, const char* bytes = nullptr) {
    static int n = 0;
    name = "gsync-ibv-emu-test-" + std::to_string(getpid()) + "-" + std::to_string(++n);
    setenv("GSYNC_IBV_EMU", name.c_str(), 1);
    if (devices) setenv("GSYNC_IBV_EMU_DEVICES", devices, 1);
    else unsetenv("GSYNC_IBV_EMU_DEVICES");
    if (bytes) setenv("GSYNC_IBV_EMU_BYTES", bytes, 1);
    else unsetenv("GSYNC_IBV_EMU_BYTES");
    unsetenv("GSYNC_IBV_EMU_LID");
  }
  ~fabric() {
    shm_unlink(("/" + name).c_str());
    unsetenv("GSYNC_IBV_EMU");
    unsetenv("GSYNC_IBV_EMU_DEVICES");
    unsetenv("GSYNC_IBV_EMU_BYTES");
  }
  fabric(const fabric&) = delete;
  fabric& operator=(const fabric&) = delete;
};

// The two children's line to each other (a socketpair), for addresses and barriers; every read
// is bounded.
struct line {
  int fd = -1;
  template <class T>
  void put(const T& v) const {
    EXPECT(send(fd, &v, sizeof v, MSG_NOSIGNAL) == ssize_t(sizeof v));
  }
  template <class T>
  T get(int ms = 15000) const {
    T v{};
    auto* p = reinterpret_cast<char*>(&v);
    size_t got = 0;
    while (got < sizeof v) {
      pollfd pf{fd, POLLIN, 0};
      EXPECT(poll(&pf, 1, ms) == 1);
      const ssize_t n = read(fd, p + got, sizeof v - got);
      EXPECT(n > 0);
      got += size_t(n);
    }
    return v;
  }
  void sync() const {
    put('s');
    EXPECT(get<char>() == 's');
  }
};

struct outcome {
  bool exited = false;
  int code = -1;
  int signal = 0;
};

// Runs each function in a child process of its own (two children share a line) and returns how
// each ended; children still running after limit_ms are killed.
std::vector<outcome> run_children(const std::vector<std::function<int(const line&)>>& fns, int limit_ms = 30000) {
  int sv[2] = {-1, -1};
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < fns.size(); ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(sv[1 - (i & 1)]);
      const int rc = fns[i](line{sv[i & 1]});
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  close(sv[0]);
  close(sv[1]);
  std::vector<outcome> out(fns.size());
  size_t left = pids.size();
  const auto start = clock_type::now();
  while (left) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (!pids[i]) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
      out[i].exited = WIFEXITED(st);
      out[i].code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      out[i].signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
      pids[i] = 0;
      --left;
    }
    if (left && ms_since(start) > limit_ms) {
      for (pid_t p : pids)
        if (p) kill(p, SIGKILL);
      FAIL("children still running after ", limit_ms, " ms: killed");
    }
    if (left) usleep(1000);
  }
  return out;
}

void check_all_passed(const std::vector<outcome>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("child ", i);
    CHECK(out[i].exited);
    CHECK(out[i].code == 0);
  }
}

ibv_context* open_device(const char* name = nullptr) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  EXPECT(list != nullptr && n > 0);
  ibv_device* d = list[0];
  for (int i = 0; name && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) d = list[i];
  EXPECT(!name || std::strcmp(ibv_get_device_name(d), name) == 0);
  ibv_context* c = ibv_open_device(d);
  EXPECT(c != nullptr);
  ibv_free_device_list(list);
  return c;
}

// What one side tells the other to connect and write.
struct info {
  uint32_t qpn, psn;
  uint16_t lid;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
  uint64_t len;
  int32_t pid;
};

struct options {
  uint8_t timeout = 18;  // 1.07 s per attempt: no spurious retry on a busy machine
  uint8_t retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 12;
  ibv_mtu mtu = IBV_MTU_1024;
  unsigned qp_access = IBV_ACCESS_REMOTE_WRITE;
  unsigned mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  int cqe = 256;
  uint32_t max_send_wr = 64, max_recv_wr = 64, max_inline = 64;
  bool global = false;  // address by GID (RoCE)
  const char* device = nullptr;
  bool stay_reset = false;  // else the QP is taken to INIT at once, so receives can be posted
  int dlid_delta = 0, psn_delta = 0;  // deliberately wrong addresses
  uint8_t dgid_flip = 0;
};

// One end of an RC connection: context, PD, CQ, a registered buffer and a QP.
struct end {
  options o;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  size_t len = 0;
  uint32_t psn = 0;
  bool owns_ctx = true;

  explicit end(size_t bytes, options opt = {}, ibv_context* shared = nullptr) : o(opt), len(bytes) {
    ctx = shared ? shared : open_device(o.device);
    pd = ibv_alloc_pd(ctx);
    EXPECT(pd != nullptr);
    cq = ibv_create_cq(ctx, o.cqe, nullptr, nullptr, 0);
    EXPECT(cq != nullptr);
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(m != MAP_FAILED);
    buf = static_cast<uint8_t*>(m);
    mr = ibv_reg_mr(pd, buf, len, int(o.mr_access));
    EXPECT(mr != nullptr);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = o.max_send_wr;
    init.cap.max_recv_wr = o.max_recv_wr;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 2;
    init.cap.max_inline_data = o.max_inline;
    qp = ibv_create_qp(pd, &init);
    EXPECT(qp != nullptr);
    psn = uint32_t(getpid() * 7919 + qp->qp_num) & 0xffffff;
    owns_ctx = !shared;
    if (!o.stay_reset) EXPECT_EQ(to_init(), 0);
  }
  ~end() {
    if (qp) ibv_destroy_qp(qp);
    if (mr) ibv_dereg_mr(mr);
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    if (buf) munmap(buf, len);
    if (owns_ctx) ibv_close_device(ctx);
  }
  end(const end&) = delete;
  end& operator=(const end&) = delete;

  info me() const {
    info i{};
    ibv_port_attr pa{};
    EXPECT(ibv_query_port(ctx, 1, &pa) == 0);
    ibv_gid g{};
    EXPECT(ibv_query_gid(ctx, 1, 1, &g) == 0);
    i.qpn = qp->qp_num;
    i.psn = psn;
    i.lid = pa.lid;
    std::memcpy(i.gid, g.raw, 16);
    i.addr = uintptr_t(buf);
    i.rkey = mr->rkey;
    i.len = len;
    i.pid = getpid();
    return i;
  }
  int to_init() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = o.qp_access;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  ibv_qp_attr rtr_attr(const info& r) const {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = o.mtu;
    a.dest_qp_num = r.qpn;
    a.rq_psn = r.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = o.min_rnr_timer;
    a.ah_attr.dlid = uint16_t(r.lid + o.dlid_delta);
    a.ah_attr.port_num = 1;
    if (o.global) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, r.gid, 16);
      a.ah_attr.grh.dgid.raw[15] ^= o.dgid_flip;
      a.ah_attr.grh.sgid_index = 1;
      a.ah_attr.grh.hop_limit = 64;
    }
    return a;
  }
  static constexpr int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  ibv_qp_attr rts_attr() const {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = (psn + uint32_t(o.psn_delta)) & 0xffffff;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = 1;
    return a;
  }
  static constexpr int rts_mask =
      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  void connect(const info& r) {
    if (state() == IBV_QPS_RESET) EXPECT_EQ(to_init(), 0);
    ibv_qp_attr a = rtr_attr(r);
    EXPECT_EQ(ibv_modify_qp(qp, &a, rtr_mask), 0);
    a = rts_attr();
    EXPECT_EQ(ibv_modify_qp(qp, &a, rts_mask), 0);
  }
  // Both ends: exchange addresses over the line, connect, and wait for each other: a request
  // that reaches a QP not yet in RTR is dropped (and retried only after the ack timeout).
  info join(const line& l) {
    l.put(me());
    const info r = l.get<info>();
    connect(r);
    l.sync();
    return r;
  }
  ibv_qp_state state() const {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    EXPECT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &i), 0);
    return a.qp_state;
  }
  int post_recv(uint64_t wr_id, void* addr = nullptr, uint32_t length = 0, uint32_t lkey = 0) {
    ibv_sge s{uintptr_t(addr), length, lkey ? lkey : mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = addr ? &s : nullptr;
    wr.num_sge = addr ? 1 : 0;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp, &wr, &bad);
  }
  // An RDMA write (with immediate when imm is set) of [local, local+length) to raddr.
  int write(uint64_t wr_id, const void* local, uint32_t length, uint64_t raddr, uint32_t rkey, bool signaled = true,
            const uint32_t* imm = nullptr, unsigned extra_flags = 0, uint32_t lkey = 0) {
    ibv_sge s{uintptr_t(local), length, lkey ? lkey : mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = length ? &s : nullptr;
    wr.num_sge = length ? 1 : 0;
    wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | extra_flags;
    if (imm) wr.imm_data = htobe32(*imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
  }
};

// Polls cq until n completions are in or ms have passed (backing off, not spinning, to leave the
// cores to the progress threads).
std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t n, int ms = 15000) {
  std::vector<ibv_wc> out;
  const auto start = clock_type::now();
  int idle = 0;
  while (out.size() < n && ms_since(start) < ms) {
    ibv_wc wc[16];
    const int k = ibv_poll_cq(cq, int(std::min<size_t>(16, n - out.size())), wc);
    EXPECT(k >= 0);
    out.insert(out.end(), wc, wc + k);
    if (k) idle = 0;
    else if (++idle > 100) usleep(100);
  }
  return out;
}
ibv_wc poll1(ibv_cq* cq, int ms = 15000) {
  auto v = poll_n(cq, 1, ms);
  EXPECT_EQ(v.size(), 1);
  return v[0];
}

ibv_async_event wait_async(ibv_context* c, int ms = 10000) {
  pollfd pf{c->async_fd, POLLIN, 0};
  EXPECT(poll(&pf, 1, ms) == 1);
  ibv_async_event e{};
  EXPECT_EQ(ibv_get_async_event(c, &e), 0);
  return e;
}

// Bytes the stand-in placed are really there once the requester's completion says so; this
// process learnt it from the other one, which ThreadSanitizer cannot see. Any ibv_poll_cq orders
// the caller after the placements so far (the stand-in's README), and costs nothing otherwise.
void settle(ibv_cq* cq) {
  ibv_wc wc;
  EXPECT(ibv_poll_cq(cq, 0, &wc) == 0);
}

void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t((i * 131 + seed) >> 3);
}
bool filled(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != uint8_t((i * 131 + seed) >> 3)) return false;
  return true;
}

// The requester of an error case: one write that must fail with `status` (and vendor_err);
// both QPs must be in ERR afterwards (checked by the caller on the responder side).
void expect_write_fails(end& e, uint64_t raddr, uint32_t rkey, ibv_wc_status status, uint32_t vendor,
                        uint32_t len = 64) {
  fill(e.buf, len, 7);
  EXPECT_EQ(e.write(42, e.buf, len, raddr, rkey), 0);
  const ibv_wc wc = poll1(e.cq);
  if (wc.status != status)
    std::fprintf(stderr, "got %s (vendor_err %u), expected %s\n", ibv_wc_status_str(wc.status), wc.vendor_err,
                 ibv_wc_status_str(status));
  EXPECT_EQ(wc.status, status);
  EXPECT_EQ(wc.wr_id, 42);
  EXPECT_EQ(wc.qp_num, e.qp->qp_num);
  EXPECT_EQ(wc.vendor_err, vendor);
  EXPECT_EQ(e.state(), IBV_QPS_ERR);
}

constexpr uint32_t kLocal = IBV_ACCESS_LOCAL_WRITE;
constexpr uint32_t kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

}  // namespace

TEST_SUITE_BEGIN("ibv_emu");

TEST_CASE("no GSYNC_IBV_EMU: no device, NULL with ENOSYS as on a host without RDMA") {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    if (value) setenv("GSYNC_IBV_EMU", value, 1);
    else unsetenv("GSYNC_IBV_EMU");
    int n = 5;
    errno = 0;
    ibv_device** list = ibv_get_device_list(&n);
    CHECK(list == nullptr);
    CHECK(errno == ENOSYS);
    CHECK(n == 0);
  }
  unsetenv("GSYNC_IBV_EMU");
}

TEST_CASE("exports carry the version nodes of Debian's libibverbs") {
  struct {
    const char* name;
    const char* version;
  } const want[] = {{"ibv_get_device_list", "IBVERBS_1.1"},   {"ibv_create_comp_channel", "IBVERBS_1.0"},
                    {"ibv_destroy_comp_channel", "IBVERBS_1.0"}, {"ibv_reg_mr", "IBVERBS_1.1"},
                    {"ibv_reg_mr_iova2", "IBVERBS_1.8"},         {"ibv_reg_dmabuf_mr", "IBVERBS_1.12"},
                    {"ibv_query_port", "IBVERBS_1.1"},           {"_ibv_query_gid_ex", "IBVERBS_1.11"},
                    {"gsync_ibv_emu_control", "GSYNC_IBV_EMU_1"}};
  for (const auto& w : want) {
    INFO(w.name, "@", w.version);
    CHECK(dlvsym(RTLD_DEFAULT, w.name, w.version) != nullptr);
  }
  // This executable runs against the stand-in, not a system libibverbs.
  Dl_info di{};
  REQUIRE(dladdr(dlsym(RTLD_DEFAULT, "ibv_open_device"), &di) != 0);
  CHECK(std::string(di.dli_fname).find("ibv_emu") != std::string::npos);
}

TEST_CASE("device list, port attributes and GIDs are the fabric's, the same in every process") {
  fabric f("emu0,roce0:2:eth,dead0:ib:down");
  auto a = [](const line& l) {
    setenv("GSYNC_IBV_EMU_LID", "0x105", 1);
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    EXPECT(list && n == 3);
    EXPECT(list[3] == nullptr);
    EXPECT(std::strcmp(ibv_get_device_name(list[0]), "emu0") == 0);
    EXPECT(std::strcmp(ibv_get_device_name(list[1]), "roce0") == 0);
    EXPECT(std::strcmp(ibv_get_device_name(list[2]), "dead0") == 0);
    EXPECT(ibv_get_device_guid(list[0]) != ibv_get_device_guid(list[1]));
    ibv_context* ib = ibv_open_device(list[0]);
    ibv_context* eth = ibv_open_device(list[1]);
    ibv_context* dead = ibv_open_device(list[2]);
    EXPECT(ib && eth && dead);
    ibv_free_device_list(list);
    EXPECT(ib->device != nullptr && ib->async_fd >= 0 && ib->num_comp_vectors >= 1);
    ibv_device_attr da{};
    EXPECT_EQ(ibv_query_device(eth, &da), 0);
    EXPECT_EQ(da.phys_port_cnt, 2);
    EXPECT(da.max_qp_wr >= 1024 && da.max_cqe >= 1024 && da.max_sge >= 2);
    ibv_port_attr pa{};
    EXPECT_EQ(ibv_query_port(ib, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
    EXPECT_EQ(pa.lid, 0x105);
    EXPECT(ibv_query_port(ib, 2, &pa) != 0);  // one port
    EXPECT_EQ(ibv_query_port(eth, 2, &pa), 0);
    EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(pa.lid, 0);  // RoCE has no LID
    EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
    EXPECT_EQ(ibv_query_port(dead, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_DOWN);
    ibv_gid g{};
    EXPECT_EQ(ibv_query_gid(ib, 1, 0, &g), 0);
    const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0x01, 0x05};
    EXPECT(std::memcmp(g.raw, ll, 16) == 0);
    EXPECT_EQ(ibv_query_gid(eth, 2, 1, &g), 0);
    const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0x01, 0x05};
    EXPECT(std::memcmp(g.raw, v4, 16) == 0);
    EXPECT(ibv_query_gid(ib, 1, 2, &g) != 0);
    ibv_gid_entry ge{};
    EXPECT_EQ(ibv_query_gid_ex(eth, 1, 1, &ge, 0), 0);
    EXPECT_EQ(ge.gid_type, IBV_GID_TYPE_ROCE_V2);
    l.sync();  // the other process joins now
    l.sync();
    ibv_close_device(ib);
    ibv_close_device(eth);
    ibv_close_device(dead);
    return 0;
  };
  auto b = [](const line& l) {
    l.sync();
    // Its own device setting is ignored: the fabric's devices are every process's.
    setenv("GSYNC_IBV_EMU_DEVICES", "other0", 1);
    setenv("GSYNC_IBV_EMU_LID", "auto", 1);  // each context a LID (and GIDs) of its own, from 0x1000
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    EXPECT(list && n == 3);
    EXPECT(std::strcmp(ibv_get_device_name(list[1]), "roce0") == 0);
    ibv_context* ib = ibv_open_device(list[0]);
    ibv_context* ib2 = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ibv_port_attr pa{};
    EXPECT_EQ(ibv_query_port(ib, 1, &pa), 0);
    EXPECT_EQ(pa.lid, 0x1000);
    EXPECT_EQ(ibv_query_port(ib2, 1, &pa), 0);
    EXPECT_EQ(pa.lid, 0x1001);
    ibv_gid g1{}, g2{};
    EXPECT_EQ(ibv_query_gid(ib, 1, 1, &g1), 0);
    EXPECT_EQ(ibv_query_gid(ib2, 1, 1, &g2), 0);
    EXPECT(std::memcmp(g1.raw, g2.raw, 16) != 0);
    ibv_close_device(ib2);
    ibv_close_device(ib);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({a, b}));
}

TEST_CASE("modify_qp: state order and required masks (EINVAL), posting before RTS, lax masks accepts") {
  fabric f("emu0:mtu2048,roce0:eth");
  auto a = [](const line&) {
    options reset;
    reset.stay_reset = true;
    end e(4096, reset);
    const info self = e.me();  // a loopback connection: the QP's own address
    ibv_qp_attr a = e.rtr_attr(self);
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rtr_mask), EINVAL);  // RESET -> RTR
    EXPECT_EQ(e.state(), IBV_QPS_RESET);
    ibv_recv_wr rwr{};
    ibv_recv_wr* rbad = nullptr;
    EXPECT_EQ(ibv_post_recv(e.qp, &rwr, &rbad), EINVAL);  // a receive in RESET
    EXPECT(rbad == &rwr);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);  // no ACCESS_FLAGS
    a.port_num = 2;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), EINVAL);
    EXPECT_EQ(e.to_init(), 0);
    EXPECT_EQ(e.post_recv(1), 0);  // receives may be posted from INIT on
    EXPECT_EQ(e.write(1, e.buf, 8, self.addr, self.rkey), EINVAL);  // sends only in RTS
    a = e.rtr_attr(self);
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rtr_mask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);  // missing
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rtr_mask | IBV_QP_SQ_PSN), EINVAL);          // not allowed here
    a.path_mtu = IBV_MTU_4096;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rtr_mask), EINVAL);  // above the port's active MTU (2048)
    a = e.rtr_attr(self);
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rtr_mask), 0);
    EXPECT_EQ(e.write(1, e.buf, 8, self.addr, self.rkey), EINVAL);
    a = e.rts_attr();
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rts_mask & ~IBV_QP_RNR_RETRY), EINVAL);
    EXPECT_EQ(e.state(), IBV_QPS_RTR);
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, end::rts_mask), 0);
    EXPECT_EQ(e.qp->state, IBV_QPS_RTS);
    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    EXPECT_EQ(ibv_query_qp(e.qp, &q, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(q.dest_qp_num, self.qpn);
    EXPECT_EQ(q.sq_psn, e.psn);
    EXPECT_EQ(q.timeout, 18);
    EXPECT_EQ(qi.cap.max_send_wr, 64);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_INIT;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, IBV_QP_STATE), EINVAL);  // RTS -> INIT
    a.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, IBV_QP_STATE), 0);  // to ERR from any state
    a.qp_state = IBV_QPS_RESET;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, IBV_QP_STATE), 0);  // and to RESET
    EXPECT_EQ(e.to_init(), 0);
    {
      // RoCE: an address without a GRH is refused (the kernel's rdma_check_ah_attr).
      options o;
      o.device = "roce0";
      end r(4096, o);
      ibv_qp_attr ra = r.rtr_attr(r.me());
      EXPECT_EQ(ibv_modify_qp(r.qp, &ra, end::rtr_mask), EINVAL);
      r.o.global = true;
      ra = r.rtr_attr(r.me());
      EXPECT_EQ(ibv_modify_qp(r.qp, &ra, end::rtr_mask), 0);
    }
    // Without the rule, the same mistakes pass.
    control_ok("lax masks");
    end g(4096, reset);
    a = g.rtr_attr(g.me());
    EXPECT_EQ(ibv_modify_qp(g.qp, &a, IBV_QP_STATE), 0);  // RESET -> RTR, no attributes
    EXPECT_EQ(g.write(1, g.buf, 8, 0, 0), 0);
    return 0;
  };
  check_all_passed(run_children({a}));
}

TEST_CASE("1 MiB RDMA write with immediate: placed in the target by the stand-in, immediate as posted") {
  // The smallest fabric: the write goes through an inbound ring of ~170 KiB, in chunks, with back-pressure.
  fabric f(nullptr, "16M");
  constexpr size_t kBytes = 1 << 20;
  auto target = [](const line& l) {
    end e(2 * kBytes);
    EXPECT_EQ(e.post_recv(77), 0);
    e.join(l);
    l.sync();
    const ibv_wc wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 77);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT((wc.wc_flags & IBV_WC_WITH_IMM) != 0);
    EXPECT_EQ(wc.byte_len, kBytes);
    EXPECT_EQ(wc.qp_num, e.qp->qp_num);
    const uint8_t imm[4] = {0x12, 0x34, 0x56, 0x78};  // htobe32(0x12345678): the bytes as posted
    EXPECT(std::memcmp(&wc.imm_data, imm, 4) == 0);
    EXPECT(filled(e.buf, kBytes, 3));
    // A plain write: the target calls nothing at all; the bytes are there once the requester's
    // completion says so.
    l.sync();
    EXPECT(l.get<char>() == 'w');
    settle(e.cq);
    EXPECT(filled(e.buf + kBytes, 256 << 10, 9));
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    end e(2 * kBytes);
    const info r = e.join(l);
    fill(e.buf, kBytes, 3);
    l.sync();
    const uint32_t imm = 0x12345678;
    EXPECT_EQ(e.write(5, e.buf, kBytes, r.addr, r.rkey, true, &imm), 0);
    ibv_wc wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 5);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    l.sync();
    fill(e.buf + kBytes, 256 << 10, 9);
    EXPECT_EQ(e.write(6, e.buf + kBytes, 256 << 10, r.addr + kBytes, r.rkey), 0);
    wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    l.put('w');
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("zero-length WRITE_WITH_IMM consumes a receive and carries the immediate, in order") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(e.post_recv(100 + i), 0);
    e.join(l);
    const auto wcs = poll_n(e.cq, 3);
    EXPECT_EQ(wcs.size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[i].wr_id, 100 + i);
      EXPECT_EQ(wcs[i].byte_len, 0);
      EXPECT_EQ(be32toh(wcs[i].imm_data), 0xabc0u + i);
    }
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    end e(4096);
    e.join(l);
    for (uint32_t i = 0; i < 3; ++i) {
      const uint32_t imm = 0xabc0 + i;
      EXPECT_EQ(e.write(i, nullptr, 0, 0, 0, i == 2, &imm), 0);  // no SGE, no key: none is checked
    }
    EXPECT_EQ(poll1(e.cq).status, IBV_WC_SUCCESS);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("inline writes take the payload at post time, above max_inline_data is EINVAL") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    e.join(l);
    l.sync();
    EXPECT(l.get<char>() == 'd');
    settle(e.cq);
    EXPECT(filled(e.buf, 48, 1));
    return 0;
  };
  auto source = [](const line& l) {
    end e(4096);
    const info r = e.join(l);
    l.sync();
    uint8_t stack[96];  // not registered: an inline payload needs no lkey
    fill(stack, 48, 1);
    EXPECT_EQ(e.write(1, stack, 48, r.addr, r.rkey, true, nullptr, IBV_SEND_INLINE, 0xdead), 0);
    std::memset(stack, 0, sizeof stack);  // free once post_send returned
    EXPECT_EQ(e.write(2, stack, 65, r.addr, r.rkey, true, nullptr, IBV_SEND_INLINE), EINVAL);  // max 64
    EXPECT_EQ(poll1(e.cq).status, IBV_WC_SUCCESS);
    l.put('d');
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

// The responder side of the remote-access error cases: it must see its QP go to ERR with
// IBV_EVENT_QP_ACCESS_ERR, its receive flushed, its memory untouched.
int access_error_target(const line& l, options o = {}) {
  end e(4096, o);
  EXPECT_EQ(e.post_recv(9), 0);
  e.join(l);
  l.sync();
  ibv_async_event ev = wait_async(e.ctx);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT(ev.element.qp == e.qp);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(e.state(), IBV_QPS_ERR);
  const ibv_wc wc = poll1(e.cq);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.wr_id, 9);
  for (size_t i = 0; i < e.len; ++i) EXPECT_EQ(e.buf[i], 0);
  l.sync();
  return 0;
}

TEST_CASE("rkey: a key that is no live MR of the target gives REM_ACCESS_ERR, both QPs to ERR") {
  fabric f;
  auto source = [](const line& l) {
    end e(4096);
    const info r = e.join(l);
    l.sync();
    expect_write_fails(e, r.addr, r.rkey ^ 0x5a5a, IBV_WC_REM_ACCESS_ERR, 2);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({[](const line& l) { return access_error_target(l); }, source}));
}

TEST_CASE("rkey: with lax rkey (both sides) the write to a registered address goes through") {
  fabric f;
  auto target = [](const line& l) {
    control_ok("lax rkey");
    end e(4096);
    e.join(l);
    l.sync();
    EXPECT(l.get<char>() == 'd');
    settle(e.cq);
    EXPECT(filled(e.buf, 64, 7));
    return 0;
  };
  auto source = [](const line& l) {
    control_ok("lax rkey");
    end e(4096);
    const info r = e.join(l);
    l.sync();
    fill(e.buf, 64, 7);
    EXPECT_EQ(e.write(1, e.buf, 64, r.addr, r.rkey ^ 0x5a5a), 0);
    EXPECT_EQ(poll1(e.cq).status, IBV_WC_SUCCESS);
    l.put('d');
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("bounds: a write outside the MR gives REM_ACCESS_ERR") {
  fabric f;
  auto source = [](const line& l) {
    end e(4096);
    const info r = e.join(l);
    l.sync();
    expect_write_fails(e, r.addr + r.len - 32, r.rkey, IBV_WC_REM_ACCESS_ERR, 3);  // 32 bytes past the end
    l.sync();
    return 0;
  };
  check_all_passed(run_children({[](const line& l) { return access_error_target(l); }, source}));
}

TEST_CASE("access: an MR without REMOTE_WRITE, or a QP without it, gives REM_ACCESS_ERR") {
  for (int which = 0; which < 2; ++which) {
    fabric f;
    INFO((which == 0 ? "MR" : "QP"));
    options o;
    if (which == 0) o.mr_access = kLocal;
    else o.qp_access = 0;
    auto target = [o](const line& l) { return access_error_target(l, o); };
    auto source = [which](const line& l) {
      end e(4096);
      const info r = e.join(l);
      l.sync();
      expect_write_fails(e, r.addr, r.rkey, IBV_WC_REM_ACCESS_ERR, which == 0 ? 4 : 5);
      l.sync();
      return 0;
    };
    check_all_passed(run_children({target, source}));
  }
}

TEST_CASE("memory registration: REMOTE_WRITE needs LOCAL_WRITE, unmapped memory, dma-buf, iova, busy PD") {
  fabric f;
  auto a = [](const line&) {
    ibv_context* c = open_device();
    ibv_pd* pd = ibv_alloc_pd(c);
    std::vector<uint8_t> mem(8192);
    errno = 0;
    EXPECT(ibv_reg_mr(pd, mem.data(), mem.size(), int(IBV_ACCESS_REMOTE_WRITE)) == nullptr);
    EXPECT_EQ(errno, EINVAL);
    void* hole = mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, 8192);
    errno = 0;
    EXPECT(ibv_reg_mr(pd, hole, 8192, int(kRemote)) == nullptr);
    EXPECT_EQ(errno, EFAULT);
    errno = 0;
    EXPECT(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, int(kRemote)) == nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), int(kRemote | IBV_ACCESS_RELAXED_ORDERING));
    EXPECT(mr != nullptr);
    EXPECT(mr->lkey != 0 && mr->rkey != 0);
    ibv_mr* again = ibv_reg_mr(pd, mem.data(), mem.size(), int(kRemote));
    EXPECT(again && again->rkey != mr->rkey);  // keys are never shared
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);  // MRs still in it
    EXPECT_EQ(ibv_dereg_mr(again), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    ibv_close_device(c);
    return 0;
  };
  check_all_passed(run_children({a}));
  // An MR registered at an iova: remote addresses are in that space.
  fabric g;
  auto target = [](const line& l) {
    end e(4096);
    std::vector<uint8_t> mem(8192);
    ibv_mr* m = ibv_reg_mr_iova2(e.pd, mem.data(), mem.size(), 0x1000000, kRemote);
    EXPECT(m != nullptr);
    l.put(m->rkey);
    e.join(l);
    l.sync();
    EXPECT(l.get<char>() == 'd');
    settle(e.cq);
    EXPECT(filled(mem.data() + 100, 200, 5));
    ibv_dereg_mr(m);
    return 0;
  };
  auto source = [](const line& l) {
    end e(4096);
    const uint32_t rkey = l.get<uint32_t>();
    e.join(l);
    l.sync();
    fill(e.buf, 200, 5);
    EXPECT_EQ(e.write(1, e.buf, 200, 0x1000000 + 100, rkey), 0);
    EXPECT_EQ(poll1(e.cq).status, IBV_WC_SUCCESS);
    l.put('d');
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("lkey: a local SGE outside an MR of its lkey gives LOC_PROT_ERR, then flushes") {
  fabric f;
  auto target = [](const line& l) {
    for (int i = 0; i < 2; ++i) {
      end e(4096);
      e.join(l);
      l.sync();
    }
    return 0;
  };
  auto source = [](const line& l) {
    {
      end e(8192);
      const info r = e.join(l);
      // The MR of another PD: its lkey is no key for this QP.
      ibv_pd* other = ibv_alloc_pd(e.ctx);
      ibv_mr* foreign = ibv_reg_mr(other, e.buf, 4096, int(kLocal));
      EXPECT(foreign != nullptr);
      EXPECT_EQ(e.write(1, e.buf, 64, r.addr, r.rkey, true, nullptr, 0, foreign->lkey), 0);
      ibv_wc wc = poll1(e.cq);
      EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
      EXPECT_EQ(wc.vendor_err, 1);
      EXPECT_EQ(wc.wr_id, 1);
      EXPECT_EQ(e.state(), IBV_QPS_ERR);
      EXPECT_EQ(e.write(2, e.buf, 64, r.addr, r.rkey, false), 0);  // in ERR: flushed, unsignaled too
      wc = poll1(e.cq);
      EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
      EXPECT_EQ(wc.wr_id, 2);
      ibv_dereg_mr(foreign);
      ibv_dealloc_pd(other);
      l.sync();
    }
    {
      // Past the end of the MR of that lkey (still mapped memory).
      end e(8192);
      const info r = e.join(l);
      ibv_mr* half = ibv_reg_mr(e.pd, e.buf, 4096, int(kLocal));
      EXPECT(half != nullptr);
      EXPECT_EQ(e.write(3, e.buf + 4000, 200, r.addr, r.rkey, true, nullptr, 0, half->lkey), 0);
      const ibv_wc wc = poll1(e.cq);
      EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
      EXPECT_EQ(wc.wr_id, 3);
      ibv_dereg_mr(half);
      l.sync();
    }
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("RNR: WITH_IMM without a posted receive fails after rnr_retry, rnr_retry 7 waits for one") {
  fabric f;
  auto target = [](const line& l) {
    options o;
    o.min_rnr_timer = 1;  // 0.01 ms
    end e(4096, o);
    e.join(l);
    l.sync();  // the requester's RNR failure is done
    end w(4096, o);
    w.join(l);
    l.sync();  // its write is posted: it keeps retrying until this receive is there
    usleep(20000);
    EXPECT_EQ(w.post_recv(5), 0);
    const ibv_wc wc = poll1(w.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 5);
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    options o;
    o.rnr_retry = 1;
    end e(4096, o);
    const info r = e.join(l);
    const uint32_t imm = 1;
    const auto t0 = clock_type::now();
    EXPECT_EQ(e.write(1, e.buf, 16, r.addr, r.rkey, true, &imm), 0);
    const ibv_wc wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(wc.vendor_err, 7);
    EXPECT(ms_since(t0) < 2000);
    EXPECT_EQ(e.state(), IBV_QPS_ERR);
    l.sync();
    o.rnr_retry = 7;  // forever
    end w(4096, o);
    const info r2 = w.join(l);
    EXPECT_EQ(w.write(2, w.buf, 16, r2.addr, r2.rkey, true, &imm), 0);
    l.sync();
    const ibv_wc ok = poll1(w.cq);
    EXPECT_EQ(ok.status, IBV_WC_SUCCESS);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("queue depth: ENOMEM beyond max_send_wr until a later signaled completion is polled, CQ overrun") {
  fabric f;
  auto target = [](const line& l) {
    options o;
    o.max_recv_wr = 2;
    end e(4096, o);
    EXPECT_EQ(e.post_recv(1), 0);
    EXPECT_EQ(e.post_recv(2), 0);
    EXPECT_EQ(e.post_recv(3), ENOMEM);
    e.join(l);
    end c(4096);
    c.join(l);
    l.sync();
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    options o;
    o.max_send_wr = 4;
    end e(4096, o);
    const info r = e.join(l);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(e.write(i, e.buf, 8, r.addr, r.rkey, false), 0);
    EXPECT_EQ(e.write(3, e.buf, 8, r.addr, r.rkey, true), 0);
    EXPECT_EQ(e.write(4, e.buf, 8, r.addr, r.rkey, true), ENOMEM);  // 4 outstanding
    const ibv_wc wc = poll1(e.cq);  // the signaled one retires the three before it too
    EXPECT_EQ(wc.wr_id, 3);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(e.write(10 + i, e.buf, 8, r.addr, r.rkey, false), 0);
    EXPECT_EQ(e.write(14, e.buf, 8, r.addr, r.rkey, true), ENOMEM);  // four unsignaled: stuck for good
    // A CQ of 2 entries and 3 signaled completions: overrun, IBV_EVENT_CQ_ERR, its QP to ERR.
    options small;
    small.cqe = 2;
    end c(4096, small);
    const info rc = c.join(l);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c.write(i, c.buf, 8, rc.addr, rc.rkey, true), 0);
    ibv_async_event ev = wait_async(c.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    EXPECT(ev.element.cq == c.cq);
    EXPECT_EQ(c.state(), IBV_QPS_ERR);
    ibv_ack_async_event(&ev);
    l.sync();
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("order: completions come in posting order per queue, on both sides") {
  fabric f;
  constexpr int kN = 8;
  auto target = [](const line& l) {
    end e(kN << 19);
    for (int i = 0; i < kN; ++i) EXPECT_EQ(e.post_recv(100 + i), 0);
    e.join(l);
    const auto wcs = poll_n(e.cq, kN);
    EXPECT_EQ(wcs.size(), kN);
    for (int i = 0; i < kN; ++i) {
      EXPECT_EQ(wcs[i].wr_id, 100 + i);
      EXPECT_EQ(be32toh(wcs[i].imm_data), uint32_t(i));
    }
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    end e(kN << 19);
    const info r = e.join(l);
    for (int i = 0; i < kN; ++i) {
      const uint32_t imm = uint32_t(i), len = i % 2 ? 8 : 512 << 10;  // large and small alternate
      EXPECT_EQ(e.write(i, e.buf + (size_t(i) << 19), len, r.addr + (size_t(i) << 19), r.rkey, true, &imm), 0);
    }
    const auto wcs = poll_n(e.cq, kN);
    EXPECT_EQ(wcs.size(), kN);
    for (int i = 0; i < kN; ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[i].wr_id, i);
    }
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("flush: after ERR every outstanding and newly posted WR completes with WR_FLUSH_ERR") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(e.post_recv(10 + i), 0);
    e.join(l);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(ibv_modify_qp(e.qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(e.post_recv(13), 0);
    const auto wcs = poll_n(e.cq, 4);
    EXPECT_EQ(wcs.size(), 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
      EXPECT_EQ(wcs[i].wr_id, 10 + i);
      EXPECT_EQ(wcs[i].qp_num, e.qp->qp_num);
    }
    l.sync();
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    end e(4096);
    const info r = e.join(l);
    l.sync();  // the target is in ERR: these are never acknowledged (timeout 18: 1 s per attempt)
    EXPECT_EQ(e.write(1, e.buf, 8, r.addr, r.rkey, true), 0);
    EXPECT_EQ(e.write(2, e.buf, 8, r.addr, r.rkey, false), 0);
    EXPECT_EQ(e.write(3, e.buf, 8, r.addr, r.rkey, false), 0);
    control_ok("qp_error " + std::to_string(e.qp->qp_num));
    EXPECT_EQ(e.write(4, e.buf, 8, r.addr, r.rkey, false), 0);
    const auto wcs = poll_n(e.cq, 4);
    EXPECT_EQ(wcs.size(), 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
      EXPECT_EQ(wcs[i].wr_id, i + 1);
      EXPECT_EQ(wcs[i].vendor_err, 8);
    }
    ibv_async_event ev = wait_async(e.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
    EXPECT(ev.element.qp == e.qp);
    EXPECT_EQ(ibv_destroy_qp(e.qp), EBUSY);  // its event is not acknowledged yet
    ibv_ack_async_event(&ev);
    EXPECT_EQ(ibv_destroy_qp(e.qp), 0);
    e.qp = nullptr;
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

// A requester whose write must run out of retries: RETRY_EXC_ERR after at least the budget.
int expect_retry_exceeded(end& e, const info& r) {
  const auto t0 = clock_type::now();
  EXPECT_EQ(e.write(1, e.buf, 64, r.addr, r.rkey), 0);
  const ibv_wc wc = poll1(e.cq);
  const double ms = ms_since(t0);
  if (wc.status != IBV_WC_RETRY_EXC_ERR) std::fprintf(stderr, "got %s\n", ibv_wc_status_str(wc.status));
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wc.vendor_err, 6);
  const double budget = 4.096e-3 * double(1u << e.o.timeout) * (e.o.retry_cnt + 1);
  EXPECT(ms >= budget * 0.99);
  EXPECT(ms < budget + 3000);
  EXPECT_EQ(e.state(), IBV_QPS_ERR);
  return 0;
}
// kill() returns before the victim stops running: wait (bounded) until it is a zombie or gone.
bool gone(pid_t pid) {
  const auto start = clock_type::now();
  while (ms_since(start) < 10000) {
    char path[64], state = 0;
    std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
    FILE* f = std::fopen(path, "r");
    if (!f) return true;
    const int n = std::fscanf(f, "%*d (%*[^)]) %c", &state);
    std::fclose(f);
    if (n == 1 && (state == 'Z' || state == 'X')) return true;
    usleep(1000);
  }
  return false;
}

options fast_fail() {
  options o;
  o.timeout = 10;  // 4.2 ms per attempt
  o.retry_cnt = 1;
  return o;
}

TEST_CASE("addresses: a wrong DLID or DGID sends into the void (RETRY_EXC_ERR), RoCE by GID works") {
  for (int which = 0; which < 3; ++which) {
    fabric f("emu0,roce0:eth");
    INFO((which == 0 ? "wrong dlid" : which == 1 ? "wrong dgid" : "RoCE by GID"));
    auto target = [which](const line& l) {
      setenv("GSYNC_IBV_EMU_LID", "3", 1);
      options o;
      if (which) {
        o.device = "roce0";
        o.global = true;
      }
      end e(4096, o);
      e.join(l);
      l.sync();
      settle(e.cq);
      if (which == 2) EXPECT(filled(e.buf, 64, 7));
      else for (int i = 0; i < 64; ++i) EXPECT_EQ(e.buf[i], 0);
      return 0;
    };
    auto source = [which](const line& l) {
      setenv("GSYNC_IBV_EMU_LID", "4", 1);
      options o = which < 2 ? fast_fail() : options{};  // the working path keeps the long timeout
      if (which == 0) o.dlid_delta = 1;
      if (which) {
        o.device = "roce0";
        o.global = true;
        o.dgid_flip = which == 1 ? 0x40 : 0;
      }
      end e(4096, o);
      const info r = e.join(l);
      if (which < 2) expect_retry_exceeded(e, r);
      else {
        fill(e.buf, 64, 7);
        EXPECT_EQ(e.write(1, e.buf, 64, r.addr, r.rkey), 0);
        EXPECT_EQ(poll1(e.cq).status, IBV_WC_SUCCESS);
      }
      l.sync();
      return 0;
    };
    check_all_passed(run_children({target, source}));
  }
}

TEST_CASE("a target stalled briefly: retransmissions after the ack timeout are placed once") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(e.post_recv(10 + i), 0);
    e.join(l);
    control_ok("stall");
    l.sync();
    EXPECT(l.get<char>() == 'p');  // three writes posted; let two or three ack timeouts pass
    usleep(150000);
    control_ok("resume");
    const auto wcs = poll_n(e.cq, 3);
    EXPECT_EQ(wcs.size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[i].wr_id, 10 + i);
      EXPECT_EQ(be32toh(wcs[i].imm_data), uint32_t(i));
    }
    EXPECT(filled(e.buf, 3 * 512, 4));
    l.sync();  // the requester has all its completions: no duplicate took a receive
    EXPECT(poll_n(e.cq, 1, 20).empty());
    return 0;
  };
  auto source = [](const line& l) {
    options o;
    o.timeout = 14;  // 67 ms per attempt, 8 attempts: 537 ms
    end e(4096, o);
    const info r = e.join(l);
    l.sync();
    fill(e.buf, 3 * 512, 4);
    for (uint32_t i = 0; i < 3; ++i)
      EXPECT_EQ(e.write(i, e.buf + i * 512, 512, r.addr + i * 512, r.rkey, true, &i), 0);
    l.put('p');
    const auto wcs = poll_n(e.cq, 3);
    EXPECT_EQ(wcs.size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[i].wr_id, i);
    }
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("both directions at once through small rings, with credits written back: every byte arrives") {
  fabric f(nullptr, "16M");  // inbound rings of ~170 KiB: back-pressure all along
  // Each side writes kMsgs slots of its peer's ring (WRITE_WITH_IMM) and, as it consumes the
  // slots written to it, writes its consumed count back into the peer's credit word (inline), as
  // a verbs link does: the sender never reuses a slot the receiver has not consumed.
  auto side = [](const line& l) {
    constexpr int kSlots = 8, kMsgs = 96;
    constexpr uint32_t kSlot = 96 << 10;
    constexpr size_t kRing = size_t(kSlots) * kSlot, kCredit = 2 * kRing;
    options o;
    o.max_send_wr = 16;
    o.max_recv_wr = kSlots;
    end e(2 * kRing + 4096, o);  // [peer writes here | staging of what goes out | credit word]
    for (int i = 0; i < kSlots; ++i) EXPECT_EQ(e.post_recv(uint64_t(i)), 0);
    const info r = e.join(l);
    const uint32_t seed = uint32_t(getpid());
    l.put(seed);
    const uint32_t peer_seed = l.get<uint32_t>();
    constexpr uint64_t kCreditWr = 1ull << 40;
    int sent = 0, acked = 0, got = 0, credit_posted = 0, credit_wrs = 0;
    uint64_t credit_sent = 0;
    const auto start = clock_type::now();
    while ((acked < kMsgs || got < kMsgs || credit_sent < uint64_t(kMsgs) || credit_wrs) && ms_since(start) < 20000) {
      const uint64_t credit = __atomic_load_n(reinterpret_cast<uint64_t*>(e.buf + kCredit), __ATOMIC_ACQUIRE);
      if (sent < kMsgs && uint64_t(sent) - credit < kSlots && sent - acked < kSlots) {
        uint8_t* src = e.buf + kRing + size_t(sent % kSlots) * kSlot;  // reused once its write completed
        fill(src, kSlot, seed + uint32_t(sent));
        const uint32_t imm = uint32_t(sent);
        EXPECT_EQ(e.write(uint64_t(sent), src, kSlot, r.addr + size_t(sent % kSlots) * kSlot, r.rkey, true, &imm), 0);
        ++sent;
      }
      if (credit_sent < uint64_t(got) && credit_wrs < 4) {
        const uint64_t v = uint64_t(got);
        EXPECT_EQ(e.write(kCreditWr | v, &v, 8, r.addr + kCredit, r.rkey, true, nullptr, IBV_SEND_INLINE), 0);
        credit_sent = v;
        ++credit_wrs;
        ++credit_posted;
      }
      ibv_wc wc[8];
      const int n = ibv_poll_cq(e.cq, 8, wc);
      EXPECT(n >= 0);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
        if (wc[i].opcode == IBV_WC_RDMA_WRITE && (wc[i].wr_id & kCreditWr)) {
          --credit_wrs;
        } else if (wc[i].opcode == IBV_WC_RDMA_WRITE) {
          EXPECT_EQ(wc[i].wr_id, acked);
          ++acked;
        } else {
          EXPECT_EQ(wc[i].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
          EXPECT_EQ(be32toh(wc[i].imm_data), uint32_t(got));
          EXPECT_EQ(wc[i].byte_len, kSlot);
          EXPECT(filled(e.buf + size_t(got % kSlots) * kSlot, kSlot, peer_seed + uint32_t(got)));
          ++got;
          EXPECT_EQ(e.post_recv(wc[i].wr_id), 0);
        }
      }
      if (n == 0) usleep(50);
    }
    EXPECT_EQ(acked, kMsgs);
    EXPECT_EQ(got, kMsgs);
    EXPECT(credit_posted >= 1);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({side, side}));
}

TEST_CASE("LID auto: two contexts of one process are two hosts, a DLID naming the wrong one times out") {
  fabric f;
  auto a = [](const line&) {
    setenv("GSYNC_IBV_EMU_LID", "auto", 1);
    end x(4096), y(4096);  // two contexts
    const info xi = x.me(), yi = y.me();
    EXPECT(xi.lid != yi.lid);
    x.connect(yi);
    y.connect(xi);
    fill(y.buf, 64, 7);
    EXPECT_EQ(y.write(1, y.buf, 64, xi.addr, xi.rkey), 0);
    EXPECT_EQ(poll1(y.cq).status, IBV_WC_SUCCESS);
    // A pair like the first, but its requester's DLID is its own host's, not the responder's.
    end x2(4096, {}, x.ctx);
    end bad(4096, fast_fail(), y.ctx);
    info to = x2.me();
    to.lid = yi.lid;
    x2.connect(bad.me());
    bad.connect(to);
    expect_retry_exceeded(bad, to);
    return 0;
  };
  check_all_passed(run_children({a}));
}

TEST_CASE("psn: a requester whose sq_psn is not the responder's rq_psn gets RETRY_EXC_ERR") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    e.join(l);
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    options o = fast_fail();
    o.psn_delta = 1;
    end e(4096, o);
    const info r = e.join(l);
    expect_retry_exceeded(e, r);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("a killed target: the requester's WR runs out of retries") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    e.join(l);
    l.sync();
    pause();  // killed here
    return 1;
  };
  auto source = [](const line& l) {
    end e(4096, fast_fail());
    const info r = e.join(l);
    l.sync();
    EXPECT_EQ(kill(r.pid, SIGKILL), 0);
    EXPECT(gone(r.pid));
    expect_retry_exceeded(e, r);
    return 0;
  };
  const auto out = run_children({target, source});
  CHECK(out[0].signal == SIGKILL);
  CHECK(out[1].exited);
  CHECK(out[1].code == 0);
}

TEST_CASE("stall: a target that stops servicing times writes out, resumed, new QPs work") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    e.join(l);
    control_ok("stall");
    l.sync();
    l.sync();  // the requester has given up
    control_ok("resume");
    end n(4096);
    n.join(l);
    l.sync();
    settle(n.cq);
    EXPECT(filled(n.buf, 64, 7));
    return 0;
  };
  auto source = [](const line& l) {
    end e(4096, fast_fail());
    const info r = e.join(l);
    l.sync();
    expect_retry_exceeded(e, r);
    l.sync();
    end n(4096);
    const info rn = n.join(l);
    fill(n.buf, 64, 7);
    EXPECT_EQ(n.write(1, n.buf, 64, rn.addr, rn.rkey), 0);
    EXPECT_EQ(poll1(n.cq).status, IBV_WC_SUCCESS);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("completion channel: poll(2) wakes after req_notify_cq, EAGAIN when empty, EBUSY until acked") {
  fabric f;
  auto a = [](const line&) {
    ibv_context* ctx = open_device();
    {
      ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
      EXPECT(ch != nullptr);
      int cookie = 0;
      ibv_cq* cq = ibv_create_cq(ctx, 16, &cookie, ch, 0);
      EXPECT(cq != nullptr);
      // Two QPs of this process connected to each other; the requester's QP uses the channel's CQ.
      end peer(4096, {}, ctx);
      end me(4096, {}, ctx);
      ibv_destroy_qp(me.qp);
      ibv_qp_init_attr init{};
      init.send_cq = cq;
      init.recv_cq = cq;
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = init.cap.max_recv_wr = 8;
      init.cap.max_send_sge = init.cap.max_recv_sge = 1;
      me.qp = ibv_create_qp(me.pd, &init);
      EXPECT(me.qp != nullptr);
      const info pi = peer.me();
      me.connect(pi);
      peer.connect(me.me());
      EXPECT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
      ibv_cq* got = nullptr;
      void* got_ctx = nullptr;
      errno = 0;
      EXPECT_EQ(ibv_get_cq_event(ch, &got, &got_ctx), -1);
      EXPECT_EQ(errno, EAGAIN);
      EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
      EXPECT_EQ(me.write(1, me.buf, 8, pi.addr, pi.rkey), 0);
      pollfd pf{ch->fd, POLLIN, 0};
      EXPECT_EQ(poll(&pf, 1, 10000), 1);
      EXPECT_EQ(ibv_get_cq_event(ch, &got, &got_ctx), 0);
      EXPECT(got == cq);
      EXPECT(got_ctx == &cookie);
      ibv_wc wc{};
      EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 1);
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      // Not armed again: the next completion queues no event.
      EXPECT_EQ(me.write(2, me.buf, 8, pi.addr, pi.rkey), 0);
      EXPECT_EQ(poll1(cq).wr_id, 2);
      EXPECT_EQ(poll(&pf, 1, 50), 0);
      EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);  // a QP still uses it
      EXPECT_EQ(ibv_destroy_qp(me.qp), 0);
      me.qp = nullptr;
      EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // a CQ still uses it
      EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);            // one event got, not acknowledged
      ibv_ack_cq_events(cq, 1);
      EXPECT_EQ(ibv_destroy_cq(cq), 0);
      EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
    }
    EXPECT_EQ(ibv_close_device(ctx), 0);
    return 0;
  };
  check_all_passed(run_children({a}));
}

TEST_CASE("async events: port_down gives PORT_ERR everywhere and sends time out, port_up gives PORT_ACTIVE") {
  fabric f;
  auto target = [](const line& l) {
    end e(4096);
    EXPECT_EQ(fcntl(e.ctx->async_fd, F_SETFL, fcntl(e.ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
    ibv_async_event none{};
    errno = 0;
    EXPECT_EQ(ibv_get_async_event(e.ctx, &none), -1);
    EXPECT_EQ(errno, EAGAIN);
    e.join(l);
    ibv_async_event ev = wait_async(e.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    EXPECT_EQ(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    ibv_port_attr pa{};
    EXPECT_EQ(ibv_query_port(e.ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_DOWN);
    l.sync();
    ev = wait_async(e.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    ibv_ack_async_event(&ev);
    EXPECT_EQ(ibv_query_port(e.ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    end e(4096, fast_fail());
    const info r = e.join(l);
    control_ok("port_down emu0 1");
    ibv_async_event ev = wait_async(e.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    ibv_ack_async_event(&ev);
    expect_retry_exceeded(e, r);
    l.sync();
    control_ok("port_up emu0 1");
    ev = wait_async(e.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    ibv_ack_async_event(&ev);
    control_ok("device_fatal");
    ev = wait_async(e.ctx);
    EXPECT_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
    ibv_ack_async_event(&ev);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_CASE("memlock: registering beyond RLIMIT_MEMLOCK fails with ENOMEM, lax memlock lets it") {
  fabric f;
  auto a = [](const line&) {
    rlimit rl{};
    EXPECT_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
    rl.rlim_cur = 256 << 10;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur) rl.rlim_cur = rl.rlim_max;
    EXPECT_EQ(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
    ibv_context* c = open_device();
    ibv_pd* pd = ibv_alloc_pd(c);
    void* big = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = 0;
    EXPECT(ibv_reg_mr(pd, big, 1 << 20, int(kRemote)) == nullptr);
    EXPECT_EQ(errno, ENOMEM);
    ibv_mr* m1 = ibv_reg_mr(pd, big, 64 << 10, int(kRemote));
    ibv_mr* m2 = ibv_reg_mr(pd, static_cast<char*>(big) + (64 << 10), 64 << 10, int(kRemote));
    EXPECT(m1 && m2);
    control_ok("lax memlock");
    ibv_mr* m3 = ibv_reg_mr(pd, big, 1 << 20, int(kRemote));
    EXPECT(m3 != nullptr);
    ibv_dereg_mr(m3);
    ibv_dereg_mr(m2);
    ibv_dereg_mr(m1);
    ibv_dealloc_pd(pd);
    ibv_close_device(c);
    return 0;
  };
  check_all_passed(run_children({a}));
}

TEST_CASE("SEND lands in the posted receive's buffer, longer than it: LOC_LEN_ERR and REM_INV_REQ_ERR") {
  fabric f;
  auto target = [](const line& l) {
    end e(8192);
    EXPECT_EQ(e.post_recv(1, e.buf, 4096), 0);
    EXPECT_EQ(e.post_recv(2, e.buf + 4096, 4096), 0);
    e.join(l);
    ibv_wc wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 1000);
    EXPECT_EQ(wc.wr_id, 1);
    EXPECT((wc.wc_flags & IBV_WC_WITH_IMM) != 0);
    EXPECT_EQ(be32toh(wc.imm_data), 99u);
    EXPECT(filled(e.buf, 1000, 2));
    wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(wc.wr_id, 2);
    EXPECT_EQ(e.state(), IBV_QPS_ERR);
    l.sync();
    return 0;
  };
  auto source = [](const line& l) {
    end e(8192);
    e.join(l);
    fill(e.buf, 1000, 2);
    ibv_sge s{uintptr_t(e.buf), 1000, e.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htobe32(99);
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(e.qp, &wr, &bad), 0);
    EXPECT_EQ(poll1(e.cq).status, IBV_WC_SUCCESS);
    s.length = 8192;
    wr.opcode = IBV_WR_SEND;
    wr.wr_id = 2;
    EXPECT_EQ(ibv_post_send(e.qp, &wr, &bad), 0);
    const ibv_wc wc = poll1(e.cq);
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(wc.wr_id, 2);
    // RDMA read is not emulated: refused at post time.
    wr.opcode = IBV_WR_RDMA_READ;
    EXPECT_EQ(ibv_post_send(e.qp, &wr, &bad), EINVAL);
    EXPECT(bad == &wr);
    l.sync();
    return 0;
  };
  check_all_passed(run_children({target, source}));
}

TEST_SUITE_END();
