#pragma once
/// \file
/// TCP transport over Asio sockets: one connection per pair of ranks, established through the
/// rendezvous store, then driven non-blocking by a small poll(2) progress loop.
///
/// Setup (non-templated, runs once): rank 0 starts the store server; every rank listens on an
/// ephemeral port of its chosen address, publishes `ip port` under `gsync/addr/R`, connects to every
/// lower rank (sending a hello frame naming itself and the job's nonce) and accepts from every
/// higher rank (checking the hello: a connection from another job or with garbage is closed,
/// logged, and setup goes on). Sockets get TCP_NODELAY and 4 MiB kernel buffers.
///
/// Data path: `post_send` appends (header, pointer, length) to the peer's queue and writes what
/// the kernel takes at once; the rest is written whenever a blocking call waits. A blocking call
/// polls the socket it reads from plus every socket with queued bytes, so sends to one neighbour
/// progress while receiving from another (the ring's full-duplex overlap). Payloads go straight
/// from/to the caller's memory; only `recv_stream` reads through one bounded staging buffer
/// (256 KiB per communicator) so that a reduction can consume pieces while they are cache-hot.
///
/// Failure: any error (peer closed, timeout, mismatch) shuts every connection of this rank down, so
/// neighbours blocked on it fail promptly too instead of waiting for their own timeouts, and the
/// transport refuses further use.

#include <sys/socket.h>
#include <sys/uio.h>

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gsync/bootstrap/interface.hpp"
#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/bootstrap/store.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/aligned_buffer.hpp"
#include "gsync/detail/socket.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync::transport {

/// Tunables of the TCP transport.
struct tcp_options {
  int socket_buffer_bytes = 4 << 20;          ///< SO_SNDBUF / SO_RCVBUF of data sockets
  std::size_t staging_bytes = 256 << 10;      ///< recv_stream staging buffer
  /// Microseconds a wait polls without sleeping before it blocks in poll(2) (GSYNC_SPIN_US).
  /// -1: automatic, 50 us when this host runs no more ranks than it has cores, else 0 (spinning
  /// on an oversubscribed host would steal the core from the rank being waited for).
  int spin_us = -1;
};

/// TCP transport endpoint of one rank (see file comment).
class tcp {
 public:
  /// Joins the job described by `li`: starts the store on rank 0, connects the full mesh.
  /// Every wait of the setup ends at now + `timeout`.
  tcp(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, tcp_options opt = {})
      : rank_(li.rank), size_(li.size), log_(log), opt_(opt), acc_(io_) {
    const deadline dl = std::chrono::steady_clock::now() + timeout;
    if (auto b = detail::env("GSYNC_SOCKET_BUFFER")) {
      auto v = detail::parse_size(*b);
      if (!v || *v > (1u << 30)) throw error(errc::invalid_argument, "GSYNC_SOCKET_BUFFER='" + *b + "' is not a size such as 4M");
      opt_.socket_buffer_bytes = static_cast<int>(*v);  // 0: leave the kernel's autotuning alone
    }
    auto master = detail::resolve_host(io_, li.master_addr);
    if (rank_ == 0) {
      std::string bind = master.is_loopback() ? master.to_string() : (master.is_v6() ? "::" : "0.0.0.0");
      server_ = std::make_unique<bootstrap::store_server>(bind, li.master_port, log_);
    }
    store_ = std::make_unique<bootstrap::store_client>(li.master_addr, li.master_port, dl);
    const auto me = bootstrap::pick_listen_address(io_, master);
    listen(me);
    // The job nonce ties every connection to this job: a stale rank of an earlier job on the same
    // port cannot slip in.
    if (rank_ == 0) store_->set("gsync/nonce", std::to_string(std::random_device{}() ^ (std::uint64_t{std::random_device{}()} << 32)), dl);
    nonce_ = std::stoull(store_->get("gsync/nonce", dl));
    const auto my_ep = acc_.local_endpoint();
    store_->set("gsync/addr/" + std::to_string(rank_), my_ep.address().to_string() + " " + std::to_string(my_ep.port()), dl);
    log_.info("rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " (local rank " + std::to_string(li.local_rank) +
              ", from " + li.source + " variables) transport tcp, listening on " + my_ep.address().to_string() + ":" +
              std::to_string(my_ep.port()) + ", store at " + li.master_addr + ":" + std::to_string(li.master_port));
    peers_.resize(static_cast<std::size_t>(size_));
    connect_lower(dl);
    accept_higher(dl);
    acc_.close();
    // Rank 0 serves the store: it must not return (and possibly tear the store down) before every
    // rank has finished looking up addresses.
    if (store_->add("gsync/ready", 1, dl) == size_) store_->set("gsync/ready_all", "1", dl);
    if (rank_ == 0) store_->wait({"gsync/ready_all"}, dl);
    staging_ = detail::make_aligned_bytes(opt_.staging_bytes);
    if (auto sp = detail::env_int("GSYNC_SPIN_US", 0, 1000000)) opt_.spin_us = static_cast<int>(*sp);
    if (opt_.spin_us < 0) {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      opt_.spin_us = li.local_size > 0 && static_cast<unsigned>(li.local_size) <= cores ? 50 : 0;
    }
    log_.info("connected to " + std::to_string(size_ - 1) + " peers over TCP");
  }
  tcp(const tcp&) = delete;
  tcp& operator=(const tcp&) = delete;
  ~tcp() {
    for (auto& p : peers_)
      if (p.s && p.s->is_open()) {
        asio::error_code ig;
        p.s->close(ig);
      }
  }

  int rank() const noexcept { return rank_; }                  ///< this rank
  int size() const noexcept { return size_; }                  ///< world size
  std::string_view name() const noexcept { return "tcp"; }     ///< transport name for logs
  bootstrap::store_client& store() { return *store_; }         ///< the job's rendezvous store

  /// Queues [src, src+n) for `peer` and writes what the kernel accepts now.
  void post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
    check_usable();
    check_peer(peer);
    auto& c = peers_[peer];
    c.q.push_back(send_op{make_header(id, n), src, n, 0});
    ++queued_;
    if (c.q.size() == 1) pump(peer);
  }

