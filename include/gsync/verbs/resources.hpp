#pragma once
/// \file
/// The verbs objects a link is built from, each owning what it holds: `device` (an opened port:
/// its context and protection domain), `registered` (page-aligned memory registered with the
/// device), and `queue_pair` (an RC queue pair with its own completion queue and completion
/// channel, whose descriptor a mesh polls). Moving a queue pair through RESET -> INIT -> RTR -> RTS
/// takes the peer's `qp_address`, exchanged through the store. Set-up code, non-templated.

#include "gsync/verbs/discovery.hpp"
#include "gsync/verbs/user_memory.hpp"

#if GSYNC_HAVE_VERBS
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gsync/core/error.hpp"

namespace gsync::verbs {

/// What a peer needs to reach one queue pair and write into its ring (published through the
/// store, both ways, before either side moves its queue pair to RTR).
struct qp_address {
  std::uint32_t qpn = 0;         ///< queue pair number
  std::uint32_t psn = 0;         ///< first packet sequence number the queue pair sends with
  std::uint16_t lid = 0;         ///< InfiniBand LID (0 on Ethernet)
  std::uint8_t ethernet = 0;     ///< RoCE: address by GID, with a GRH
  std::uint8_t mtu = 0;          ///< active MTU (ibv_mtu)
  std::uint8_t gid[16] = {};     ///< source GID (RoCE, or routed InfiniBand)
  std::int32_t gid_index = -1;   ///< -1: no GRH (InfiniBand within a subnet)
  std::uint64_t ring_addr = 0;   ///< the ring this side reads: the peer writes its frames there
  std::uint32_t ring_rkey = 0;
  std::uint32_t ring_bytes = 0;
  std::uint64_t credit_addr = 0; ///< where the peer writes how much of this side's ring it freed
  std::uint32_t credit_rkey = 0;
  std::uint32_t recv_depth = 0;  ///< receive requests this side keeps posted
};

/// The text of a `ibv_wc_status` (the library's, when loaded).
inline std::string wc_status_text(const library& lib, int status) {
  const char* s = lib.wc_status_str(static_cast<ibv_wc_status>(status));
  return s ? s : "status " + std::to_string(status);
}

/// Why a registration failed with ENOMEM, when the locked-memory limit is the likely cause.
inline std::string memlock_hint(int e) {
  if (e != ENOMEM && e != EPERM) return {};
  rlimit r{};
  if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return {};
  return " (RLIMIT_MEMLOCK is " + std::to_string(r.rlim_cur / 1024) +
         " KiB: registered memory is locked; raise it with `ulimit -l unlimited`, `memlock` in "
         "/etc/security/limits.conf, or `docker run --ulimit memlock=-1:-1`)";
}

/// An opened port: context, protection domain, and the port's facts. Owns both. Made shared
/// (its links and the user buffers registered with it keep it).
class device : public std::enable_shared_from_this<device> {
 public:
  device(const library& lib, const port_info& port) : lib_(&lib), port_(port) {
    int n = 0;
    ibv_device** list = lib.get_device_list(&n);
    if (list == nullptr) throw error(errc::system, "verbs: device " + port.device + " is gone (no device list)");
    for (int i = 0; i < n && !ctx_; ++i)
      if (const char* name = lib.get_device_name(list[i]); name && port.device == name) ctx_ = lib.open_device(list[i]);
    const int e = errno;
    lib.free_device_list(list);
    if (!ctx_) throw error(errc::system, "verbs: cannot open " + port.device + ": " + std::strerror(e));
    pd_ = lib.alloc_pd(ctx_);
    if (!pd_) {
      const int e2 = errno;
      lib.close_device(ctx_);
      throw error(errc::system, "verbs: ibv_alloc_pd on " + port.device + ": " + std::strerror(e2));
    }
    // The port's address as it is now, on this context (a subnet manager may have moved the LID
    // since discovery; a RoCE GID table may have changed).
    ibv_port_attr pa{};
    if (lib.query_port(ctx_, static_cast<std::uint8_t>(port_.port), &pa) == 0) {
      port_.lid = port_.ethernet ? 0 : pa.lid;
      port_.active_mtu = pa.active_mtu;
    }
    if (port_.gid_index >= 0) lib.query_gid(ctx_, static_cast<std::uint8_t>(port_.port), port_.gid_index, &port_.gid);
    // Asynchronous events (port or queue pair errors) are read without blocking.
    const int fl = ::fcntl(ctx_->async_fd, F_GETFL);
    if (fl >= 0) ::fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
  }
  device(const device&) = delete;
  device& operator=(const device&) = delete;
  ~device() {
    if (pd_) lib_->dealloc_pd(pd_);
    if (ctx_) lib_->close_device(ctx_);
  }

