// User buffers registered for RDMA (`communicator::register_memory`, core/memory_registration.hpp):
// a frame whose payload lies in one goes from where it lies (the link's zero_copy_writes), is
// complete only once the peer has it, keeps the registration while a write reads it, and is
// copied again once the handle ends, with nothing registered left behind (so memory freed and
// reused at the same address is never read through old pinned pages: on a real adapter, the last
// case below would receive the old bytes). Through the stand-in, or rxe in the guest.

#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include <gsync/allreduce.hpp>
#include <gsync/broadcast.hpp>
#include <gsync/gsync.hpp>

#include "support/allreduce_sweep.hpp"
#include "support/env.hpp"
#include "support/failures.hpp"
#include "support/fake_cuda.hpp"
#include "support/verbs_pair.hpp"
#include "support/verbs_world.hpp"

using namespace gsync_test;
using gsync::transport::frame_header;
using gsync::transport::verbs_link;
using gsync_test::fake_cuda_scope;

namespace {

void fill(std::span<std::byte> b, unsigned seed) {
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}

// Pumps tx until `done` (frames completed, counted on) reaches `want` (bounded).
void pump_until(verbs_link& tx, std::size_t& done, std::size_t want) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done < want) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    const gsync::link_io io = tx.pump(done);
    REQUIRE_MESSAGE(io.err == 0, (io.why ? io.why : "?"));
  }
}

// Reads one frame of n bytes from rx, pumping tx meanwhile; returns its payload.
std::vector<std::byte> read_one(verbs_link& rx, verbs_link& tx, std::size_t n, std::size_t* completed = nullptr) {
  frame_header h{};
  auto got = read_frame(rx, tx, h, n, completed);
  REQUIRE(h.bytes == n);
  return got;
}

// On the CUDA stand-in: fills `count` floats of device memory with value(i, rank) on stream `s`,
// allreduces them (sum) as a device buffer, reads them back after the stream's work, and adds the
// first element that differs from the sum over the ranks to `fails` (naming `what`).
template <class C, class V>
void device_sum_checked(gsync_test::fake_cuda& api, C& comm, gsync::cuda_stream s, std::size_t count, V value, failures& fails,
                        const std::string& what) {
  const int r = comm.rank();
  std::vector<float> dev(count), seen;
  api.launch(s, [&] {
    for (std::size_t i = 0; i < count; ++i) dev[i] = value(i, r);
  });
  gsync::allreduce(comm, gsync::device_span<float>{dev.data(), count}, gsync::op::sum{}, s);
  api.launch(s, [&] { seen = dev; });
  api.synchronize(s);
  for (std::size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int q = 0; q < comm.size(); ++q) want += static_cast<double>(value(i, q));
    if (seen[i] != static_cast<float>(want)) {
      fails.add("rank " + std::to_string(r) + " " + what + " [" + std::to_string(i) + "]");
      return;
    }
  }
}

}  // namespace

TEST_CASE("register_memory: a registered payload goes without a copy, larger than the ring, and exact") {
  verbs_pair pair(256 << 10);
  std::vector<std::byte> buf((1 << 20) + 13);
  fill(buf, 1);
  auto reg = pair.l0.register_memory(buf);
  REQUIRE(reg != nullptr);
  CHECK(pair.dev->regions().live() == 1);
  CHECK(pair.l0.register_memory(std::span(buf).subspan(100, 5000)) == reg);  // covered: the same registration
  CHECK(pair.dev->regions().live() == 1);
  // Four times the ring, from an offset inside the buffer: every write of it reads the buffer.
  const auto part = std::span<const std::byte>(buf).subspan(7);
  pair.l0.post(header_for(1, part.size()), part.data(), part.size());
  std::size_t completed = 0;
  const auto got = read_one(pair.l1, pair.l0, part.size(), &completed);
  CHECK(std::memcmp(got.data(), part.data(), part.size()) == 0);
  const auto zc = pair.l0.sent().zero_copy_writes;
  CHECK(zc >= 4);
  pump_until(pair.l0, completed, 1);
  CHECK(completed == 1);
  CHECK(pair.l0.q.empty());
  // Below zero_copy_min, or reaching past the buffer: through the mirror.
  const auto small = std::span<const std::byte>(buf).first(verbs_link::zero_copy_min - 1);
  pair.l0.post(header_for(2, small.size()), small.data(), small.size());
  CHECK(read_one(pair.l1, pair.l0, small.size()) == std::vector<std::byte>(small.begin(), small.end()));
  std::vector<std::byte> other(300 << 10);
  fill(other, 2);
  auto half = pair.l0.register_memory(std::span(other).first(other.size() / 2));
  pair.l0.post(header_for(3, other.size()), other.data(), other.size());
  CHECK(read_one(pair.l1, pair.l0, other.size()) == other);
  CHECK(pair.l0.sent().zero_copy_writes == zc);
}

