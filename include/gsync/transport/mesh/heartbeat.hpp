#pragma once
/// \file
/// `transport::heartbeat`: liveness without a FIN, for the host mesh (transport/mesh/host_mesh.hpp).
///
/// A rank that is stopped (SIGSTOP, a debugger), whose host vanished or whose link is cut sends
/// no FIN: its peers' sockets stay open and a collective waiting on it would wait for its whole
/// timeout, and a rank idle between operations would never hear of it. So every rank of a mesh
/// runs one thread of its own that exchanges small beats with its two neighbours on the ring
/// of ranks (rank r dials r+1 mod N on a listener of its own, and accepts r-1), each over a
/// connection of its own, authenticated with the job key and tied to the job's nonce:
///   - a beat every `period` (liveness / 10) both ways on each connection;
///   - silence from a neighbour for `dead_after` (six tenths of the liveness) means it stopped
///     answering: the thread reports it (`news::silent`), closes that connection, and sends the
///     news to its other neighbour, which passes it on: the news goes round the ring both ways
///     (it is cut where the dead rank was), so every rank hears within milliseconds;
///   - a neighbour that closes its connection without a goodbye exited or was killed: reported
///     and passed on the same way, but not as `silent` (the data connections report such a
///     death in an operation; a rank between operations learns of it here, see `health()`);
///   - a rank whose mesh is destroyed says goodbye first, and is no longer watched.
/// The thread does nothing else: it answers while the rank computes, so silence means the
/// process itself is not running. A peer still in its set-up answers already: the thread starts
/// with the listener, before the rank's record is published (a predecessor's hello is checked
/// against the job's nonce once this rank knows it); it dials its successor only when the mesh's
/// set-up has ended (`ring`). A neighbour not connected yet is not watched, and a successor that
/// refuses the connection until `dead_after` (at least 2 s) has left already: not a loss.
/// Strangers on the listener get the handshake's time limit and are dropped.
///
/// The thread runs an Asio io_context of its own: the listener's accepts, the dial and its
/// retries, each connection's reads and writes (non-blocking calls when Asio says the socket is
/// ready: Asio's composed reads and writes would cost every file that compiles the set-up more),
/// the beat, each connection's time limit; `ring()` and the destructor post to it.

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/socket.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/transport/mesh/heartbeat_conn.hpp"

namespace gsync::transport {

/// The heartbeat of one rank of a host mesh (see the file comment). Non-templated set-up code.
class heartbeat {
 public:
  /// What the heartbeat learned about a rank; delivered on the heartbeat's thread.
  struct news {
    int rank = -1;        ///< the rank concerned
    bool silent = false;  ///< true: it stopped answering; false: it left without a goodbye
    std::string why;      ///< one line for the error message
  };
  using news_fn = std::function<void(const news&)>;

  /// The wire format, after the job-key handshake of bootstrap/auth.hpp: the dialer sends a
  /// `hello`, then both sides send messages (a `msg_header`, then `len` bytes of text), in host
  /// byte order (a job's ranks share one).
  enum kind : std::uint32_t {
    beat = 1,         ///< I am alive
    lost_silent = 2,  ///< `rank` stopped answering (text: why)
    bye = 3,          ///< this rank leaves: stop watching it
    lost_exited = 4,  ///< `rank` closed its connection without a goodbye (text: why)
  };
  /// Every message's header.
  struct msg_header {
    std::uint32_t magic = 0x42485347u;  ///< "GSHB"
    std::uint32_t k = beat;             ///< a `kind`
    std::int32_t rank = -1;             ///< lost_*: the rank lost
    std::uint32_t len = 0;              ///< bytes of text that follow (at most max_text)
  };
  /// The dialer's first words after the handshake.
  struct hello {
    std::uint32_t magic = 0x4c485347u;  ///< "GSHL"
    std::uint32_t version = 1;          ///< of this format
    std::int32_t rank = -1;             ///< the dialer (the acceptor's predecessor on the ring)
    std::int32_t size = 0;              ///< ranks of the job
    std::uint64_t nonce = 0;            ///< the job's nonce
  };
  static constexpr std::uint32_t max_text = 512;  ///< longest text of a message
  /// Takes the first whole message off `in` into `h` and `text`: 1 when it did, 0 when `in` holds
  /// no whole message yet, -1 when `in` starts with something that is not a message (bad magic,
  /// text too long): the connection is then dropped.
  static int take_message(std::string& in, msg_header& h, std::string& text) {
    if (in.size() < sizeof(msg_header)) return 0;
    std::memcpy(&h, in.data(), sizeof h);
    if (h.magic != msg_header{}.magic || h.len > max_text) return -1;
    if (in.size() < sizeof h + h.len) return 0;
    text.assign(in, sizeof h, h.len);
    in.erase(0, sizeof h + h.len);
    return 1;
  }

  /// Opens the listener on `addr` (a port of its own, close-on-exec) and starts the thread,
  /// which answers neighbours from now on. `key` (the job's) outlives this object. Throws
  /// errc::system when no socket or thread can be had.
  heartbeat(const asio::ip::address& addr, int rank, int size, std::chrono::milliseconds liveness, const bootstrap::auth::job_key& key, logger log);
  heartbeat(const heartbeat&) = delete;
  heartbeat& operator=(const heartbeat&) = delete;
  /// Says goodbye to the neighbours (best effort, without blocking) and joins the thread.
  ~heartbeat();

