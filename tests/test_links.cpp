// The link types on their own (transport/links/), without a mesh: two ends of one link in this
// process, frames posted, pumped and read back byte for byte, through ring wrap-around (shared
// memory) and partial writes (TCP); liveness after the peer goes. What a new link type (CUDA IPC,
// RDMA) must also do before the conformance suite runs collectives over it.

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include <gsync/core/concepts.hpp>
#include <gsync/transport/links/link_list.hpp>
#include <gsync/transport/links/shm_link.hpp>
#include <gsync/transport/links/tcp_link.hpp>
#include <gsync/transport/links/link_port.hpp>
#include <gsync/transport/mesh.hpp>

#include "support/uds_link.hpp"

using gsync::transport::frame_header;
using gsync::transport::shm_link;
using gsync::transport::tcp_link;

namespace {

frame_header header_for(std::uint64_t seq, std::size_t n) {
  gsync::message_id id{1, seq, {}};
  return gsync::transport::make_header(id, n);
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

// What a reduction's reads hand over, summed as doubles (pieces must hold whole elements).
struct double_sum {
  double sum = 0;
  std::size_t seen = 0;
  auto reader() {
    return [this](std::span<const std::byte> piece) {
      CHECK(piece.size() % sizeof(double) == 0);
      for (std::size_t i = 0; i < piece.size() / sizeof(double); ++i) {
        double x;
        std::memcpy(&x, piece.data() + i * sizeof(double), sizeof x);
        sum += x;
      }
      seen += piece.size();
    };
  }
};

// Both ends of one shared-memory link in this process: rank 0's segment `a` (slot 1 is rank 1's
// ring to it) and rank 1's `b` (slot 0 is rank 0's ring to it); l0 is rank 0's link, l1 rank 1's.
struct shm_pair {
  static constexpr std::size_t ring = 4096;
  gsync::transport::shm::segment a, b;  // declared first: they outlive the links
  shm_link l0, l1;
  explicit shm_pair(const std::string& tag) {
    const std::string name = "/gsync-test-links-" + tag + "-" + std::to_string(::getpid());
    a = gsync::transport::shm::segment::create(name + "-a", 2, ring);
    b = gsync::transport::shm::segment::create(name + "-b", 2, ring);
    a.unlink();
    b.unlink();
    l0.attach(&b.ctl(0), b.data(0), ring, &a.ctl(1), a.data(1), ring, &b.bell());
    l1.attach(&a.ctl(1), a.data(1), ring, &b.ctl(0), b.data(0), ring, &a.bell());
  }
};

// Both ends of one TCP link over a socket pair; sv[0] is l0's socket (for bytes written by hand).
struct tcp_pair {
  int sv[2] = {-1, -1};
  tcp_link l0, l1;
  tcp_pair() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    l0.attach(sv[0]);
    l1.attach(sv[1]);
  }
};

}  // namespace

static_assert(gsync::link<tcp_link>);
static_assert(gsync::link<shm_link>);

// The concept states what the mesh's waits call, by how a link is waited for: a link written
// outside include/ with every frame call but not the descriptor (or the doorbell calls) it
// declares is refused at compile time, not at the mesh's first wait.
namespace outside {
template <gsync::link_wait W, bool Fd, bool Bell>
struct sketch_link {
  using frame = frame_header;
  static constexpr std::string_view name = "sketch";
  std::deque<gsync::transport::send_op> q;
  void post(const frame&, const std::byte*, std::size_t) {}
  bool post_direct(const frame&, const std::byte*, std::size_t) { return false; }
  gsync::link_io pump(std::size_t&) { return {}; }
  gsync::link_io try_header(frame&, std::byte*, std::size_t) { return {}; }
  gsync::link_io try_payload(std::byte*, std::size_t, std::size_t, gsync::detail::function_ref<void(std::span<const std::byte>)>*) {
    return {};
  }
  void end_read() {}
  bool peek_header(frame&) const { return false; }
  bool peer_gone() const { return false; }
  void close() {}
  int fd() const requires Fd { return -1; }
  bool ready() const requires Bell { return false; }
  std::uint32_t peer_failed() const requires Bell { return 0; }
};
}  // namespace outside
template <gsync::link_wait W, bool Fd, bool Bell>
struct gsync::link_traits<outside::sketch_link<W, Fd, Bell>> {
  static constexpr link_costs costs{"sketch", cost_model::tcp_loopback(), false};
  static constexpr link_wait wait = W;
  static constexpr bool reads_in_place = false;
  static constexpr std::size_t payload_align = 1;
};
static_assert(gsync::link<outside::sketch_link<gsync::link_wait::descriptor, true, false>>);
static_assert(!gsync::link<outside::sketch_link<gsync::link_wait::descriptor, false, true>>);  // no descriptor
static_assert(gsync::link<outside::sketch_link<gsync::link_wait::doorbell, false, true>>);
static_assert(!gsync::link<outside::sketch_link<gsync::link_wait::doorbell, true, false>>);  // no doorbell calls
static_assert(!gsync::link<std::deque<int>>);  // no traits at all