TEST_CASE("register_memory: a zero-copy frame completes only once the peer has it, then the buffer is the caller's") {
  verbs_pair pair(1 << 20, 17);  // room for the whole frame: nothing but the write's completion holds it; tries of 0.5 s
  std::vector<std::byte> buf(600 << 10);
  fill(buf, 3);
  const std::vector<std::byte> sent = buf;
  auto reg = pair.l0.register_memory(buf);
  std::size_t done = 0;
  CHECK(!pair.l0.post_direct(header_for(1, buf.size()), buf.data(), buf.size()));  // not complete at once: queued
  // The stand-in's adapter held (its progress stopped): the write is posted, not done, so the
  // frame stays the caller's however often the link is pumped.
  const bool held = ibv_emu_control("stall") == 0;
  struct resume_at_end {
    bool on;
    ~resume_at_end() {
      if (on) ibv_emu_control("resume");
    }
  } resume{held};
  pair.l0.post(header_for(1, buf.size()), buf.data(), buf.size());
  pair.l0.pump(done);
  CHECK(pair.l0.sent().zero_copy_writes >= 1);
  CHECK(reg->zero_copy_writes.load() >= 1);
  if (held) {
    for (int i = 0; i < 25; ++i) {  // 50 ms, well inside one try
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      REQUIRE(pair.l0.pump(done).err == 0);
    }
    CHECK(done == 0);
    CHECK(!pair.l0.q.empty());
    CHECK(pair.l0.unsent() == 0);  // wholly written, waiting for the completion
    REQUIRE(ibv_emu_control("resume") == 0);
    resume.on = false;
  }
  pump_until(pair.l0, done, 1);
  // Complete: the adapter has read every byte. Overwriting now must not change what arrives.
  std::memset(buf.data(), 0xEE, buf.size());
  CHECK(read_one(pair.l1, pair.l0, sent.size()) == sent);
}

TEST_CASE("register_memory: a handle that ends while its write is in flight leaves the write intact, then nothing registered") {
  verbs_pair pair(128 << 10);
  std::vector<std::byte> buf(700 << 10);
  fill(buf, 4);
  const std::vector<std::byte> sent = buf;
  auto reg = pair.l0.register_memory(buf);
  pair.l0.post(header_for(1, buf.size()), buf.data(), buf.size());
  std::size_t done = 0;
  pair.l0.pump(done);
  REQUIRE(pair.l0.sent().zero_copy_writes >= 1);
  reg.reset();  // the frame's writes keep the registration (deregistered under them, they would fail)
  CHECK(pair.dev->regions().live() == 1);
  CHECK(read_one(pair.l1, pair.l0, sent.size(), &done) == sent);
  pump_until(pair.l0, done, 1);
  CHECK(pair.dev->regions().live() == 0);
  // Later sends from the buffer go through the mirror.
  const auto zc = pair.l0.sent().zero_copy_writes;
  pair.l0.post(header_for(2, buf.size()), buf.data(), buf.size());
  CHECK(read_one(pair.l1, pair.l0, sent.size()) == sent);
  CHECK(pair.l0.sent().zero_copy_writes == zc);
}

TEST_CASE("register_memory: memory freed and mapped again at the same address is sent as it is now, not from the old pages") {
  verbs_pair pair(256 << 10);
  const std::size_t len = 512 << 10;
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto b = std::span<std::byte>(static_cast<std::byte*>(m), len);
  fill(b, 5);
  {
    auto reg = pair.l0.register_memory(b);
    pair.l0.post(header_for(1, len), b.data(), len);
    std::size_t done = 0;
    const auto got = read_one(pair.l1, pair.l0, len, &done);
    CHECK(std::memcmp(got.data(), b.data(), len) == 0);
    pump_until(pair.l0, done, 1);
  }
  CHECK(pair.dev->regions().live() == 0);
  REQUIRE(::munmap(m, len) == 0);
  void* again = ::mmap(m, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again != m) {
    if (again != MAP_FAILED) ::munmap(again, len);
    return skip("the address could not be mapped again");
  }
  fill(b, 6);
  const std::vector<std::byte> now(b.begin(), b.end());
  const auto zc = pair.l0.sent().zero_copy_writes;
  pair.l0.post(header_for(2, len), b.data(), len);
  CHECK(read_one(pair.l1, pair.l0, len) == now);
  CHECK(pair.l0.sent().zero_copy_writes == zc);  // through the mirror: nothing registered it again
  ::munmap(m, len);
}