  const library& lib() const noexcept { return *lib_; }
  ibv_context* context() const noexcept { return ctx_; }
  ibv_pd* pd() const noexcept { return pd_; }
  const port_info& port() const noexcept { return port_; }
  /// The descriptor asynchronous events arrive on (readable when one is queued).
  int async_fd() const noexcept { return ctx_->async_fd; }

  /// A registration of the user's `bytes` with this device (a live one covering them, or a new
  /// one), alive while the result is; see verbs/user_memory.hpp.
  std::shared_ptr<const user_region> register_user(std::span<const std::byte> bytes) const {
    return regions_.add(bytes, [&] {
      return std::make_shared<const user_region>(*lib_, pd_, shared_from_this(), bytes, port_.name(), &memlock_hint);
    });
  }
  /// The user buffers registered with this device, by address (the link looks payloads up).
  const region_registry& regions() const noexcept { return regions_; }

  /// Reads the asynchronous events queued on the device without blocking, and keeps what they
  /// say: a fatal one for the device or this port (every link on it is lost), or one for a queue
  /// pair (that link is lost). Informational ones (port active, address changes) are dropped.
  void watch() const {
    std::lock_guard lk(m_);
    ibv_async_event a{};
    while (lib_->get_async_event(ctx_, &a) == 0) {
      const char* t = lib_->event_type_str(a.event_type);
      const std::string text = std::string(t ? t : "asynchronous event " + std::to_string(a.event_type)) + " on " + port_.name();
      switch (a.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
          if (a.element.qp) qp_errors_.emplace_back(a.element.qp->qp_num, text);
          break;
        case IBV_EVENT_DEVICE_FATAL:
        case IBV_EVENT_CQ_ERR:
          if (fatal_.empty()) fatal_ = text;
          break;
        case IBV_EVENT_PORT_ERR:
          if (static_cast<int>(a.element.port_num) == port_.port && fatal_.empty()) fatal_ = text;
          break;
        default:
          break;
      }
      lib_->ack_async_event(&a);
    }
  }
  /// Why queue pair `qpn` cannot go on, from the events seen ("" while nothing says so).
  std::string failed(std::uint32_t qpn) const {
    std::lock_guard lk(m_);
    if (!fatal_.empty()) return fatal_;
    for (const auto& [q, t] : qp_errors_)
      if (q == qpn) return t;
    return {};
  }

 private:
  const library* lib_;
  port_info port_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  mutable std::mutex m_;  // the events seen (watched from the links' threads)
  mutable std::string fatal_;
  mutable std::vector<std::pair<std::uint32_t, std::string>> qp_errors_;
  mutable region_registry regions_;
};

/// Page-aligned memory registered with a device (zeroed). Owns both.
class registered {
 public:
  registered() = default;
  /// `bytes` of memory the peer may write (`remote_write`) or only this side uses.
  registered(const device& d, std::size_t bytes, bool remote_write) : lib_(&d.lib()), bytes_(bytes) {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t len = (bytes + page - 1) / page * page;
    mem_ = std::aligned_alloc(page, len);
    if (!mem_) throw error(errc::system, "verbs: cannot allocate " + std::to_string(len) + " bytes to register");
    std::memset(mem_, 0, len);
    const int access = IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);
    mr_ = d.lib().reg_mr(d.pd(), mem_, len, access);
    if (!mr_) {
      const int e = errno;
      std::free(mem_);
      mem_ = nullptr;
      throw error(errc::system, "verbs: cannot register " + std::to_string(len) + " bytes with " + d.port().device + ": " +
                                    std::strerror(e) + memlock_hint(e));
    }
  }
  registered(registered&& o) noexcept : lib_(o.lib_), mem_(std::exchange(o.mem_, nullptr)), mr_(std::exchange(o.mr_, nullptr)), bytes_(o.bytes_) {}
  registered& operator=(registered&& o) noexcept {
    if (this != &o) {
      release();
      lib_ = o.lib_, mem_ = std::exchange(o.mem_, nullptr), mr_ = std::exchange(o.mr_, nullptr), bytes_ = o.bytes_;
    }
    return *this;
  }
  ~registered() { release(); }