TEST_CASE("links: shared-memory link moves frames through its ring, wrapping, and reads in place") {
  shm_pair pair("frames");
  auto &l0 = pair.l0, &l1 = pair.l1;  // rank 0's link to rank 1, and rank 1's to rank 0
  auto& b = pair.b;
  REQUIRE(l0.active());
  // Sizes that straddle the stamped part, the ring's end and the ring's size (several pumps).
  for (std::size_t n : {std::size_t{0}, std::size_t{8}, std::size_t{975}, std::size_t{977}, std::size_t{3000},
                        std::size_t{10000}, std::size_t{1}, std::size_t{4095}}) {
    CAPTURE(n);
    const auto src = pattern(n, static_cast<unsigned>(n));
    const frame_header h = header_for(n + 1, n);
    std::size_t done = 0;
    if (!l0.post_direct(h, src.data(), n)) {
      l0.post(h, src.data(), n);
      l0.pump(done);
    } else {
      done = 1;
    }
    l1.expect_header();
    REQUIRE(l1.ready());
    frame_header got;
    l1.take_header(got);
    CHECK(got.seq == n + 1);
    CHECK(got.bytes == n);
    std::vector<std::byte> dst(n);
    std::size_t have = 0;
    int rounds = 0;
    while (have < n) {
      const std::size_t k = l1.read_some(dst.data() + have, n - have, 1, nullptr);
      if (k == 0) {  // the sender waits for room: pumping again continues it
        l0.pump(done);
        REQUIRE(++rounds < 100);
        continue;
      }
      have += k;
    }
    l1.end_read();
    l0.pump(done);
    CHECK(done == 1);
    CHECK(l0.q.empty());
    CHECK(dst == src);
  }
  // A reduction's read: pieces handed over where they lie, multiples of the element size.
  std::vector<double> v(700);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 0.5;
  const std::size_t n = v.size() * sizeof(double);
  std::size_t done = 0;
  l0.post(header_for(99, n), reinterpret_cast<const std::byte*>(v.data()), n);
  l0.pump(done);
  l1.expect_header();
  REQUIRE(l1.ready());
  frame_header got;
  l1.take_header(got);
  double_sum acc;
  auto consume = acc.reader();
  gsync::detail::function_ref<void(std::span<const std::byte>)> cref(consume);
  double& sum = acc.sum;
  std::size_t& seen = acc.seen;
  for (int rounds = 0; seen < n; ++rounds) {
    REQUIRE(rounds < 100);
    if (l1.read_some(nullptr, n - seen, sizeof(double), &cref) == 0) l0.pump(done);
  }
  l1.end_read();
  CHECK(sum == doctest::Approx(0.5 * 699 * 700 / 2));
  // Liveness: a peer that marks itself failed is seen at once.
  CHECK(!l0.peer_gone());
  b.bell().failed.store(2, std::memory_order_release);
  CHECK(l0.peer_gone());
}

