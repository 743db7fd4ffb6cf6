#pragma once
/// \file
/// `transport::start_connector`: a rank's dials and accepts of mesh connections, run on Asio's
/// io_context with one deadline. Every dial to a lower rank goes at once (asynchronous connect,
/// retried on a timer while the listener is not up, the job-key handshake's client side, the
/// hello), and the higher ranks' dials are accepted asynchronously and admitted as their bytes
/// arrive (`admission`). One timer applies the deadline, the admission's time limits and the
/// question to the store whether a rank was lost. It owns the dials under way; which pairs
/// connect, and what becomes of a connection once through, is the mesh's (connect.ipp).

#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/socket_base.hpp>
#include <sys/socket.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/bootstrap/socket.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/transport/mesh/admission.hpp"
#include "gsync/transport/mesh/records.hpp"

namespace gsync::transport {

class start_connector {
 public:
  using socket = detail::net::tcp_socket;
  /// A lower rank to dial.
  struct target {
    int rank = -1;
    asio::ip::tcp::endpoint ep;
  };
  /// What the mesh decides.
  struct hooks {
    std::function<void(socket&)> tune;                            ///< options of a new data socket
    std::function<void(int rank, socket&)> dialed;                ///< a dial is through: take the socket
    std::function<bool(const records::hello&, socket&)> admit;    ///< an accepted connection said hello
    std::function<std::string()> awaited;                         ///< ranks still to dial this one ("": none)
    std::function<void()> check_lost;                             ///< throws when the store names a rank lost
  };
  /// `adm`: where accepted connections wait to be admitted (it outlives this object, and keeps
  /// those not through when it ends); `hello`: this rank's, sent after the handshake;
  /// `retry_refused`: a refused dial is retried (the listener may not be up yet), else it means
  /// the peer is gone (errc::peer_lost).
  start_connector(asio::io_context& io, const bootstrap::auth::job_key& key, admission& adm, const records::hello& hello, logger log,
                  std::string congestion, bool retry_refused, hooks h)
      : io_(io), key_(key), adm_(adm), hello_(hello), log_(std::move(log)), congestion_(std::move(congestion)), retry_refused_(retry_refused),
        h_(std::move(h)), tick_(io) {}
  start_connector(const start_connector&) = delete;
  start_connector& operator=(const start_connector&) = delete;

  /// Dials every target and, with `acc`, accepts and admits dials until none is awaited; by `dl`.
  /// Throws the first error (a timeout names what was missing).
  void run(const std::vector<target>& targets, detail::net::tcp_acceptor* acc, deadline dl) {
    dl_ = dl;
    acc_ = acc;
    dials_.clear();
    for (const target& t : targets) dials_.push_back(std::make_unique<dial>(io_, t));
    pending_ = dials_.size();
    for (auto& d : dials_) start(*d);
    if (acc_) {
      accept_next();
      arm_admission();
    }
    tick();
    check_done();
    io_.restart();
    io_.run();
    io_.restart();
    if (err_) std::rethrow_exception(err_);
  }

 private:
  struct dial {
    target t;
    std::unique_ptr<socket> s;
    detail::net::steady_timer retry;
    std::chrono::milliseconds backoff{2};
    std::string last = "no attempt";
    std::unique_ptr<bootstrap::auth::client_steps> hs;
    std::string out;
    std::array<std::uint8_t, bootstrap::auth::challenge_bytes> in{};
    std::size_t got = 0;  // bytes of `in` read
    dial(asio::io_context& io, const target& t_) : t(t_), retry(io) {}
  };
  std::string who(const dial& d) const { return "rank " + std::to_string(d.t.rank); }
  std::string where(const dial& d) const { return d.t.ep.address().to_string() + ":" + std::to_string(d.t.ep.port()); }