  /// Receives the next message from `peer` into dst (header checked against id and n).
  void recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
    check_usable();
    check_peer(peer);
    frame_header h;
    const std::size_t got = read_header(peer, h, dst, n, dl, id);
    check(h, id, n, peer);
    read_exact(peer, dst + got, n - got, dl, id);
  }

  /// Receives the next message from `peer` through the staging buffer, handing `consume` pieces
  /// whose sizes are multiples of `align`.
  void recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
    check_usable();
    check_peer(peer);
    if (align == 0 || align > opt_.staging_bytes) align = 1;
    const std::size_t cap = opt_.staging_bytes - opt_.staging_bytes % align;
    frame_header h;
    std::size_t have = read_header(peer, h, staging_.get(), std::min(cap, n), dl, id);
    check(h, id, n, peer);
    std::size_t remaining = n - have;
    for (bool first = true; first || remaining > 0; first = false) {
      if (!first || have == 0) {
        std::size_t got = read_some(peer, staging_.get() + have, std::min(cap - have, remaining), dl, id);
        have += got;
        remaining -= got;
      }
      const std::size_t ready = have - have % align;
      if (ready == 0) continue;
      consume(std::span<const std::byte>(staging_.get(), ready));
      if (have > ready) std::memmove(staging_.get(), staging_.get() + ready, have - ready);
      have -= ready;
    }
  }

  /// Writes out every queued send (the kernel then owns the bytes).
  void flush_sends(deadline dl) {
    check_usable();
    while (queued_ > 0) wait_progress(-1, dl, message_id{});
  }

 private:
  struct send_op {
    frame_header h;
    const std::byte* p;
    std::size_t n;
    std::size_t done;  // bytes written, header included
  };
  struct peer_conn {
    std::unique_ptr<asio::ip::tcp::socket> s;
    int fd = -1;
    std::deque<send_op> q;
  };
  struct hello {
    std::uint32_t magic = 0x48595347u;  // "GSYH"
    std::uint32_t version = 1;
    std::int32_t rank = -1;
    std::int32_t size = 0;
    std::uint64_t nonce = 0;
  };

  void listen(const asio::ip::address& addr) {
    asio::ip::tcp::endpoint ep(addr, 0);
    asio::error_code ec;
    acc_.open(ep.protocol(), ec);
    if (!ec) acc_.bind(ep, ec);
    if (!ec) acc_.listen(std::max(64, size_), ec);
    if (ec) throw error(errc::system, "rank " + std::to_string(rank_) + ": cannot listen on " + addr.to_string() + ": " + ec.message());
    acc_.non_blocking(true);
  }

  void connect_lower(deadline dl) {
    for (int j = 0; j < rank_; ++j) {
      const std::string a = store_->get("gsync/addr/" + std::to_string(j), dl);
      const auto sp = a.find(' ');
      if (sp == std::string::npos) throw error(errc::mismatch, "bad address record for rank " + std::to_string(j) + ": " + a);
      asio::ip::tcp::endpoint ep(asio::ip::make_address(a.substr(0, sp)),
                                 static_cast<std::uint16_t>(std::stoi(a.substr(sp + 1))));
      auto s = std::make_unique<asio::ip::tcp::socket>(detail::connect_retry(io_, ep, dl, "rank " + std::to_string(j)));
      detail::tune_data_socket(*s, opt_.socket_buffer_bytes);
      hello h;
      h.rank = rank_;
      h.size = size_;
      h.nonce = nonce_;
      detail::write_all(s->native_handle(), &h, sizeof h, dl, "rank " + std::to_string(j));
      peers_[j].fd = s->native_handle();
      peers_[j].s = std::move(s);
    }
  }

  void accept_higher(deadline dl) {
    int missing = size_ - 1 - rank_;
    while (missing > 0) {
      auto s = std::make_unique<asio::ip::tcp::socket>(io_);
      if (!detail::accept_until(acc_, *s, dl)) {
        std::string who;
        for (int j = rank_ + 1; j < size_; ++j)
          if (!peers_[j].s) who += (who.empty() ? "" : ", ") + std::to_string(j);
        throw error(errc::timeout, "rank " + std::to_string(rank_) + ": timed out waiting for ranks " + who + " to connect");
      }
      detail::tune_data_socket(*s, opt_.socket_buffer_bytes);
      hello h;
      std::string from;
      try {
        asio::error_code ig;
        from = s->remote_endpoint(ig).address().to_string();
        // A stranger gets a few seconds to identify itself, never the whole setup deadline.
        const deadline hdl = std::min(dl, std::chrono::steady_clock::now() + std::chrono::seconds(5));
        detail::read_all(s->native_handle(), &h, sizeof h, hdl, "connecting peer " + from);
      } catch (const error& e) {
        log_.warn("rejected a connection from " + from + ": " + e.what());
        continue;
      }
      if (h.magic != hello{}.magic || h.version != 1 || h.size != size_ || h.nonce != nonce_ || h.rank <= rank_ ||
          h.rank >= size_ || peers_[h.rank].s) {
        log_.warn("rejected a connection from " + from + ": not a rank of this job (bad hello)");
        continue;
      }
      peers_[h.rank].fd = s->native_handle();
      peers_[h.rank].s = std::move(s);
      --missing;
    }
  }

  // Writes as much of the peer's queue as the kernel takes now; several queued messages go out in
  // one sendmsg. Returns when the queue is empty or the socket would block.
  void pump(int peer) {
    auto& c = peers_[peer];
    while (!c.q.empty()) {
      iovec iov[32];
      int k = 0;
      for (auto it = c.q.begin(); it != c.q.end() && k + 2 <= 32; ++it) {
        std::size_t d = it->done;
        if (d < sizeof(frame_header)) {
          iov[k++] = {reinterpret_cast<char*>(&it->h) + d, sizeof(frame_header) - d};
          d = 0;
        } else {
          d -= sizeof(frame_header);
        }
        if (it->n > d) iov[k++] = {const_cast<std::byte*>(it->p) + d, it->n - d};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<std::size_t>(k);
      ssize_t w = ::sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) +
                                  " lost while sending (" + detail::errno_text(errno) + "): the peer exited or crashed");
      }
      auto left = static_cast<std::size_t>(w);
      while (left > 0) {
        auto& op = c.q.front();
        const std::size_t need = sizeof(frame_header) + op.n - op.done;
        const std::size_t take = std::min(need, left);
        op.done += take;
        left -= take;
        if (op.done == sizeof(frame_header) + op.n) {
          c.q.pop_front();
          --queued_;
        } else {
          break;
        }
      }
    }
  }

  // Reads the next frame header and, in the same system call when available, up to `n` payload
  // bytes into dst (never more than the expected message, so a well-formed stream is never
  // over-read; a malformed one fails the header check and poisons the transport anyway).
  // Returns the payload bytes read.
  std::size_t read_header(int peer, frame_header& h, std::byte* dst, std::size_t n, deadline dl, message_id id) {
    std::size_t got = 0;
    auto* hb = reinterpret_cast<char*>(&h);
    while (got < sizeof h) {
      iovec iov[2] = {{hb + got, sizeof h - got}, {dst, n}};
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = n ? 2 : 1;
      ssize_t r = ::recvmsg(peers_[peer].fd, &mh, MSG_DONTWAIT);
      if (r > 0) {
        got += static_cast<std::size_t>(r);
        continue;
      }
      if (r == 0) lost_while_receiving(peer, id, 0);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
      wait_progress(peer, dl, id);
    }
    return got - sizeof h;
  }

  [[noreturn]] void lost_while_receiving(int peer, message_id id, int err) {
    if (err == 0)
      fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                                " closed its connection (it exited, crashed or failed) during op #" + std::to_string(id.seq));
    fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) +
                              " lost while receiving (" + detail::errno_text(err) + ")");
  }

  // Reads up to n bytes from peer, waiting (and progressing sends) until at least one arrives.
  std::size_t read_some(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
    if (n == 0) return 0;
    for (;;) {
      ssize_t r = ::recv(peers_[peer].fd, dst, n, MSG_DONTWAIT);
      if (r > 0) return static_cast<std::size_t>(r);
      if (r == 0) lost_while_receiving(peer, id, 0);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
      wait_progress(peer, dl, id);
    }
  }

  void read_exact(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
    while (n > 0) {
      std::size_t got = read_some(peer, dst, n, dl, id);
      dst += got;
      n -= got;
    }
  }

  // Blocks until `in_peer` (if >= 0) is readable, pumping every queue whose socket is writable.
  void wait_progress(int in_peer, deadline dl, message_id id) {
    pfds_.clear();
    pidx_.clear();
    if (in_peer >= 0) {
      pfds_.push_back({peers_[in_peer].fd, POLLIN, 0});
      pidx_.push_back(in_peer);
    }
    for (int p = 0; p < size_; ++p)
      if (!peers_[p].q.empty()) {
        if (p == in_peer) pfds_[0].events |= POLLOUT;
        else {
          pfds_.push_back({peers_[p].fd, POLLOUT, 0});
          pidx_.push_back(p);
        }
      }
    if (pfds_.empty()) return;
    int r = 0;
    if (opt_.spin_us > 0) {  // short busy poll: a reply often comes within microseconds
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(opt_.spin_us);
      do r = ::poll(pfds_.data(), pfds_.size(), 0);
      while (r == 0 && std::chrono::steady_clock::now() < until);
    }
    if (r == 0) r = ::poll(pfds_.data(), pfds_.size(), detail::ms_left(dl));
    if (r < 0) {
      if (errno == EINTR) return;
      fail(errc::system, "poll: " + detail::errno_text(errno));
    }
    if (r == 0) {
      if (std::chrono::steady_clock::now() < dl) return;
      std::string what = in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to accept queued data");
      std::string blocked;
      for (int p = 0; p < size_; ++p)
        if (!peers_[p].q.empty()) blocked += (blocked.empty() ? "" : ", ") + std::to_string(p);
      fail(errc::timeout, "rank " + std::to_string(rank_) + ": op #" + std::to_string(id.seq) + " timed out waiting for " + what +
                              (blocked.empty() ? "" : " (sends still queued to ranks " + blocked + ")"));
    }
    for (std::size_t i = 0; i < pfds_.size(); ++i)
      if ((pfds_[i].revents & (POLLOUT | POLLERR | POLLHUP)) && !peers_[pidx_[i]].q.empty()) pump(pidx_[i]);
  }

  void check(const frame_header& h, message_id id, std::size_t n, int peer) {
    try {
      check_header(h, id, n, rank_, peer);
    } catch (const error& e) {
      fail(e.kind(), e.what());
    }
  }
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ": invalid peer rank " + std::to_string(peer));
  }
  void check_usable() const {
    if (broken_) throw error(broken_kind_, "rank " + std::to_string(rank_) + ": communicator unusable after an earlier error: " + broken_msg_);
  }
  [[noreturn]] void fail(errc kind, const std::string& msg) {
    if (!broken_) {
      broken_ = true;
      broken_kind_ = kind;
      broken_msg_ = msg;
      for (auto& p : peers_) {
        if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
        p.q.clear();  // unsent bytes may belong to buffers the caller frees after the error
      }
      queued_ = 0;
      log_.warn(msg);
    }
    throw error(kind, msg);
  }

  int rank_, size_;
  logger log_;
  tcp_options opt_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acc_;
  std::unique_ptr<bootstrap::store_server> server_;
  std::unique_ptr<bootstrap::store_client> store_;
  std::uint64_t nonce_ = 0;
  std::vector<peer_conn> peers_;
  std::size_t queued_ = 0;
  detail::aligned_bytes staging_;
  std::vector<pollfd> pfds_;
  std::vector<int> pidx_;
  bool broken_ = false;
  errc broken_kind_ = errc::system;
  std::string broken_msg_;
};

}  // namespace gsync::transport