TEST_CASE("links: TCP link writes queued frames without blocking and reports its peer's close") {
  tcp_pair pair;
  auto &l0 = pair.l0, &l1 = pair.l1;
  // More than the socket buffers hold: pump stops when the kernel is full, resumes after reads.
  const auto big = pattern(std::size_t{8} << 20, 3);
  const auto small = pattern(100, 4);
  l0.post(header_for(1, big.size()), big.data(), big.size());
  l0.post(header_for(2, small.size()), small.data(), small.size());
  std::size_t done = 0;
  CHECK(l0.pump(done).err == 0);
  CHECK(done < 2);
  std::vector<std::byte> in;
  std::vector<std::byte> buf(1 << 16);
  const std::size_t total = 2 * sizeof(frame_header) + big.size() + small.size();
  for (int rounds = 0; in.size() < total; ++rounds) {
    REQUIRE(rounds < 100000);
    const ssize_t r = l1.read_some(buf.data(), buf.size());
    if (r > 0) in.insert(in.end(), buf.begin(), buf.begin() + r);
    else REQUIRE(l0.pump(done).err == 0);
  }
  CHECK(done == 2);
  CHECK(l0.q.empty());
  frame_header h1, h2;
  std::memcpy(&h1, in.data(), sizeof h1);
  CHECK(h1.seq == 1);
  CHECK(h1.bytes == big.size());
  CHECK(std::memcmp(in.data() + sizeof h1, big.data(), big.size()) == 0);
  std::memcpy(&h2, in.data() + sizeof h1 + big.size(), sizeof h2);
  CHECK(h2.seq == 2);
  CHECK(std::memcmp(in.data() + 2 * sizeof h1 + big.size(), small.data(), small.size()) == 0);
  // A header and its payload read in one call, never past the expected message.
  l0.post(header_for(3, 16), small.data(), 16);
  l0.post(header_for(4, 16), small.data(), 16);
  CHECK(l0.pump(done).err == 0);
  frame_header h3{};
  std::byte payload[16];
  ssize_t r = l1.read_header_some(h3, 0, payload, sizeof payload);
  REQUIRE(r == static_cast<ssize_t>(sizeof h3 + 16));
  CHECK(h3.seq == 3);
  CHECK(std::memcmp(payload, small.data(), 16) == 0);
  CHECK(l1.peek(&h3, sizeof h3) == static_cast<ssize_t>(sizeof h3));
  CHECK(h3.seq == 4);
  // Liveness: quiet while open, gone once the peer closes.
  std::byte rest[sizeof(frame_header) + 16];
  CHECK(l1.read_some(rest, sizeof rest) == static_cast<ssize_t>(sizeof rest));
  CHECK(!l1.peer_gone());
  l0.close();
  CHECK(!l0.connected());
  CHECK(l1.peer_gone());
  // Writing to a closed peer is an error the mesh turns into a lost peer, not a hang.
  l1.post(header_for(5, 4), small.data(), 4);
  int err = 0;
  for (int i = 0; i < 10 && err == 0; ++i) err = l1.pump(done).err;
  CHECK(err != 0);
}

// The concept's receive calls, written once in the mesh for every link type (link_path.ipp):
// a frame read through try_header / try_payload / end_read over either link, byte for byte,
// with a header that arrives in pieces (TCP) and a peek that does not consume.
namespace {

template <class L>
std::vector<std::byte> read_frame(L& rx, L& tx, frame_header& h, std::size_t n) {
  std::vector<std::byte> dst(n);
  std::size_t got = 0, done = 0;
  for (int rounds = 0;; ++rounds) {
    REQUIRE(rounds < 100000);
    const gsync::link_io io = rx.try_header(h, dst.data(), n);
    REQUIRE(io.err == 0);
    if (io.done) {
      got = io.bytes;
      break;
    }
    tx.pump(done);
  }
  REQUIRE(got <= n);
  for (int rounds = 0; got < n; ++rounds) {
    REQUIRE(rounds < 100000);
    const gsync::link_io io = rx.try_payload(dst.data() + got, n - got, 1, nullptr);
    REQUIRE(io.err == 0);
    got += io.bytes;
    if (io.bytes == 0) tx.pump(done);
  }
  rx.end_read();
  return dst;
}

}  // namespace

