#pragma once
/// \file
/// Mutual challenge-response authentication of every connection of a job (store and data
/// connections) on a shared job key, so that no process outside the job can join it, feed it bytes
/// or read its data.
///
/// The key (at least 16 bytes) comes from the program (launch_info::job_key), else GSYNC_JOB_KEY,
/// else a file (GSYNC_JOB_KEY_FILE, readable by its owner only), else the descriptor gsyncrun passes
/// (GSYNC_JOB_KEY_FD; gsyncrun generates 32 random bytes per job), else from_mpi's generated key.
/// Closed by default: a job whose store or listeners are reachable beyond loopback refuses to start
/// without a key unless GSYNC_ALLOW_UNAUTHENTICATED=1 (`require_key`).
/// What it protects: who may connect. It does not encrypt: anyone who can read the traffic on the
/// wire sees the gradients.
/// Handshake, run by the side that connected (the initiator, "client") and the side that accepted
/// (the "server") before any other byte:
///
///   client -> server:  magic "GSYNAUT1" (8 bytes) | nonce_c (16 random bytes)
///   server -> client:  nonce_s (16 random bytes)  | HMAC-SHA256(key, "gsync-auth-v1 server" | nonce_c | nonce_s)
///   client -> server:  HMAC-SHA256(key, "gsync-auth-v1 client" | nonce_s | nonce_c)
///
/// Each side proves it holds the key by a MAC over the other side's fresh nonce, so a recorded
/// exchange cannot be replayed, and the role labels stop a MAC from being reflected back. The MAC
/// is OpenSSL's (libcrypto), compared in constant time; nothing cryptographic is written here.
///
/// Without a key the same exchange runs with all-zero MACs (no authentication), so a keyed rank and a keyless one never connect, and a stray
/// connection that does not speak the protocol is still rejected at its first bytes. A build
/// without libcrypto (GSYNC_HAVE_OPENSSL undefined) refuses to run with a key rather than run
/// unauthenticated.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#if defined(GSYNC_HAVE_OPENSSL)
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif

#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/random.hpp"
#include "gsync/bootstrap/socket.hpp"

