// The verbs link (transport/links/verbs_link.hpp) in gsync's mesh, through the stand-in
// libibverbs (tests/support/ibv_emu/): shared memory inside a "host", verbs across, TCP where a
// rank has no port. The allreduce conformance sweep over worlds 2..8, every collective, the choice
// of medium per pair, and the failures a user sees: a completion in error named with its status
// and vendor code, a peer that leaves, a device or library that is not there (TCP, with the reason
// at INFO). Skipped (as skips) where the stand-in was not built.

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gsync/send_recv.hpp>

#include "support/allreduce_sweep.hpp"
#include "support/env.hpp"
#include "support/verbs_pair.hpp"
#include "support/verbs_world.hpp"

using namespace gsync_test;

namespace {

void run_verbs_sweep(int n) {
  failures fails;
  std::atomic<int> over_verbs{0};
  auto body = [&](auto& comm, world_sync& sync) {
    sweep_all<true>(comm, sync, fails, "verbs");
    for (int p = 0; p < comm.size(); ++p)
      if (comm.transport().link_name(p) == "verbs") ++over_verbs;
  };
  run_verbs(n, body, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(fails.list.empty());
  const int hosts_a = (n + 1) / 2, hosts_b = n - hosts_a;
  CHECK(over_verbs == 2 * hosts_a * hosts_b);  // every pair across the two hosts, seen from both ends
}

}  // namespace

#define GSYNC_SWEEP_VERBS(N) \
  TEST_CASE("verbs link: allreduce sweep across two hosts, world " #N) { run_verbs_sweep(N); }

GSYNC_SWEEP_VERBS(2)
GSYNC_SWEEP_VERBS(3)
GSYNC_SWEEP_VERBS(4)
GSYNC_SWEEP_VERBS(5)
GSYNC_SWEEP_VERBS(8)

TEST_CASE("verbs link: each pair gets shared memory, verbs or TCP as its hosts and ports say") {
  std::mutex m;
  std::vector<std::string> names, wrong;
  run_verbs(4, [&](auto& comm, world_sync&) {
    auto& x = comm.transport();
    std::lock_guard lk(m);
    names.emplace_back(x.name());
    for (int p = 0; p < comm.size(); ++p) {
      if (p == comm.rank()) continue;
      const bool same = (p < 2) == (comm.rank() < 2);
      const std::string_view want = same ? "shm" : "verbs";
      if (x.link_name(p) != want)
        wrong.push_back("rank " + std::to_string(comm.rank()) + " -> " + std::to_string(p) + ": " + std::string(x.link_name(p)));
    }
  }, test_config());
  for (const auto& s : names) CHECK(s == "shm+verbs");
  for (const auto& w : wrong) FAIL_CHECK(w);
}

TEST_CASE("verbs link: large and odd-sized messages, every collective, stay exact across hosts") {
  // More than the ring holds (64 KiB rings): frames go in pieces as the peer frees room.
  gsync::config cfg = test_config();
  cfg.transport.ib.ring_bytes = 64 << 10;
  std::atomic<int> bad{0};
  run_verbs(2, [&](auto& comm, world_sync&) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{4099}, std::size_t{1} << 20}) {
      std::vector<double> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<double>(i % 977) + comm.rank();
      gsync::allreduce(comm, std::span<double>{v});
      for (std::size_t i = 0; i < count; ++i)
        if (v[i] != 2.0 * static_cast<double>(i % 977) + 1.0) {
          ++bad;
          break;
        }
      std::vector<int> b(count, comm.rank() == 0 ? 7 : 0);
      gsync::broadcast(comm, std::span<int>{b}, 0);
      for (int x : b)
        if (x != 7) {
          ++bad;
          break;
        }
    }
  }, cfg);
  CHECK(bad == 0);
}

TEST_CASE("verbs link: a flush that the pumps before its sleep complete does not sleep (2 hosts x 2 ranks)") {
  // Ring shifts of 1 MiB (larger than the ring, so frames wait for room) over shared memory and
  // verbs: a flush whose last frame went out while the wait pumped before sleeping used to sleep
  // out the poll's cap (1 s) with nothing left to wait for.
  std::mutex m;
  std::vector<double> took_s;
  run_verbs(4, [&](auto& comm, world_sync& sync) {
    const int n = comm.size(), r = comm.rank();
    std::vector<std::uint8_t> out(std::size_t{1} << 20, 1), in(out.size());
    sync.bar.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 16; ++k)
      gsync::sendrecv(comm, std::span<const std::uint8_t>{out}, (r + 1) % n, 1, std::span<std::uint8_t>{in}, (r + n - 1) % n, 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lk(m);
    took_s.push_back(s);
  }, test_config());
  REQUIRE(took_s.size() == 4);
  for (double s : took_s) CHECK(s < 4.0);  // 16 shifts of 1 MiB take milliseconds each
}

TEST_CASE("verbs link: a mismatched call and a peer that leaves are gsync errors, not hangs") {
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(20);
  CHECK(mismatch_reports([](int n, auto body, const gsync::config& c) { run_verbs(n, body, c); }, cfg) >= 1);

  const auto [lost, took] = leaver_reports([](int n, auto body, const gsync::config& c) { run_verbs(n, body, c); }, cfg);
  CHECK(lost == 1);
  CHECK(took < std::chrono::seconds(15));  // noticed, not timed out
}