TEST_CASE("links: the concept's receive calls read frames over every link type, the outside one too") {
  const auto src = pattern(5000, 9);
  SUBCASE("tcp") {
    tcp_pair pair;
    auto &l0 = pair.l0, &l1 = pair.l1;
    const int* sv = pair.sv;
    frame_header h{};
    std::byte none[1];
    CHECK(!l1.try_header(h, none, 0).done);  // nothing yet: not done, no error
    CHECK(!l1.peek_header(h));
    // Half a header, then the rest with the payload: the header's bytes are kept across calls.
    const frame_header sent = header_for(7, src.size());
    REQUIRE(::send(sv[0], &sent, 10, 0) == 10);
    CHECK(!l1.try_header(h, none, 0).done);
    CHECK(!l1.peek_header(h));  // mid-header: no frame to peek at
    REQUIRE(::send(sv[0], reinterpret_cast<const char*>(&sent) + 10, sizeof sent - 10, 0) == static_cast<ssize_t>(sizeof sent - 10));
    REQUIRE(::send(sv[0], src.data(), src.size(), 0) == static_cast<ssize_t>(src.size()));
    const auto dst = read_frame(l1, l0, h, src.size());
    CHECK(h.seq == 7);
    CHECK(dst == src);
    // A peek leaves the frame where it is.
    std::size_t done = 0;
    l0.post(header_for(8, 16), src.data(), 16);
    l0.pump(done);
    frame_header p{};
    REQUIRE(l1.peek_header(p));
    CHECK(p.seq == 8);
    CHECK(read_frame(l1, l0, h, 16) == std::vector<std::byte>(src.begin(), src.begin() + 16));
    CHECK(h.seq == 8);
    // The peer's close is an error of the read, not "nothing yet".
    l0.close();
    CHECK(l1.try_header(h, none, 0).err == gsync::link_io::closed);
  }
  SUBCASE("uds, defined outside the library") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    outside::uds_link l0, l1;
    l0.attach(sv[0]);
    l1.attach(sv[1]);
    frame_header h{};
    CHECK(!l1.try_header(h, nullptr, 0).done);
    CHECK(!l1.peek_header(h));
    const frame_header sent = header_for(7, src.size());
    REQUIRE(::send(sv[0], &sent, 10, 0) == 10);  // half a header: kept across calls
    CHECK(!l1.try_header(h, nullptr, 0).done);
    CHECK(!l1.peek_header(h));
    REQUIRE(::send(sv[0], reinterpret_cast<const char*>(&sent) + 10, sizeof sent - 10, 0) == static_cast<ssize_t>(sizeof sent - 10));
    REQUIRE(::send(sv[0], src.data(), src.size(), 0) == static_cast<ssize_t>(src.size()));
    CHECK(read_frame(l1, l0, h, src.size()) == src);
    CHECK(h.seq == 7);
    std::size_t done = 0;
    l0.post(header_for(8, 16), src.data(), 16);
    l0.pump(done);
    CHECK(done == 1);
    frame_header p{};
    REQUIRE(l1.peek_header(p));
    CHECK(p.seq == 8);
    CHECK(read_frame(l1, l0, h, 16) == std::vector<std::byte>(src.begin(), src.begin() + 16));
    l0.close();
    CHECK(l1.try_header(h, nullptr, 0).err == gsync::link_io::closed);
    CHECK(l1.peer_gone());
  }
  SUBCASE("shm") {
    shm_pair pair("io");
    auto &l0 = pair.l0, &l1 = pair.l1;
    frame_header h{};
    CHECK(!l1.try_header(h, nullptr, 0).done);
    CHECK(!l1.peek_header(h));
    l0.post(header_for(7, src.size()), src.data(), src.size());  // larger than the ring: several pumps
    const auto dst = read_frame(l1, l0, h, src.size());
    CHECK(h.seq == 7);
    CHECK(dst == src);
    std::size_t done = 0;
    CHECK(l0.post_direct(header_for(8, 16), src.data(), 16));  // room, nothing queued: at once
    frame_header p{};
    REQUIRE(l1.peek_header(p));
    CHECK(p.seq == 8);
    CHECK(read_frame(l1, l0, h, 16) == std::vector<std::byte>(src.begin(), src.begin() + 16));
    CHECK(h.seq == 8);
    CHECK(l0.pump(done).err == 0);
  }
}