namespace gsync::bootstrap::auth {

inline constexpr std::size_t nonce_bytes = 16;  ///< bytes of each side's challenge
inline constexpr std::size_t mac_bytes = 32;    ///< HMAC-SHA256
inline constexpr std::array<char, 8> magic = {'G', 'S', 'Y', 'N', 'A', 'U', 'T', '1'};
/// Bytes the client sends first (magic and its nonce).
inline constexpr std::size_t hello_bytes = magic.size() + nonce_bytes;
/// Bytes of the server's answer (its nonce and its MAC).
inline constexpr std::size_t challenge_bytes = nonce_bytes + mac_bytes;

using nonce = std::array<std::uint8_t, nonce_bytes>;  ///< a challenge
using mac = std::array<std::uint8_t, mac_bytes>;      ///< a proof

/// Shortest key accepted: a guessable secret would authenticate nothing.
inline constexpr std::size_t min_key_bytes = 16;

namespace detail_key {
// Trailing newlines and blanks are not part of a key kept in a file (`echo KEY > file`).
inline std::string trimmed(std::string k) {
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r' || k.back() == ' ' || k.back() == '\t')) k.pop_back();
  return k;
}
// The key held by file `fd` from its start (at most 4096 bytes), trailing blanks dropped; `what`
// names the variable that gave it, for the errors.
inline std::string read_key(int fd, const std::string& what) {
  std::string k(4097, '\0');
  std::size_t got = 0;
  for (ssize_t r; got < k.size() && (r = ::pread(fd, k.data() + got, k.size() - got, static_cast<off_t>(got))) != 0;) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw error(errc::invalid_argument, what + ": read: " + detail::errno_text(errno));
    got += static_cast<std::size_t>(r);
  }
  if (got > 4096) throw error(errc::invalid_argument, what + " holds more than 4096 bytes: not a key");
  k.resize(got);
  return trimmed(std::move(k));
}
// GSYNC_JOB_KEY_FILE: a regular file of this user, readable by nobody else (as ssh demands of a
// private key), so that a key on a shared home directory is not everyone's.
inline std::string from_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw error(errc::invalid_argument, "GSYNC_JOB_KEY_FILE=" + path + ": cannot open: " + detail::errno_text(errno));
  struct closer { int fd; ~closer() { ::close(fd); } } c{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw error(errc::invalid_argument, "GSYNC_JOB_KEY_FILE=" + path + ": " + detail::errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw error(errc::invalid_argument, "GSYNC_JOB_KEY_FILE=" + path + " is not a regular file");
  if (st.st_uid != ::geteuid())
    throw error(errc::invalid_argument, "GSYNC_JOB_KEY_FILE=" + path + " belongs to another user (uid " + std::to_string(st.st_uid) + "): the key file must be yours");
  if (st.st_mode & 077)
    throw error(errc::invalid_argument, "GSYNC_JOB_KEY_FILE=" + path + " may be read or written by other users (mode " +
                                            std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
                                            "): run chmod 600 " + path);
  return read_key(fd, "GSYNC_JOB_KEY_FILE=" + path);
}
// GSYNC_JOB_KEY_FD: the memory file gsyncrun filled with the key (tools/gsyncrun.cpp), read once
// per process and closed, so that neither the rank's environment nor its children hold the key.
// The descriptor must still be that file: a child of a rank inherits the variable, not the file.
inline std::string from_fd(int fd) {
  static std::mutex m;
  static std::optional<std::string> cached;  // read once: later communicators of the process reuse it
  std::lock_guard<std::mutex> g(m);
  if (cached) return *cached;
  const std::string what = "GSYNC_JOB_KEY_FD=" + std::to_string(fd);
  char link[128] = {};
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(proc.c_str(), link, sizeof link - 1);
  if (n <= 0 || std::string_view(link, static_cast<std::size_t>(n)).find("gsync-job-key") == std::string_view::npos)
    throw error(errc::invalid_argument, what + " is not gsyncrun's key descriptor (the process inherited the variable "
                                        "but not the descriptor: a child of a rank, or a wrapper that closed descriptors); "
                                        "give the key with GSYNC_JOB_KEY or GSYNC_JOB_KEY_FILE");
  struct closer { int fd; ~closer() { ::close(fd); } } c{fd};
  cached = read_key(fd, what);
  return *cached;
}
}  // namespace detail_key

/// The job key. Empty: no authentication.
class job_key {
 public:
  job_key() = default;
  /// A key of the given bytes (empty: none). Throws invalid_argument for a key shorter than
  /// `min_key_bytes`, and without libcrypto for any key.
  explicit job_key(std::string k) : k_(std::move(k)) {
    if (!k_.empty() && k_.size() < min_key_bytes)
      throw error(errc::invalid_argument, "the job key is " + std::to_string(k_.size()) + " bytes long; gsync needs at least " +
                                              std::to_string(min_key_bytes) + " (for example: head -c 32 /dev/urandom | base64)");
#if !defined(GSYNC_HAVE_OPENSSL)
    if (!k_.empty())
      throw error(errc::invalid_argument,
                  "a job key is set but this program was built without libcrypto (OpenSSL), so connections "
                  "cannot be authenticated; rebuild with OpenSSL found by CMake, or unset GSYNC_JOB_KEY");
#endif
  }
  /// The key given in the program (`given`, as launch_info::job_key: "" means none), else the
  /// environment's: GSYNC_JOB_KEY, else GSYNC_JOB_KEY_FILE, else GSYNC_JOB_KEY_FD; else none.
  static job_key resolve(const std::optional<std::string>& given) {
    if (given) return job_key(*given);
    const auto e = detail::env_job_key();
    if (e.key) return job_key(*e.key);
    if (e.file) return job_key(detail_key::from_file(*e.file));
    if (e.fd) return job_key(detail_key::from_fd(*e.fd));
    return {};
  }
  /// The environment's key (see `resolve`), or none.
  static job_key from_env() { return resolve(std::nullopt); }
  bool empty() const noexcept { return k_.empty(); }  ///< true without a key

  /// MAC of `label | a | b` under the key (all zeros without a key).
  mac sign(std::string_view label, const nonce& a, const nonce& b) const {
    mac m{};
    if (k_.empty()) return m;
#if defined(GSYNC_HAVE_OPENSSL)
    std::array<std::uint8_t, 64 + 2 * nonce_bytes> msg{};
    if (label.size() > 64) throw error(errc::invalid_argument, "auth: label too long");
    std::memcpy(msg.data(), label.data(), label.size());
    std::memcpy(msg.data() + label.size(), a.data(), nonce_bytes);
    std::memcpy(msg.data() + label.size() + nonce_bytes, b.data(), nonce_bytes);
    unsigned len = 0;
    if (!HMAC(EVP_sha256(), k_.data(), static_cast<int>(k_.size()), msg.data(), label.size() + 2 * nonce_bytes, m.data(), &len) ||
        len != mac_bytes)
      throw error(errc::system, "auth: HMAC-SHA256 failed in libcrypto");
#else
    (void)label, (void)a, (void)b;  // unreachable: a key cannot be made without libcrypto
#endif
    return m;
  }
  /// Constant-time comparison of two proofs.
  static bool equal(const mac& x, const mac& y) noexcept {
#if defined(GSYNC_HAVE_OPENSSL)
    return CRYPTO_memcmp(x.data(), y.data(), mac_bytes) == 0;
#else
    return std::memcmp(x.data(), y.data(), mac_bytes) == 0;  // only all-zero proofs exist without libcrypto
#endif
  }