  std::byte* data() const noexcept { return static_cast<std::byte*>(mem_); }
  std::size_t size() const noexcept { return bytes_; }
  std::uint32_t lkey() const noexcept { return mr_->lkey; }
  std::uint32_t rkey() const noexcept { return mr_->rkey; }
  std::uint64_t addr() const noexcept { return reinterpret_cast<std::uintptr_t>(mem_); }

 private:
  void release() noexcept {
    if (mr_) lib_->dereg_mr(mr_);
    if (mem_) std::free(mem_);
    mr_ = nullptr, mem_ = nullptr;
  }
  const library* lib_ = nullptr;
  void* mem_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Settings a queue pair is made and connected with.
struct qp_settings {
  int send_depth = 128;  ///< send requests outstanding at most
  int recv_depth = 256;  ///< receive requests kept posted
  int timeout = 18;      ///< local ACK timeout: 4.096 us * 2^timeout per try (GSYNC_IB_TIMEOUT)
  int retry_cnt = 7;     ///< tries after the first (GSYNC_IB_RETRY_CNT)
  int max_inline = 64;   ///< bytes a send request may carry inline
};

/// An RC queue pair with its own completion queue and completion channel (see the file comment).
class queue_pair {
 public:
  queue_pair() = default;
  queue_pair(const device& d, const qp_settings& s) : lib_(&d.lib()), dev_(&d), s_(s) {
    chan_ = lib_->create_comp_channel(d.context());
    if (!chan_) fail("ibv_create_comp_channel");
    const int fl = ::fcntl(chan_->fd, F_GETFL);
    if (fl < 0 || ::fcntl(chan_->fd, F_SETFL, fl | O_NONBLOCK) != 0) fail("fcntl(O_NONBLOCK) on the completion channel");
    cq_ = lib_->create_cq(d.context(), s.send_depth + s.recv_depth + 16, nullptr, chan_, 0);
    if (!cq_) fail("ibv_create_cq");
    ibv_qp_init_attr a{};
    a.send_cq = cq_;
    a.recv_cq = cq_;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 0;
    a.cap.max_send_wr = static_cast<std::uint32_t>(s.send_depth);
    a.cap.max_recv_wr = static_cast<std::uint32_t>(s.recv_depth);
    a.cap.max_send_sge = 2;  // a zero-copy write: the header from the mirror, the payload from a user buffer
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = static_cast<std::uint32_t>(s.max_inline);
    qp_ = lib_->create_qp(d.pd(), &a);
    if (!qp_) fail("ibv_create_qp (RC, " + std::to_string(s.send_depth) + " send / " + std::to_string(s.recv_depth) + " receive requests)");
    s_.max_inline = static_cast<int>(a.cap.max_inline_data);  // what the device granted
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    init.pkey_index = 0;
    init.port_num = static_cast<std::uint8_t>(d.port().port);
    init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (lib_->modify_qp(qp_, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
      fail("ibv_modify_qp to INIT");
  }
  queue_pair(const queue_pair&) = delete;
  queue_pair& operator=(const queue_pair&) = delete;
  queue_pair(queue_pair&& o) noexcept { take(o); }
  queue_pair& operator=(queue_pair&& o) noexcept {
    if (this != &o) release(), take(o);
    return *this;
  }
  ~queue_pair() { release(); }

  ibv_qp* qp() const noexcept { return qp_; }
  ibv_cq* cq() const noexcept { return cq_; }
  std::uint32_t qpn() const noexcept { return qp_ ? qp_->qp_num : 0; }
  /// The completion channel's descriptor: readable once a completion arrives on an armed queue.
  int fd() const noexcept { return chan_ ? chan_->fd : -1; }
  const qp_settings& settings() const noexcept { return s_; }

  /// This side's half of the connection (the ring fields are the link's to fill).
  qp_address address(std::uint32_t psn) const {
    qp_address a;
    const port_info& p = dev_->port();
    a.qpn = qpn();
    a.psn = psn & 0xffffff;
    a.lid = p.lid;
    a.ethernet = p.ethernet ? 1 : 0;
    a.mtu = static_cast<std::uint8_t>(p.active_mtu);
    a.gid_index = p.gid_index;
    std::memcpy(a.gid, p.gid.raw, 16);
    a.recv_depth = static_cast<std::uint32_t>(s_.recv_depth);
    return a;
  }

  /// INIT -> RTR -> RTS towards `peer`, sending from `my_psn`.
  void connect(const qp_address& peer, std::uint32_t my_psn) {
    const port_info& p = dev_->port();
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTR;
    r.path_mtu = static_cast<ibv_mtu>(std::min<int>(p.active_mtu, peer.mtu));
    r.dest_qp_num = peer.qpn;
    r.rq_psn = peer.psn;
    r.max_dest_rd_atomic = 1;
    r.min_rnr_timer = 12;  // 0.64 ms before a sender retries a write that found no receive posted
    r.ah_attr.port_num = static_cast<std::uint8_t>(p.port);
    r.ah_attr.dlid = peer.lid;
    if (peer.ethernet || peer.gid_index >= 0 || p.gid_index >= 0) {
      r.ah_attr.is_global = 1;
      std::memcpy(r.ah_attr.grh.dgid.raw, peer.gid, 16);
      r.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(p.gid_index < 0 ? 0 : p.gid_index);
      r.ah_attr.grh.hop_limit = 255;
    }
    if (lib_->modify_qp(qp_, &r,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                            IBV_QP_MIN_RNR_TIMER) != 0)
      fail("ibv_modify_qp to RTR");
    ibv_qp_attr t{};
    t.qp_state = IBV_QPS_RTS;
    t.sq_psn = my_psn & 0xffffff;
    t.timeout = static_cast<std::uint8_t>(s_.timeout);
    t.retry_cnt = static_cast<std::uint8_t>(s_.retry_cnt);
    t.rnr_retry = 7;  // a write that finds no receive posted waits for one: credits bound them, this is the backstop
    t.max_rd_atomic = 1;
    if (lib_->modify_qp(qp_, &t,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
      fail("ibv_modify_qp to RTS");
  }

  /// Reads and acknowledges the completion channel's queued events without blocking; true if any
  /// (the queue is then disarmed).
  bool take_events() noexcept {
    bool any = false;
    ibv_cq* c = nullptr;
    void* ctx = nullptr;
    while (lib_->get_cq_event(chan_, &c, &ctx) == 0) any = true, ++unacked_;
    if (unacked_ >= 64) lib_->ack_cq_events(cq_, unacked_), unacked_ = 0;
    return any;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    const int e = errno;
    throw error(errc::system, "verbs: " + what + " on " + dev_->port().name() + ": " + std::strerror(e));
  }
  void take(queue_pair& o) noexcept {
    lib_ = o.lib_, dev_ = o.dev_, s_ = o.s_, unacked_ = std::exchange(o.unacked_, 0u);
    chan_ = std::exchange(o.chan_, nullptr), cq_ = std::exchange(o.cq_, nullptr), qp_ = std::exchange(o.qp_, nullptr);
  }
  void release() noexcept {
    if (qp_) lib_->destroy_qp(qp_);
    if (cq_) {
      if (chan_) take_events();
      if (unacked_) lib_->ack_cq_events(cq_, unacked_);
      lib_->destroy_cq(cq_);
    }
    if (chan_) lib_->destroy_comp_channel(chan_);
    qp_ = nullptr, cq_ = nullptr, chan_ = nullptr, unacked_ = 0;
  }

  const library* lib_ = nullptr;
  const device* dev_ = nullptr;
  qp_settings s_;
  ibv_comp_channel* chan_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  unsigned unacked_ = 0;  // completion events read and not yet acknowledged (acknowledged in batches)
};

}  // namespace gsync::verbs

#endif  // GSYNC_HAVE_VERBS