  // Runs a handler's body; what it throws ends the run with that error.
  template <class F>
  void guarded(F&& f) noexcept {
    if (over_) return;
    try {
      f();
    } catch (...) {
      stop(std::current_exception());
    }
  }
  void stop(std::exception_ptr e) noexcept {
    if (e && !err_) err_ = e;
    if (over_) return;
    over_ = true;
    asio::error_code ig;
    tick_.cancel();
    if (acc_) acc_->cancel(ig);
    if (accepting_) accepting_->close(ig);
    for (auto& d : dials_) {
      d->retry.cancel();
      if (d->s) d->s->close(ig);
    }
    adm_.cancel_waits();
  }
  void check_done() {
    if (!over_ && pending_ == 0 && (!acc_ || h_.awaited().empty())) stop(nullptr);
  }

  // The dial side.
  // Every function that asks Asio for more returns at once once the run is over: a request made
  // after stop() cancelled the others would keep io_context::run waiting with no timer to end it.
  void start(dial& d) {
    if (over_) return;
    d.s = std::make_unique<socket>(io_);
    asio::error_code ec;
    d.s->open(d.t.ep.protocol(), ec);
    if (bootstrap::out_of_descriptors(ec)) throw bootstrap::fd_exhausted("connecting to " + who(d), 0);
    if (ec) throw error(errc::system, "socket(): " + ec.message());
    detail::set_cloexec(d.s->native_handle());
    detail::set_congestion(d.s->native_handle(), congestion_);  // before the SYN; a refusal is reported by tune
    d.s->async_connect(d.t.ep, [this, &d](const asio::error_code& e) { guarded([&] { connected(d, e); }); });
  }
  void again(dial& d, const std::string& why) {
    if (over_) return;
    if (std::chrono::steady_clock::now() + d.backoff >= dl_)
      throw error(errc::timeout, "could not connect to " + who(d) + " at " + where(d) + " before the deadline (last error: " + why + ")");
    asio::error_code ig;
    d.s->close(ig);
    d.retry.expires_after(d.backoff);
    d.backoff = std::min(2 * d.backoff, std::chrono::milliseconds(100));
    d.retry.async_wait([this, &d](const asio::error_code& e) {
      if (!e) guarded([&] { start(d); });
    });
  }
  void connected(dial& d, const asio::error_code& e) {
    if (e == asio::error::operation_aborted) return;
    if (e) {
      d.last = e.message();
      const bool refused = e == asio::error::connection_refused || e == asio::error::connection_reset;
      if (refused && !retry_refused_)
        throw error(errc::peer_lost, "connection to " + who(d) + " at " + where(d) + " refused (" + d.last + ")");
      return again(d, d.last);
    }
    h_.tune(*d.s);
    d.hs = std::make_unique<bootstrap::auth::client_steps>(key_);
    d.out = d.hs->hello();
    d.got = 0;
    write_out(d, [this, &d] { read_challenge(d); });
  }
  // The handshake's few bytes go with non-blocking calls and a wait for readiness when the socket
  // has no room or no bytes: Asio's composed reads and writes would cost every translation unit
  // that includes the mesh more to compile, for messages of tens of bytes.
  template <class Then>
  void write_out(dial& d, Then then) {
    if (const int err = detail::send_some(d.s->native_handle(), d.out); err == EAGAIN) {
      d.s->async_wait(asio::socket_base::wait_write, [this, &d, then](const asio::error_code& e) {
        guarded([&] {
          if (e) return lost_in_handshake(d, e);
          write_out(d, then);
        });
      });
      return;
    } else if (err != 0) {
      return lost_in_handshake(d, asio::error_code(err, asio::system_category()));
    }
    then();
  }
  void read_challenge(dial& d) {
    while (d.got < d.in.size()) {
      const ssize_t r = ::recv(d.s->native_handle(), d.in.data() + d.got, d.in.size() - d.got, MSG_DONTWAIT);
      if (r > 0) {
        d.got += static_cast<std::size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        d.s->async_wait(asio::socket_base::wait_read, [this, &d](const asio::error_code& e) {
          guarded([&] {
            if (e) return lost_in_handshake(d, e);
            read_challenge(d);
          });
        });
        return;
      }
      return lost_in_handshake(d, r == 0 ? asio::error::eof : asio::error_code(errno, asio::system_category()));
    }
    d.out = d.hs->prove(d.in.data(), who(d));  // throws errc::auth_failed for another key
    d.out.append(reinterpret_cast<const char*>(&hello_), sizeof hello_);
    write_out(d, [this, &d] {
      h_.dialed(d.t.rank, *d.s);
      d.s.reset();
      --pending_;
      check_done();
    });
  }
  // Closed before the handshake ended, by a listener that was up a moment ago: the peer may have
  // dropped this connection to make room among a stranger's (admission.hpp). Dial again; a peer
  // that is gone refuses the next connection.
  void lost_in_handshake(dial& d, const asio::error_code& e) {
    if (e == asio::error::operation_aborted) return;
    adm_.rejected().warn(log_, "dialing " + who(d) + ": the connection was closed during the handshake (" + e.message() + "); dialing again");
    again(d, "closed during the handshake: " + e.message());
  }