 private:
  std::string k_;
};

/// Closed by default: refuses (invalid_argument) a job without a key whose store or listeners are
/// reachable beyond loopback (`exposed`), unless unauthenticated runs were allowed (`allow`: the
/// program's launch_info::allow_unauthenticated, else GSYNC_ALLOW_UNAUTHENTICATED); then warns
/// once per process. `where` names the store's address for the message.
inline void require_key(const job_key& key, bool exposed, const std::optional<bool>& allow, const std::string& where, logger log) {
  if (!key.empty() || !exposed) return;
  if (!(allow ? *allow : detail::env_job_key().allow_unauthenticated))
    throw error(errc::invalid_argument,
                "no job key: this job's store (" + where + ") and connections are reachable beyond loopback, and gsync does not "
                "run unauthenticated there. Give every rank the same secret of at least 16 bytes: GSYNC_JOB_KEY=<secret>, or "
                "GSYNC_JOB_KEY_FILE=<file readable by you only, e.g. on the shared home directory under Slurm>; or start the "
                "job with gsyncrun, or through communicator::from_mpi, which generate one; or set GSYNC_ALLOW_UNAUTHENTICATED=1 "
                "to let any process that reaches these ports join the job");
  static std::atomic<bool> warned{false};  // once per process (ranks may join from several threads at once)
  if (!warned.exchange(true, std::memory_order_relaxed))
    log.warn("GSYNC_ALLOW_UNAUTHENTICATED=1 and no job key: connections are NOT authenticated, any process that can reach "
             "this job's ports (" + where + " and the ranks' listeners) can join it, read and change its data");
}

inline constexpr std::string_view server_label = "gsync-auth-v1 server";  ///< label of the server's proof
inline constexpr std::string_view client_label = "gsync-auth-v1 client";  ///< label of the client's proof

/// A fresh random challenge: the kernel's generator (getrandom, /dev/urandom), else libcrypto's.
/// The kernel's first: libcrypto's generator costs each process time to set up, paid by
/// every rank at start-up (benchmarks/results/scale/README.md). Throws errc::system when none
/// delivers: a predictable challenge would let a recorded handshake be replayed, so there is no
/// weaker fallback here.
inline nonce fresh_nonce() {
  nonce n{};
  if (detail::random::os_bytes(n.data(), n.size())) return n;
#if defined(GSYNC_HAVE_OPENSSL)
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) == 1) return n;
#endif
  throw error(errc::system, "no random bytes for the authentication challenge (neither getrandom nor /dev/urandom nor libcrypto delivered)");
}

/// The initiator's side in steps, for event loops (and the blocking `client_handshake`): send
/// `hello()`, read the server's `challenge_bytes`, send what `prove` returns.
class client_steps {
 public:
  explicit client_steps(const job_key& key) : key_(&key), nc_(fresh_nonce()) {}
  /// The first bytes to send: the magic and this side's challenge.
  std::string hello() const {
    std::string h(magic.data(), magic.size());
    h.append(reinterpret_cast<const char*>(nc_.data()), nonce_bytes);
    return h;
  }
  /// Checks the server's answer (its challenge and proof, `challenge_bytes` at `c`) and returns
  /// this side's proof. Throws errc::auth_failed when the server does not hold the same key.
  std::string prove(const std::uint8_t* c, const std::string& what) const {
    nonce ns{};
    mac ms{};
    std::memcpy(ns.data(), c, nonce_bytes);
    std::memcpy(ms.data(), c + nonce_bytes, mac_bytes);
    if (!job_key::equal(ms, key_->sign(server_label, nc_, ns)))
      throw error(errc::auth_failed, "authentication with " + what + " failed: its proof does not match this job's key "
                                     "(GSYNC_JOB_KEY differs between ranks, or it is not part of this job)");
    const mac mine = key_->sign(client_label, ns, nc_);
    return std::string(reinterpret_cast<const char*>(mine.data()), mine.size());
  }