// Single copy: a large collective payload goes by reference (the ring holds its address), the
// consumer copies it from the producer's memory, and the frame completes only once it has; a
// frame posted behind it waits. A reduction declines the reference and gets the payload through
// the ring instead.
TEST_CASE("links: shared-memory single copy sends large payloads by reference, completing once read") {
  shm_pair pair("ref");
  auto &l0 = pair.l0, &l1 = pair.l1;
  auto &a = pair.a, &b = pair.b;
  namespace shm = gsync::transport::shm;
  shm::publish_probe(a.header());
  int why = -1;
  REQUIRE(shm::probe_peer(a.header(), why));  // this process reads itself
  l0.set_single_copy(1024);
  l1.set_peer_process(a.header().owner_pid);
  const auto big = pattern(300000, 3), small = pattern(100, 4);
  std::size_t done = 0;
  SUBCASE("without the consumer's consent the payload crosses the ring") {
    l0.post(header_for(1, 5000), big.data(), 5000);
    l0.pump(done);
    frame_header h{};
    REQUIRE(l1.try_header(h, nullptr, 0).done);
    const std::uint64_t before = l1.read_position();
    std::vector<std::byte> dst(5000);
    std::size_t have = 0;
    for (int rounds = 0; have < dst.size(); ++rounds) {
      REQUIRE(rounds < 100);
      const auto io = l1.try_payload(dst.data() + have, dst.size() - have, 1, nullptr);
      if (io.bytes == 0) l0.pump(done);
      have += io.bytes;
    }
    l1.end_read();
    CHECK(l1.read_position() - before >= 5000);  // the payload was in the ring
    l0.pump(done);
    CHECK(done == 1);
    CHECK(dst == std::vector<std::byte>(big.begin(), big.begin() + 5000));
  }
  SUBCASE("by reference, into the receiver's buffer") {
    b.ctl(0).single_copy.store(1);  // the consumer (rank 1) says it can read rank 0
    l0.post(header_for(1, big.size()), big.data(), big.size());
    l0.post(header_for(2, small.size()), small.data(), small.size());
    l0.pump(done);
    CHECK(done == 0);  // the reference is in the ring, not read yet; the frame behind it waits
    CHECK(l0.q.size() == 2);
    frame_header h{};
    REQUIRE(l1.try_header(h, nullptr, 0).done);
    CHECK(h.seq == 1);
    CHECK(h.bytes == big.size());
    const std::uint64_t before = l1.read_position();
    std::vector<std::byte> dst(big.size());
    std::size_t have = 0;
    for (int rounds = 0; have < dst.size(); ++rounds) {
      REQUIRE(rounds < 10);
      const auto io = l1.try_payload(dst.data() + have, dst.size() - have, 1, nullptr);
      REQUIRE(io.err == 0);
      REQUIRE(io.bytes > 0);  // never "nothing yet": the bytes are in the producer's memory
      have += io.bytes;
      if (have < dst.size()) {
        l0.pump(done);
        CHECK(done == 0);  // not complete until the last byte is read
      }
    }
    l1.end_read();
    CHECK(dst == big);
    CHECK(l1.read_position() - before == 0);  // nothing but the reference crossed the ring
    l0.pump(done);
    CHECK(done == 2);
    CHECK(l0.q.empty());
    CHECK(read_frame(l1, l0, h, small.size()) == small);
    CHECK(h.seq == 2);
  }
  SUBCASE("a reduction declines the reference: the payload follows it through the ring") {
    b.ctl(0).single_copy.store(1);
    std::vector<double> v(600);  // 4800 bytes: more than the ring holds, so several pumps
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 0.25;
    const std::size_t n = v.size() * sizeof(double);
    l0.post(header_for(3, n), reinterpret_cast<const std::byte*>(v.data()), n);
    l0.post(header_for(4, small.size()), small.data(), small.size());
    l0.pump(done);
    const std::uint64_t head_ref = b.ctl(0).head.load();
    frame_header h{};
    REQUIRE(l1.try_header(h, nullptr, 0).done);
    CHECK(h.seq == 3);
    l0.pump(done);
    CHECK(b.ctl(0).head.load() == head_ref);  // nothing behind an unanswered reference moves
    double_sum acc;
    auto consume = acc.reader();
    gsync::detail::function_ref<void(std::span<const std::byte>)> cref(consume);
    double& sum = acc.sum;
    std::size_t& seen = acc.seen;
    const std::uint64_t before = l1.read_position();
    for (int rounds = 0; seen < n; ++rounds) {
      REQUIRE(rounds < 100);
      const auto io = l1.try_payload(nullptr, n - seen, sizeof(double), &cref);
      REQUIRE(io.err == 0);
      if (io.bytes == 0) l0.pump(done);
    }
    l1.end_read();
    CHECK(l1.read_position() - before == n);  // through the ring
    CHECK(sum == doctest::Approx(0.25 * 599 * 600 / 2));
    l0.pump(done);
    CHECK(done == 2);  // the declined frame once copied, then the one behind it
    CHECK(read_frame(l1, l0, h, small.size()) == small);
    CHECK(h.seq == 4);
  }
  SUBCASE("a producer that failed meanwhile: the read is an error, not data") {
    b.ctl(0).single_copy.store(1);
    l0.post(header_for(4, big.size()), big.data(), big.size());
    l0.pump(done);
    frame_header h{};
    REQUIRE(l1.try_header(h, nullptr, 0).done);
    a.bell().failed.store(1);  // rank 0's failed word, which l1 watches
    std::vector<std::byte> dst(big.size());
    CHECK(l1.try_payload(dst.data(), dst.size(), 1, nullptr).err == gsync::link_io::closed);
  }
  SUBCASE("a point-to-point frame is never sent by reference") {
    b.ctl(0).single_copy.store(1);
    gsync::message_id id{0x80000001u, 1, {}};
    l0.post(gsync::transport::make_header(id, 2000), big.data(), 2000);  // above the threshold, within the ring
    l0.pump(done);
    CHECK(done == 1);  // copied into the ring: complete at once
  }
}