TEST_CASE("register_memory: collectives from registered buffers across hosts are exact, and one host registers nothing") {
  constexpr std::size_t n = (1 << 20) + 7;  // 4 MiB of floats: every frame across the hosts is over zero_copy_min
  failures fails;
  std::atomic<int> registered{0};
  std::atomic<std::uint64_t> from_buffers{0};
  run_verbs(4, [&](auto& comm, world_sync&) {
    std::vector<float> x(n), y(n);
    auto ry = comm.register_memory(std::span(y));
    auto rx = comm.register_memory(x.data(), x.size() * sizeof(float));
    if (ry.adapters() == 1 && rx.adapters() == 1) ++registered;
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < n; ++i) x[i] = y[i] = static_cast<float>((i * 7 + comm.rank() * 3 + round) % 1024);
      gsync::allreduce(comm, std::span(y));
      gsync::broadcast(comm, std::span(x), round % comm.size());
      for (std::size_t i = 0; i < n; i += 997) {
        double want = 0;
        for (int r = 0; r < comm.size(); ++r) want += static_cast<double>((i * 7 + r * 3 + round) % 1024);
        if (y[i] != static_cast<float>(want)) {
          fails.add("rank " + std::to_string(comm.rank()) + " allreduce[" + std::to_string(i) + "]");
          break;
        }
        if (x[i] != static_cast<float>((i * 7 + (round % comm.size()) * 3 + round) % 1024)) {
          fails.add("rank " + std::to_string(comm.rank()) + " broadcast[" + std::to_string(i) + "]");
          break;
        }
      }
    }
    from_buffers += rx.zero_copy_writes() + ry.zero_copy_writes();
  }, test_config());
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(registered == 4);
  CHECK(from_buffers > 0);  // the payloads crossing the hosts went from the registered buffers
  // All four on one host: shared memory only, nothing to register.
  std::atomic<int> none{0};
  run_verbs(4, [&](auto& comm, world_sync&) {
    std::vector<float> y(1000, 1.0f);
    auto r = comm.register_memory(std::span(y));
    if (r.adapters() == 0 && r.bytes().size() == y.size() * sizeof(float)) ++none;
    gsync::allreduce(comm, std::span(y));
    if (y[999] != 4.0f) fails.add("one host: wrong sum");
  }, test_config(), [](int) { return std::string("one-host"); });
  CHECK(none == 4);
  CHECK(fails.list.empty());
  auto world = gsync::make_inproc_world(1);
  std::vector<int> v(10);
  CHECK(world[0].register_memory(std::span(v)).adapters() == 0);
}

// Device buffers through host staging (cuda/staging.hpp), on the host stand-in of the CUDA
// runtime: the staging mirrors are registered with the adapters when they are made (and again
// when they grow), so each window's frames to a peer on the other host go from the mirror, not
// through the link's copy.
TEST_CASE("device staging: the mirrors are registered, and windows cross hosts from them, exact") {
  fake_cuda_scope fk;
  gsync::config cfg = test_config();
  cfg.cuda_staging_bytes = std::size_t{1} << 20;  // several windows, each frame above zero_copy_min
  const std::size_t count = 1000003;
  failures fails;
  std::atomic<int> registered{0};
  std::atomic<std::uint64_t> from_mirrors{0};
  run_verbs(4, [&](auto& comm, world_sync&) {
    gsync::cuda_stream s = fk.api.create_stream();
    for (std::size_t round = 0; round < 2; ++round)
      device_sum_checked(fk.api, comm, s, count,
                         [round](std::size_t i, int r) { return static_cast<float>((i * 5 + static_cast<std::size_t>(r) * 3 + round) % 2048); },
                         fails, "round " + std::to_string(round));
    fk.api.destroy_stream(s);
    auto st = gsync::detail::device_state_of(comm);
    if (st->mirror_adapters() == 1) ++registered;
    from_mirrors += st->mirror_zero_copy_writes();
  }, cfg);
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(registered == 4);
  CHECK(from_mirrors > 0);
}

// The hierarchical device allreduce on two hosts of two ranks: CUDA IPC inside each host (the
// stand-in's kernels), verbs across them through the registered staging mirrors.
TEST_CASE("device staging: the hierarchical device allreduce runs CUDA IPC inside hosts and verbs across them") {
  fake_cuda_scope fk(true);
  gsync::config cfg = test_config();
  cfg.cuda_ipc.slot_bytes = 64 << 10;
  cfg.cuda_staging_bytes = std::size_t{512} << 10;
  const std::size_t count = 300007;  // three-level: each rank's part crosses the hosts
  failures fails;
  std::atomic<int> across{0};
  std::atomic<std::uint64_t> from_mirrors{0};
  run_verbs(4, [&](auto& comm, world_sync&) {
    gsync::cuda_stream s = fk.api.create_stream();
    device_sum_checked(fk.api, comm, s, count,
                       [](std::size_t i, int r) { return static_cast<float>((i * 3 + static_cast<std::size_t>(r)) % 4096); }, fails,
                       "hierarchical");
    fk.api.destroy_stream(s);
    auto ipc = std::static_pointer_cast<gsync::detail::ipc_state>(comm.ipc_state_slot());
    if (ipc && ipc->across_hosts) ++across;
    from_mirrors += gsync::detail::device_state_of(comm)->mirror_zero_copy_writes();
  }, cfg);
  for (const auto& f : fails.list) FAIL_CHECK(f);
  CHECK(across == 4);
  CHECK(fk.ipc.calls.load() > 0);
  CHECK(from_mirrors > 0);
}