TEST_CASE("verbs link: frames for a peer that left while this rank waited elsewhere fail at once, naming the close, not at the timeout") {
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(30);
  std::mutex m;
  std::string what;
  bool peer_lost = false;
  std::chrono::milliseconds took{-1};
  run_verbs(3, [&](auto& comm, world_sync&) {
    if (comm.rank() == 1) return;  // leaves at once (no failure record): its connections close
    std::vector<float> v(8 << 20);  // 32 MiB: more than the departed peer's ring takes
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      gsync::send(comm, std::span<const float>(v.data(), 1), 0, 5);
      return;
    }
    gsync::recv(comm, std::span<float>(v.data(), 1), 2, 5);  // rank 1's close is seen meanwhile (a poll watching it)
    const auto t0 = std::chrono::steady_clock::now();
    try {
      gsync::send(comm, std::span<const float>(v), 1, 6);
    } catch (const gsync::error& e) {
      std::lock_guard lk(m);
      what = e.what();
      peer_lost = e.code() == gsync::errc::peer_lost;
    }
    took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  }, cfg, [](int r) { return std::string(r == 0 ? "ib-a" : r == 1 ? "ib-b" : "ib-c"); });  // three hosts: every pair over verbs
  CAPTURE(what);
  CHECK(peer_lost);
  CHECK(what.find("closed its connection") != std::string::npos);
  CHECK(took < std::chrono::seconds(5));
}

TEST_CASE("verbs link: a queue pair in error loses the link, naming the peer, the status and the vendor code") {
  if (on_real_verbs()) return skip("needs the stand-in's fault hooks");
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(20);
  std::mutex m;
  std::vector<std::string> msgs;
  run_verbs(2, [&](auto& comm, world_sync& sync) {
    std::vector<float> v(1000, 1.0f);
    gsync::allreduce(comm, std::span<float>{v});  // the link works
    sync.bar.arrive_and_wait();
    if (comm.rank() == 0) {
      // The fault: every queue pair of this process (both ranks are threads of it) to ERR.
      CHECK(ibv_emu_control("device_fatal") == 0);
    }
    sync.bar.arrive_and_wait();
    const std::string e = message_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); });
    std::lock_guard lk(m);
    msgs.push_back(e);
  }, cfg);
  REQUIRE(msgs.size() == 2);
  bool named = false;
  for (const auto& e : msgs) {
    CAPTURE(e);
    CHECK_FALSE(e.empty());
    if (e.find("verbs: ") != std::string::npos && (e.find("vendor error") != std::string::npos || e.find("fatal") != std::string::npos)) named = true;
  }
  CHECK(named);
}

TEST_CASE("verbs link: a port that goes down ends a rank's sleep at once, naming the port (asynchronous events)") {
  if (on_real_verbs()) return skip("needs the stand-in's fault hooks");
  // Rank 0 sleeps in poll(2) waiting for rank 1's data; rank 1 takes the port down (PORT_ERR to
  // every context on it) and no completion will come. Only the device's event descriptor, watched
  // during the sleep, can end rank 0's wait before the timeout.
  std::string why;
  const auto* lib = gsync::verbs::library::load(ibv_emu_path(), why);
  REQUIRE_MESSAGE(lib != nullptr, why);
  ibv_emu_fabric();
  const auto d = gsync::verbs::discover(*lib, gsync::verbs::hca_filter{}, -1);
  REQUIRE_MESSAGE(!d.ports.empty(), d.why_none);
  const std::string port = d.ports.front().device + " " + std::to_string(d.ports.front().port);
  gsync::config cfg = test_config();
  cfg.timeout = std::chrono::seconds(30);
  std::mutex m;
  std::vector<std::string> msgs;
  std::vector<double> took_s;
  run_verbs(2, [&](auto& comm, world_sync& sync) {
    std::vector<float> v(1000, 1.0f);
    gsync::allreduce(comm, std::span<float>{v});  // the link works
    sync.bar.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // rank 0 is asleep by now
      CHECK(ibv_emu_control("port_down " + port) == 0);
    }
    const std::string e = message_of([&] { gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v}); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lk(m);
    msgs.push_back(e);
    if (comm.rank() == 0) took_s.push_back(s);
  }, cfg);
  ibv_emu_control("port_up " + port);
  REQUIRE(msgs.size() == 2);
  REQUIRE(took_s.size() == 1);
  CHECK(took_s[0] < 6.0);  // 1.5 s asleep, then the event; the timeout is 30 s
  for (const auto& e : msgs) {
    CAPTURE(e);
    CHECK(e.find("port error on") != std::string::npos);
  }
}