TEST_CASE("links: the single-copy probe refuses a process that is not the segment's owner") {
  namespace shm = gsync::transport::shm;
  shm::segment_header h{};
  int why = 0;
  CHECK(!shm::probe_peer(h, why));  // nothing published
  shm::publish_probe(h);
  CHECK(shm::probe_peer(h, why));
  h.owner_pid = ::getppid();  // another process: its memory does not hold our word there
  CHECK(!shm::probe_peer(h, why));
  CHECK(why != 0);
}

// The mesh's list: positions, names and waits in the order given; its kit (the list at run time)
// gives each peer a port on the first type whose endpoint connects the pair.
TEST_CASE("links: link_list orders the link types, and a port drives the link it holds by its type's traits") {
  using list = gsync::transport::link_list<shm_link, tcp_link>;
  static_assert(list::size == 2);
  static_assert(list::index_of<shm_link> == 0 && list::index_of<tcp_link> == 1);
  static_assert(list::names[0] == "shm" && list::names[1] == "tcp");
  static_assert(list::waits[0] == gsync::link_wait::doorbell && list::waits[1] == gsync::link_wait::descriptor);
#if GSYNC_HAVE_VERBS
  static_assert(std::is_same_v<gsync::transport::tcp, gsync::transport::mesh<shm_link, gsync::transport::verbs_link, tcp_link>>);
#else
  static_assert(std::is_same_v<gsync::transport::tcp, gsync::transport::mesh<shm_link, tcp_link>>);
#endif

  // A port over one end of a TCP pair moves a frame to a port over the other end.
  tcp_pair t;
  gsync::transport::link_port_of<tcp_link> a(1, t.l0), b(1, t.l1);
  CHECK(a.name == "tcp");
  CHECK(a.wait == gsync::link_wait::descriptor);
  CHECK(!a.reads_in_place);
  CHECK(a.fd() == t.sv[0]);
  CHECK(a.as<tcp_link>() == &t.l0);
  CHECK(a.as<shm_link>() == nullptr);
  const auto payload = pattern(1000, 3);
  a.post(header_for(7, payload.size()), payload.data(), payload.size());
  std::size_t done = 0;
  while (!a.q.empty()) REQUIRE(!a.pump(done).err);
  CHECK(done == 1);
  frame_header h{};
  std::vector<std::byte> got(payload.size());
  std::size_t have = 0;
  for (;;) {
    const auto io = b.try_header(h, got.data(), got.size());
    REQUIRE(!io.err);
    have += io.bytes;
    if (io.done) break;
  }
  CHECK(h.seq == 7);
  while (have < got.size()) have += b.try_payload(got.data() + have, got.size() - have, 1, nullptr).bytes;
  b.end_read();
  CHECK(got == payload);

  // A port over a shared-memory link is a doorbell link that reads in place.
  shm_pair p("port");
  gsync::transport::link_port_of<shm_link> s(0, p.l0);
  CHECK(s.wait == gsync::link_wait::doorbell);
  CHECK(s.reads_in_place);
  CHECK(s.costs.shared_memory);
  CHECK(s.fd() == -1);
  CHECK(s.peer_failed() == 0);
  CHECK(s.as<shm_link>() == &p.l0);
}