  std::uint16_t port() const noexcept { return port_; }  ///< the listener's port, for the rank's record

  /// Set-up has ended: watch the ring of this job. `succ_addr:succ_port` is the successor's
  /// heartbeat listener (from its record; port 0: it has none, and it is not dialed); `nonce`
  /// the job's; `on_news` must not block or throw. Returns once the connection to the successor
  /// is made (its thread answers from its set-up on: a round trip), so that a rank that leaves at
  /// once is watched all the same; or once a dial failed (the successor's listener is gone: it
  /// has closed its communicator), the retries going on until `dead_after` (at least 2 s); or
  /// at most that long after a dial that hangs.
  void ring(const std::string& succ_addr, std::uint16_t succ_port, std::uint64_t nonce, news_fn on_news);

  /// How often a beat goes, and after how long a silence a neighbour counts as stopped.
  std::chrono::milliseconds period() const noexcept { return period_; }
  std::chrono::milliseconds dead_after() const noexcept { return dead_after_; }

 private:
  using conn = heartbeat_conn;
  using clock = std::chrono::steady_clock;
  static constexpr std::size_t max_pending = 16;  // strangers being authenticated at once
  static constexpr std::chrono::milliseconds stranger_time{2000};  // a stranger's handshake, at most

  // What a handler of the thread is for. One handler type for all (`on_event`): each type
  // instantiates Asio's operations anew, in every file that compiles the set-up.
  enum class ev { read, write, timer, connect, broke, reap, beat, dial, accept, accept_retry, ring, stop };
  struct on_event {
    heartbeat* hb;
    conn* c;       // the connection it concerns (counted in its `waits`), or none
    ev what;
    unsigned gen;  // ev::timer: the connection's timer_gen when it was asked
    void operator()(const asio::error_code& e = {}) const { hb->handle(*this, e); }
  };

  // The thread and its events (heartbeat.ipp).
  void run() noexcept;
  void handle(const on_event& h, const asio::error_code& e);
  void start_ring();
  void stop_now();
  void beat_all();
  void wait_accept();
  void accept_some();
  void dial();
  void retry_dial(clock::time_point at);
  void settle_dial();
  void learn(int rank, bool silent, const std::string& why, const conn* from);
  // One connection (heartbeat_flow.ipp).
  conn& add_conn();
  void ask(conn& c, ev what);  // posts `what` for c
  void watch_read(conn& c);
  void watch_write(conn& c);
  void arm_timer(conn& c, clock::time_point at);
  void on_connected(conn& c, const asio::error_code& e);
  void on_readable(conn& c);
  void on_timer(conn& c);
  bool drive_dialer(conn& c, clock::time_point now);
  bool drive_admitter(conn& c, clock::time_point now);
  void went_up(conn& c, clock::time_point now);
  bool read_messages(conn& c, clock::time_point now);
  bool pump(conn& c);  // false: it broke, and was dropped
  void broke(conn& c);
  void send(conn& c, kind k, int rank = -1, const std::string& text = {});
  void finish(conn& c);  // drops c; a dial that failed before its handshake is tried again
  void drop(conn& c);
  std::string neighbour(const conn& c) const;

  int rank_, size_;
  logger log_;
  std::chrono::milliseconds period_, dead_after_;
  const bootstrap::auth::job_key* key_;
  std::uint16_t port_ = 0;
  std::mutex m_;  // given_, dial_settled_
  std::condition_variable settled_cv_;
  bool dial_settled_ = false;  // the successor's connection is up, or will not be
  struct {
    std::string succ_addr;
    std::uint16_t succ_port = 0;
    std::uint64_t nonce = 0;
    news_fn on_news;
  } given_;         // what ring() hands over
  bool bye_ = true;  // say goodbye when stopping (not when the owner unwinds from an error); set before the stop is posted
  // The io_context first: it dies last, after every socket and timer that uses it. Thread-owned
  // from here, once the thread runs (the constructor arms the first waits before it starts).
  asio::io_context io_;
  asio::ip::tcp proto_;
  detail::net::tcp_acceptor acc_;
  detail::net::steady_timer beat_timer_, dial_timer_, accept_retry_;
  std::list<conn> conns_;  // stable addresses: handlers name them
  bool stopping_ = false;
  bool ringing_ = false;  // ring() was called (as seen by the thread)
  bool dialed_ = false;   // the successor's connection was made once
  std::string succ_addr_;
  std::uint16_t succ_port_ = 0;
  std::uint64_t nonce_ = 0;
  news_fn on_news_;
  clock::time_point next_dial_{};     // a refused dial is retried then
  clock::time_point dial_give_up_{};  // and not after then
  std::set<int> known_;  // ranks whose loss this rank has heard of (reported once, passed on once)
  std::thread thread_;   // last: joined by the destructor before anything else dies
};

}  // namespace gsync::transport

#include "gsync/transport/mesh/heartbeat.ipp"       // the thread and its events
#include "gsync/transport/mesh/heartbeat_flow.ipp"  // one connection
