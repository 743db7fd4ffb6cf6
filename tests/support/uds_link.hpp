#pragma once
// A link type written outside include/, the way a program adds a medium to gsync's mesh: frames
// over a Unix-domain stream socket between two ranks of one host, with its traits and its
// endpoint (which listens on an abstract socket named in the store, dials the lower ranks and
// accepts the higher). Nothing here edits or reaches into the library beyond the `link` and
// `link_endpoint` concepts and the mesh it is listed in:
//   gsync::communicator<gsync::transport::mesh<outside::uds_link, gsync::transport::tcp_link>>
// (test_outside_link.cpp runs the conformance sweeps through it).

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gsync/bootstrap/store_client.hpp>
#include <gsync/core/concepts.hpp>
#include <gsync/core/error.hpp>
#include <gsync/transport/frame.hpp>
#include <gsync/transport/links/link_setup.hpp>

namespace outside {

using gsync::link_io;
using gsync::transport::frame_header;
using gsync::transport::send_op;

// Payload and header bytes every uds_link of this process has written: proof that a mesh's data
// went through the outside link.
inline std::atomic<std::uint64_t> uds_bytes_sent{0};

// One end of a Unix-domain stream socket. Frames go out one header + payload writev at a time;
// a header is read whole before its payload (kept across calls while it arrives in pieces).
class uds_link {
 public:
  using frame = frame_header;
  static constexpr std::string_view name = "uds";
  std::deque<send_op> q;

  uds_link() = default;
  uds_link(uds_link&& o) noexcept : q(std::move(o.q)), fd_(std::exchange(o.fd_, -1)), hdr_got_(std::exchange(o.hdr_got_, 0)) {}
  uds_link& operator=(uds_link&& o) noexcept {
    if (this != &o) close(), q = std::move(o.q), fd_ = std::exchange(o.fd_, -1), hdr_got_ = std::exchange(o.hdr_got_, 0);
    return *this;
  }
  ~uds_link() { close(); }

  void attach(int fd) noexcept {
    close();
    fd_ = fd;
  }
  int fd() const noexcept { return fd_; }

  void post(const frame& h, const std::byte* p, std::size_t n) { q.push_back(send_op{h, p, n, 0}); }
  bool post_direct(const frame&, const std::byte*, std::size_t) noexcept { return false; }
  link_io pump(std::size_t& completed) noexcept {
    link_io io;
    while (!q.empty()) {
      send_op& op = q.front();
      iovec iov[2];
      int k = 0;
      std::size_t d = op.done;
      if (d < sizeof(frame_header)) {
        iov[k++] = {reinterpret_cast<char*>(&op.h) + d, sizeof(frame_header) - d};
        d = 0;
      } else {
        d -= sizeof(frame_header);
      }
      if (op.n > d) iov[k++] = {const_cast<std::byte*>(op.p) + d, op.n - d};
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<std::size_t>(k);
      const ssize_t w = ::sendmsg(fd_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) io.err = errno;
        return io;
      }
      io.bytes += static_cast<std::size_t>(w);
      uds_bytes_sent.fetch_add(static_cast<std::uint64_t>(w), std::memory_order_relaxed);
      op.done += static_cast<std::size_t>(w);
      if (op.done < sizeof(frame_header) + op.n) return io;  // the socket is full
      q.pop_front();
      ++completed;
    }
    return io;
  }

  link_io try_header(frame& h, std::byte*, std::size_t) noexcept {
    link_io io;
    while (hdr_got_ < sizeof h) {
      const ssize_t r = ::recv(fd_, reinterpret_cast<char*>(&h) + hdr_got_, sizeof h - hdr_got_, MSG_DONTWAIT);
      if (r > 0) {
        hdr_got_ += static_cast<std::size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) io.err = link_io::closed;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) io.err = errno;
      return io;
    }
    hdr_got_ = 0;
    io.done = true;
    return io;
  }
  link_io try_payload(std::byte* dst, std::size_t want, std::size_t, gsync::detail::function_ref<void(std::span<const std::byte>)>*) noexcept {
    link_io io;
    for (;;) {
      const ssize_t r = ::recv(fd_, dst, want, MSG_DONTWAIT);
      if (r > 0) io.bytes = static_cast<std::size_t>(r);
      else if (r == 0) io.err = link_io::closed;
      else if (errno == EINTR) continue;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) io.err = errno;
      return io;
    }
  }
  void end_read() noexcept {}
  bool peek_header(frame& h) const noexcept {
    return fd_ >= 0 && hdr_got_ == 0 && ::recv(fd_, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof h);
  }
  bool peer_gone() const noexcept {
    pollfd f{fd_, POLLIN, 0};
    if (::poll(&f, 1, 0) <= 0) return false;
    char b;
    return ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::size_t hdr_got_ = 0;
};