 private:
  const job_key* key_;
  nonce nc_;
};

/// Initiator side on connected socket `s`: proves the key and checks the server's proof.
/// Throws errc::auth_failed when the server does not hold the same key (or does not speak the
/// protocol), errc::timeout / peer_lost as the socket helpers do (which run the socket's io_context).
inline void client_handshake(detail::net::tcp_socket& s, const job_key& key, deadline dl, const std::string& what) {
  const client_steps steps(key);
  const std::string h = steps.hello();
  detail::write_all(s, h.data(), h.size(), dl, what);
  std::array<std::uint8_t, challenge_bytes> c{};
  try {
    detail::read_all(s, c.data(), c.size(), dl, what);
  } catch (const error& e) {
    // A server with another key is caught below (its proof does not match ours) before it can
    // reject ours, so a close here means the other side went away (or is not a gsync endpoint).
    if (e.kind() == errc::peer_lost)
      throw error(errc::peer_lost, what + " closed the connection during the authentication handshake (it exited, "
                                   "failed, or is not a gsync endpoint)");
    throw;
  }
  const std::string proof = steps.prove(c.data(), what);
  detail::write_all(s, proof.data(), proof.size(), dl, what);
}

/// Incremental server side, for event loops (the store): feed it the bytes received so far.
class server_handshake {
 public:
  /// Outcome of `feed`.
  enum class state { need_more, done, failed };

  explicit server_handshake(const job_key& key) : key_(&key) {}

  /// Consumes handshake bytes from the front of `in` (leaving any later bytes there); appends
  /// what must be sent to `out`. On `failed`, `why()` says what was wrong.
  state feed(std::string& in, std::string& out) {
    if (stage_ == 0) {
      if (in.size() >= magic.size() && std::memcmp(in.data(), magic.data(), magic.size()) != 0)
        return fail("not a gsync connection (bad handshake magic)");
      if (in.size() < hello_bytes) return state::need_more;
      std::memcpy(nc_.data(), in.data() + magic.size(), nonce_bytes);
      in.erase(0, hello_bytes);
      ns_ = fresh_nonce();
      const mac m = key_->sign(server_label, nc_, ns_);
      out.append(reinterpret_cast<const char*>(ns_.data()), nonce_bytes);
      out.append(reinterpret_cast<const char*>(m.data()), mac_bytes);
      stage_ = 1;
    }
    if (stage_ == 1) {
      if (in.size() < mac_bytes) return state::need_more;
      mac m{};
      std::memcpy(m.data(), in.data(), mac_bytes);
      in.erase(0, mac_bytes);
      if (!job_key::equal(m, key_->sign(client_label, ns_, nc_)))
        return fail("failed authentication (wrong or missing GSYNC_JOB_KEY)");
      stage_ = 2;
    }
    return stage_ == 2 ? state::done : state::failed;
  }
  /// Why the handshake failed.
  const std::string& why() const noexcept { return why_; }

 private:
  state fail(std::string w) {
    why_ = std::move(w);
    stage_ = 3;
    return state::failed;
  }
  const job_key* key_;
  int stage_ = 0;
  nonce nc_{}, ns_{};
  std::string why_;
};

/// Blocking server side on accepted socket `s` (the socket helpers run its io_context). Returns
/// false, with the reason in `why`, when the peer does not authenticate before `dl`; the caller
/// closes and logs.
inline bool accept_handshake(detail::net::tcp_socket& s, const job_key& key, deadline dl, const std::string& what, std::string& why) {
  server_handshake hs(key);
  std::string in, out;
  bool challenged = false;  // the hello was answered; the client's proof comes next
  try {
    for (;;) {
      const std::size_t want = challenged ? mac_bytes : hello_bytes;
      std::string buf(want, '\0');
      detail::read_all(s, buf.data(), want, dl, what);
      in += buf;
      const auto st = hs.feed(in, out);
      if (!out.empty()) {
        detail::write_all(s, out.data(), out.size(), dl, what);
        out.clear();
        challenged = true;
      }
      if (st == server_handshake::state::done) return true;
      if (st == server_handshake::state::failed) {
        why = hs.why();
        return false;
      }
    }
  } catch (const error& e) {
    why = std::string("handshake: ") + e.what();
    return false;
  }
}

}  // namespace gsync::bootstrap::auth