  // The accept side.
  void accept_next() {
    if (over_) return;
    accepting_ = std::make_unique<socket>(io_);
    acc_->async_accept(*accepting_, [this](const asio::error_code& e) { guarded([&] { accepted(e); }); });
  }
  void accepted(const asio::error_code& e) {
    if (e == asio::error::operation_aborted) return;
    if (e) {
      if (bootstrap::out_of_descriptors(e)) throw bootstrap::fd_exhausted("accepting a peer's connection", 0);
      return accept_next();  // a connection that went away before it was taken
    }
    detail::set_cloexec(accepting_->native_handle());
    h_.tune(*accepting_);
    asio::error_code ig;
    std::string from = accepting_->remote_endpoint(ig).address().to_string();
    adm_.take(std::move(accepting_), key_, std::move(from), log_);
    advance();
    accept_next();
  }
  void advance() {
    adm_.advance(log_, h_.admit);
    arm_admission();
    check_done();
  }
  void arm_admission() {
    if (over_) return;
    adm_.arm([this](const asio::error_code& e) {
      if (e != asio::error::operation_aborted) guarded([&] { advance(); });
    });
  }

  // Every 50 ms: the deadline, the admission's time limits, and (every 250 ms) the store.
  void tick() {
    if (over_) return;
    tick_.expires_after(std::chrono::milliseconds(50));
    tick_.async_wait([this](const asio::error_code& e) {
      if (e) return;
      guarded([&] {
        const auto now = std::chrono::steady_clock::now();
        if (now >= next_lost_check_) {
          next_lost_check_ = now + std::chrono::milliseconds(250);
          h_.check_lost();
        }
        if (acc_) advance();
        if (over_) return;
        if (now >= dl_) throw error(errc::timeout, timeout_text());
        tick();
      });
    });
  }
  std::string timeout_text() const {
    std::string dialing;
    for (const auto& d : dials_)
      if (d->s) dialing += (dialing.empty() ? "" : ", ") + std::to_string(d->t.rank) + " (" + d->last + ")";
    const std::string awaited = acc_ ? h_.awaited() : std::string();
    return "timed out " + (dialing.empty() ? std::string() : "dialing ranks " + dialing) + (dialing.empty() || awaited.empty() ? "" : " and ") +
           (awaited.empty() ? std::string() : "waiting for ranks " + awaited + " to connect");
  }

  asio::io_context& io_;
  const bootstrap::auth::job_key& key_;
  admission& adm_;
  records::hello hello_;
  logger log_;
  std::string congestion_;
  bool retry_refused_;
  hooks h_;
  detail::net::steady_timer tick_;
  deadline dl_{};
  detail::net::tcp_acceptor* acc_ = nullptr;
  std::unique_ptr<socket> accepting_;  // the socket the next accept fills
  std::vector<std::unique_ptr<dial>> dials_;
  std::size_t pending_ = 0;  // dials not through yet
  bool over_ = false;
  std::exception_ptr err_;
  std::chrono::steady_clock::time_point next_lost_check_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
};

}  // namespace gsync::transport