// The rank-wide part: a listening abstract socket, named under "outside/uds/R" in the store ("-"
// when this rank has no same-host peer). The higher rank of a pair dials and sends its rank; the
// lower accepts, setting aside connections of other ranks until their turn. Both connect a pair
// exactly when both ranks are on one host and both listen.
class uds_endpoint {
 public:
  explicit uds_endpoint(const gsync::transport::link_setup& s) {
    local_ = s.topo->ranks_on(s.topo->host_of(s.rank));
    std::string rec = "-";
    if (local_.size() > 1) {
      name_ = "gsync-test-uds-" + std::to_string(s.nonce) + "-" + std::to_string(s.rank);
      listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a = address(name_);
      if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), length(name_)) != 0 || ::listen(listen_fd_, 256) != 0)
        throw gsync::error(gsync::errc::system, "uds: listen: " + std::string(std::strerror(errno)));
      rec = name_;
    }
    s.store->set("outside/uds/" + std::to_string(s.rank), rec, s.dl);
  }
  uds_endpoint(const uds_endpoint&) = delete;
  uds_endpoint& operator=(const uds_endpoint&) = delete;
  ~uds_endpoint() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    for (auto& [r, fd] : early_) ::close(fd);
  }

  bool connect(const gsync::transport::link_setup& s, int peer, uds_link& l) {
    if (listen_fd_ < 0 || std::find(local_.begin(), local_.end(), peer) == local_.end()) return false;
    const std::string theirs = s.store->get("outside/uds/" + std::to_string(peer), s.dl);
    if (theirs == "-") return false;
    int fd = s.rank > peer ? dial(theirs, s.rank) : accept_from(peer, s.dl);
    l.attach(fd);
    ++linked_;
    return true;
  }
  void finish(const gsync::transport::link_setup&) {}
  std::string report() const { return linked_ ? "Unix-domain sockets to " + std::to_string(linked_) + " peers" : std::string(); }

 private:
  static sockaddr_un address(const std::string& name) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof a.sun_path - 2));  // abstract: sun_path[0] == 0
    return a;
  }
  static socklen_t length(const std::string& name) {
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::min(name.size(), sizeof(sockaddr_un::sun_path) - 2));
  }
  static int dial(const std::string& name, int me) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = address(name);
    const std::int32_t who = me;
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), length(name)) != 0 || ::send(fd, &who, sizeof who, MSG_NOSIGNAL) != sizeof who) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      throw gsync::error(gsync::errc::system, "uds: dial " + name + ": " + std::strerror(e));
    }
    return fd;
  }
  int accept_from(int peer, gsync::deadline dl) {
    for (;;) {
      if (auto it = early_.find(peer); it != early_.end()) {
        const int fd = it->second;
        early_.erase(it);
        return fd;
      }
      pollfd p{listen_fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(dl - std::chrono::steady_clock::now()).count();
      if (left <= 0) throw gsync::error(gsync::errc::timeout, "uds: rank " + std::to_string(peer) + " did not dial");
      if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::int32_t who = -1;
      pollfd r{fd, POLLIN, 0};
      if (::poll(&r, 1, 5000) <= 0 || ::recv(fd, &who, sizeof who, MSG_WAITALL) != sizeof who || who < 0 || early_.count(who)) {
        ::close(fd);
        continue;
      }
      early_[who] = fd;
    }
  }

  std::vector<int> local_;
  std::string name_;
  int listen_fd_ = -1;
  std::map<int, int> early_;  // rank -> connection accepted before its turn
  int linked_ = 0;
};

}  // namespace outside

template <>
struct gsync::link_traits<outside::uds_link> {
  static constexpr link_costs costs{"uds", cost_model::tcp_loopback(), /*shared_memory=*/false};
  static constexpr link_wait wait = link_wait::descriptor;
  static constexpr bool reads_in_place = false;
  static constexpr std::size_t payload_align = 1;
  using endpoint = outside::uds_endpoint;
};
static_assert(gsync::link<outside::uds_link>);
static_assert(gsync::transport::link_endpoint<outside::uds_endpoint, outside::uds_link>);