TEST_CASE("verbs link: without a library or a device the ranks use TCP, and say why at INFO") {
  SUBCASE("no library") {
    gsync::config cfg = test_config();
    std::mutex m;
    std::vector<std::string> names;
    const auto port = free_port();
    auto c = verbs_config(cfg);
    c.transport.ib.library = "libgsync-no-such-ibverbs.so.1";
    run_threads<verbs_communicator>(2, [&](int r) { return verbs_communicator::join(test_launch_info(r, 2, port, r == 0 ? "a" : "b"), c); },
                                    [&](auto& comm, world_sync&) {
                                      std::vector<float> v(10, 1.0f);
                                      gsync::allreduce(comm, std::span<float>{v});
                                      std::lock_guard lk(m);
                                      names.emplace_back(comm.transport().name());
                                      CHECK(v[9] == 2.0f);
                                    });
    for (const auto& n : names) CHECK(n == "tcp");
  }
  SUBCASE("GSYNC_IB_DISABLE") {
    gsync::config cfg = test_config();
    cfg.transport.ib.enabled = false;
    std::mutex m;
    std::vector<std::string> names;
    run_verbs(2, [&](auto& comm, world_sync&) {
      std::lock_guard lk(m);
      names.emplace_back(comm.transport().name());
    }, cfg);
    for (const auto& n : names) CHECK(n == "tcp");
  }
}

// The link's own calls, on a connected pair in this process (no mesh): frames larger than the
// ring in pieces as room comes back, a peek that does not consume, post_direct with room, reads
// in place across the ring's end in pieces of the asked alignment, and a queue pair in error as a
// lost link with its status and vendor code.
namespace {

using gsync::transport::frame_header;
using gsync::transport::verbs_link;

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("verbs link: frames over a connected pair, larger than the ring, peeked, and read in place") {
  verbs_pair pair(64 << 10);
  auto &l0 = pair.l0, &l1 = pair.l1;
  frame_header h{};
  CHECK(!l1.try_header(h, nullptr, 0).done);  // nothing yet: not done, no error
  CHECK(!l1.peek_header(h));
  // Five times the ring: written in pieces as the reader's notices free room.
  const auto big = pattern(5 * (64 << 10) + 13, 3);
  l0.post(header_for(7, big.size()), big.data(), big.size());
  REQUIRE(read_frame(l1, l0, h, big.size()) == big);
  CHECK(h.seq == 7);
  std::size_t done = 0;
  l0.pump(done);
  CHECK(l0.q.empty());
  // Room came back whole: a small frame goes at once, and a peek leaves it in place.
  const auto small = pattern(100, 5);
  bool direct = false;
  for (int i = 0; i < 5000 && !(direct = l0.post_direct(header_for(8, small.size()), small.data(), small.size())); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(direct);
  if (!direct) l0.post(header_for(8, small.size()), small.data(), small.size());
  frame_header p{};
  for (int i = 0; i < 5000 && !l1.peek_header(p); ++i) {
    l0.pump(done);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(p.seq == 8);
  REQUIRE(read_frame(l1, l0, h, small.size()) == small);
  // In place, across the ring's end, in pieces that are multiples of 8.
  const auto mid = pattern(40000, 9);
  for (int round = 0; round < 4; ++round) {
    l0.post(header_for(9 + round, mid.size()), mid.data(), mid.size());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (gsync::link_io io; !(io = l1.try_header(h, nullptr, 0)).done; l0.pump(done)) {
      REQUIRE(io.err == 0);
      REQUIRE(std::chrono::steady_clock::now() < until);
    }
    std::vector<std::byte> got;
    bool aligned = true;
    auto keep = [&](std::span<const std::byte> s) {
      aligned = aligned && s.size() % 8 == 0;
      got.insert(got.end(), s.begin(), s.end());
    };
    gsync::detail::function_ref<void(std::span<const std::byte>)> take = keep;
    while (got.size() < mid.size()) {
      const auto io = l1.try_payload(nullptr, mid.size() - got.size(), 8, &take);
      REQUIRE(io.err == 0);
      REQUIRE(std::chrono::steady_clock::now() < until);
      if (io.bytes == 0) l0.pump(done);
    }
    l1.end_read();
    CHECK(aligned);
    CHECK(got == mid);
  }
  CHECK(l0.sent().notices + l1.sent().notices > 0);
}

TEST_CASE("verbs link: a queue pair in error is a lost link that names the status and the vendor code") {
  if (on_real_verbs()) return skip("needs the stand-in's fault hooks");
  verbs_pair pair(64 << 10);
  auto &l0 = pair.l0, &l1 = pair.l1;
  REQUIRE(ibv_emu_control("qp_error " + std::to_string(l1.queue().qpn())) == 0);
  const auto src = pattern(1000, 1);
  l0.post(header_for(1, src.size()), src.data(), src.size());
  std::size_t done = 0;
  frame_header h{};
  gsync::link_io io;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (io.err == 0 && std::chrono::steady_clock::now() < until) {
    io = l0.pump(done);
    if (io.err == 0) io = l1.try_header(h, nullptr, 0);
  }
  REQUIRE(io.err != 0);
  REQUIRE(io.why != nullptr);
  const std::string why = io.why;
  CAPTURE(why);
  CHECK(why.find("verbs: ") == 0);
  CHECK((why.find("vendor error") != std::string::npos || why.find("fatal") != std::string::npos));
  CHECK((l0.peer_gone() || l1.peer_gone()));
}
