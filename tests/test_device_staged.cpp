// Collectives on device buffers through host staging (cuda/staging.hpp), with a host stand-in for
// the CUDA runtime (support/fake_cuda.hpp): "device memory" is host memory and each stream is
// run by its own thread, so the work really is asynchronous to the caller.
//
// Every test queues a "kernel" that writes the input on the user's stream, the collective, and a
// "kernel" that reads the result, then waits for the stream: a staged path that did not wait for
// the work before it (the start event) would send stale input, and one that let the stream go on
// before its results were copied back (the gate) would show stale output. Results are compared
// bit for bit with the host path on the same inputs and with the double-precision reference.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <gsync/gsync.hpp>

#include "support/fake_cuda.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

using gsync_test::fake_cuda;
using gsync_test::fake_cuda_scope;

namespace {

/// Runs allreduce of `count` elements on `n` ranks on device buffers and on host buffers; checks
/// that they agree bit for bit and match the reference. `out_of_place` uses separate buffers.
/// Above the staging size floating-point sums are grouped per window, so only the reference
/// applies (`same_bits_as_host` false).
template <class T, class Op>
void device_allreduce_case(fake_cuda& api, int n, std::size_t count, bool out_of_place, gsync::config cfg = {},
                           bool same_bits_as_host = true) {
  gsync_test::run_inproc(
      n,
      [&](auto& comm, auto&) {
        const int r = comm.rank();
        std::vector<T> host(count), dev(count), dev_out(count), seen(count);
        for (std::size_t i = 0; i < count; ++i) host[i] = gsync_test::input<T, Op>(r, i);
        gsync::allreduce(comm, std::span<T>(host), Op{});

        gsync::cuda_stream s = api.create_stream();
        api.launch(s, [&] {
          for (std::size_t i = 0; i < count; ++i) dev[i] = gsync_test::input<T, Op>(r, i);
        });
        if (out_of_place)
          gsync::allreduce(comm, gsync::device_span<const T>{dev.data(), count}, gsync::device_span<T>{dev_out.data(), count}, Op{}, s);
        else
          gsync::allreduce(comm, gsync::device_span<T>{dev.data(), count}, Op{}, s);
        api.launch(s, [&] { seen = out_of_place ? dev_out : dev; });
        api.synchronize(s);
        api.destroy_stream(s);
        // (CHECK, not REQUIRE: a rank's thread must not throw doctest's exception)
        if (same_bits_as_host && count) CHECK(std::memcmp(seen.data(), host.data(), count * sizeof(T)) == 0);
        std::size_t off = 0, moved = 0;
        for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<T, Op>(seen[i], n, i);
        if (out_of_place)
          for (std::size_t i = 0; i < count; ++i) moved += !(dev[i] == gsync_test::input<T, Op>(r, i));  // input untouched
        CHECK(off == 0);
        CHECK(moved == 0);
      },
      cfg);
}

}  // namespace

TEST_CASE("device allreduce through staging: each element size and kind x every op, world sizes 1-4, stream-ordered, equal to the host path") {
  fake_cuda_scope fk;
  for (int n : {1, 2, 3, 4})
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t(n - 1 ? n - 1 : 2), std::size_t{1021}}) {
      gsync_test::for_each_device_dtype([&]<class T>() {
        gsync_test::for_each_op([&]<class Op>() {
          CAPTURE(n);
          CAPTURE(count);
          CAPTURE(gsync::name(gsync::dtype_of<T>));
          CAPTURE(gsync::detail::op_name<Op>());
          device_allreduce_case<T, Op>(fk.api, n, count, false);
        });
      });
    }
}

TEST_CASE("device allreduce through staging: out of place, world sizes 1-8, awkward counts") {
  fake_cuda_scope fk;
  for (int n = 1; n <= 8; ++n)
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, std::size_t{300007}}) {
      CAPTURE(n);
      CAPTURE(count);
      device_allreduce_case<float, gsync::op::sum>(fk.api, n, count, true);
      device_allreduce_case<std::int32_t, gsync::op::max>(fk.api, n, count, true);
    }
}

TEST_CASE("device allreduce through staging: messages larger than the staging size run as windows in bounded memory") {
  fake_cuda_scope fk;
  gsync::config cfg;
  cfg.cuda_staging_bytes = 64 << 10;
  for (int n : {2, 3, 5}) {
    const std::size_t count = 250007;  // about 15 windows of 16K floats
    CAPTURE(n);
    fk.api.pinned_peak = 0;
    fk.api.d2h_bytes = 0;
    device_allreduce_case<std::int32_t, gsync::op::sum>(fk.api, n, count, false, cfg);
    device_allreduce_case<float, gsync::op::avg>(fk.api, n, count, true, cfg, false);
    // per communicator: two mirrors of the staging size (and alignment slack) and the gate word
    CHECK(fk.api.pinned_peak.load() <= n * (2 * (64 << 10) + 4 * 256 + 64));
    CHECK(fk.api.d2h_bytes.load() >= static_cast<long>(2 * count * 4 * n));  // every element copied in, by each rank
  }
}

TEST_CASE("device allreduce: the caller's current device is left as it was") {
  fake_cuda_scope fk;
  gsync_test::run_inproc(2, [&](auto& comm, auto&) {
    std::vector<float> dev(100, 1.0f);
    gsync::cuda_stream s = fk.api.create_stream();
    gsync::allreduce(comm, gsync::device_span<float>{dev.data(), dev.size()}, gsync::op::sum{}, s);  // the communicator's device: 0
    fk.api.set_device(1);  // the application works on another device meanwhile
    gsync::allreduce(comm, gsync::device_span<float>{dev.data(), dev.size()}, gsync::op::sum{}, s);
    CHECK(fk.api.current_device() == 1);
    fk.api.synchronize(s);
    CHECK(dev[0] == 4.0f);
    fk.api.set_device(0);
    fk.api.destroy_stream(s);
  });
}

TEST_CASE("device allreduce: the request of the async form finishes once the results are in device memory") {
  fake_cuda_scope fk;
  gsync_test::run_inproc(3, [&](auto& comm, auto&) {
    const std::size_t count = 100003;
    std::vector<double> dev(count);
    gsync::cuda_stream s = fk.api.create_stream();
    fk.api.launch(s, [&] {
      for (std::size_t i = 0; i < count; ++i) dev[i] = gsync_test::input<double, gsync::op::sum>(comm.rank(), i);
    });
    gsync::request q = gsync::allreduce_async(comm, gsync::device_span<double>{dev.data(), count}, gsync::op::sum{}, s);
    q.wait();  // no stream synchronisation: the request alone says the data is back
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<double, gsync::op::sum>(dev[i], 3, i);
    CHECK(off == 0);
    fk.api.synchronize(s);
    fk.api.destroy_stream(s);
  });
}

namespace {
/// Blocks in the first call on any thread (until the test lets go, or 8 s): a user operator that
/// never returns, as far as one engine can tell.
struct stalls_once {
  static constexpr std::string_view name = "stalls_once";
  static std::atomic<bool>& claimed() { static std::atomic<bool> c{false}; return c; }
  static std::atomic<bool>& go() { static std::atomic<bool> g{false}; return g; }
  float operator()(float a, float b) const {
    if (!claimed().exchange(true)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8);
      while (!go().load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return a + b;
  }
};
}  // namespace

TEST_CASE("device allreduce: a failure after the call releases the stream and breaks the communicator") {
  fake_cuda_scope fk;
  SUBCASE("a peer that never joins: the operation times out, the stream goes on, the next call throws") {
    gsync_test::run_inproc(
        2,
        [&](auto& comm, auto& sync) {
          gsync::prepare_device(comm);  // the first device collective's barrier would otherwise time out in the call
          if (comm.rank() == 0) {
            std::vector<float> dev(1000, 1.0f);
            gsync::cuda_stream s = fk.api.create_stream();
            gsync::allreduce(comm, gsync::device_span<float>{dev.data(), dev.size()}, gsync::op::sum{}, s);
            fk.api.synchronize(s);  // returns: the gate was opened although the operation failed
            fk.api.destroy_stream(s);
            std::vector<float> h(4);
            CHECK_THROWS_AS(gsync::allreduce(comm, std::span<float>(h), gsync::op::sum{}), gsync::error);
          }
          sync.bar.arrive_and_wait();
        },
        gsync_test::with_timeout(std::chrono::milliseconds(300)));
  }
  SUBCASE("a user operator that never returns: the watchdog releases the stream after the timeout and breaks the communicator") {
    // The first engine to call the operator blocks in it: that engine can neither finish nor fail
    // the operation, so only the gate watchdog opens the gate.
    std::vector<std::string> why(2);
    std::vector<double> held_s(2);
    gsync_test::run_inproc(
        2,
        [&](auto& comm, auto& sync) {
          gsync::prepare_device(comm);
          std::vector<float> dev(1000, 1.0f);
          gsync::cuda_stream s = fk.api.create_stream();
          const auto t0 = std::chrono::steady_clock::now();
          gsync::allreduce(comm, gsync::device_span<float>{dev.data(), dev.size()}, stalls_once{}, s);
          fk.api.synchronize(s);  // returns by the timeout plus the watchdog's margin on the rank whose engine is stuck
          held_s[static_cast<std::size_t>(comm.rank())] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          fk.api.destroy_stream(s);
          std::vector<float> h(4);
          try {
            gsync::allreduce(comm, std::span<float>(h), gsync::op::sum{});
          } catch (const gsync::error& e) {
            if (e.code() == gsync::errc::timeout) why[static_cast<std::size_t>(comm.rank())] = e.what();
          }
          sync.bar.arrive_and_wait();
          stalls_once::go() = true;  // the stuck engine goes on, finds its results abandoned, and stops
        },
        gsync_test::with_timeout(std::chrono::milliseconds(1000)));
    CHECK(stalls_once::claimed().load());
    CHECK(held_s[0] < 4.5);  // 1 s timeout + 1.25 s margin + polling; without the watchdog: 8 s
    CHECK(held_s[1] < 4.5);
    const bool named = why[0].find("made no progress") != std::string::npos || why[1].find("made no progress") != std::string::npos;
    CHECK(named);
  }
  SUBCASE("a CUDA error in a copy: the stream goes on, the error names CUDA, later queued work is dropped and released") {
    fk.api.fail_copy_from = 1;
    gsync_test::run_inproc(
        1,
        [&](auto& comm, auto&) {
          std::vector<float> a(5000, 1.0f), b(5000, 2.0f);
          gsync::cuda_stream s = fk.api.create_stream();
          gsync::request q = gsync::allreduce_async(comm, gsync::device_span<float>{a.data(), a.size()}, gsync::op::sum{}, s);
          try {  // queued behind the failing one (then dropped), or refused at the call once it has failed
            gsync::allreduce(comm, gsync::device_span<float>{b.data(), b.size()}, gsync::op::sum{}, s);
          } catch (const gsync::error&) {
          }
          fk.api.synchronize(s);
          fk.api.destroy_stream(s);
          try {
            q.wait();
            FAIL_CHECK("the request did not report the CUDA error");
          } catch (const gsync::error& e) {
            CHECK(e.code() == gsync::errc::cuda);
            CHECK(std::string(e.what()).find("cudaMemcpyAsync") != std::string::npos);
          }
          std::vector<float> h(4);
          CHECK_THROWS_AS(gsync::allreduce(comm, std::span<float>(h), gsync::op::sum{}), gsync::error);
        });
    fk.api.fail_copy_from = 0;
  }
}

TEST_CASE("device collectives: refused clearly without a CUDA runtime and under graph capture") {
  std::vector<float> a(16);
  {
    gsync::cuda::runtime_api* prev = gsync::cuda::set_runtime_api(nullptr);
    auto comms = gsync::make_inproc_world(1);
    try {
      gsync::allreduce(comms[0], gsync::device_span<float>{a.data(), a.size()}, gsync::op::sum{}, nullptr);
      FAIL("no error without a runtime");
    } catch (const gsync::error& e) {
      CHECK(e.code() == gsync::errc::cuda);
      CHECK(std::string(e.what()).find("nvcc") != std::string::npos);
    }
    gsync::cuda::set_runtime_api(prev);
  }
  fake_cuda_scope fk;
  fk.api.capture = true;
  auto comms = gsync::make_inproc_world(1);
  CHECK_THROWS_WITH_AS(gsync::allreduce(comms[0], gsync::device_span<float>{a.data(), a.size()}, gsync::op::sum{}, nullptr),
                       doctest::Contains("CUDA graph"), gsync::error);
}

namespace {

/// Element i of rank r's input for the block collectives (exact in every type: small integers).
template <class T>
T block_value(int r, std::size_t i) {
  return T(static_cast<float>((static_cast<std::size_t>(r) * 7 + i * 3) % 61));
}

}  // namespace

TEST_CASE("device collectives through staging: reduce_scatter, allgather, alltoall, broadcast, reduce, world sizes 1-5, windows") {
  fake_cuda_scope fk;
  for (std::size_t staging : {std::size_t{64} << 20, std::size_t{64} << 10})
    for (int n = 1; n <= 5; ++n)
      for (std::size_t c : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{20011}}) {
        CAPTURE(staging);
        CAPTURE(n);
        CAPTURE(c);
        gsync::config cfg;
        cfg.cuda_staging_bytes = staging;
        const std::size_t nc = static_cast<std::size_t>(n) * c;
        gsync_test::run_inproc(
            n,
            [&](auto& comm, auto&) {
              auto& api = fk.api;
              const int r = comm.rank();
              const int root = n - 1;
              std::vector<float> rs_in(nc), rs_out(c), ag_in(c), ag_out(nc), a2a_in(nc), a2a_out(nc), bc(c), rd_in(c), rd_out(c);
              gsync::cuda_stream s = api.create_stream();
              api.launch(s, [&] {
                for (std::size_t i = 0; i < nc; ++i) rs_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < c; ++i) ag_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < nc; ++i) a2a_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < c; ++i) bc[i] = r == root ? block_value<float>(r, i) : -1.0f;
                for (std::size_t i = 0; i < c; ++i) rd_in[i] = block_value<float>(r, i);
              });
              using dspan = gsync::device_span<float>;
              using cspan = gsync::device_span<const float>;
              gsync::reduce_scatter(comm, cspan{rs_in.data(), nc}, dspan{rs_out.data(), c}, gsync::op::sum{}, s);
              gsync::allgather(comm, cspan{ag_in.data(), c}, dspan{ag_out.data(), nc}, s);
              gsync::alltoall(comm, cspan{a2a_in.data(), nc}, dspan{a2a_out.data(), nc}, s);
              gsync::broadcast(comm, dspan{bc.data(), c}, root, s);
              gsync::reduce(comm, cspan{rd_in.data(), c}, dspan{rd_out.data(), c}, gsync::op::max{}, root, s);
              std::vector<float> seen_rs, seen_ag, seen_a2a, seen_bc, seen_rd;
              api.launch(s, [&] {
                seen_rs = rs_out;
                seen_ag = ag_out;
                seen_a2a = a2a_out;
                seen_bc = bc;
                seen_rd = rd_out;
              });
              api.synchronize(s);
              api.destroy_stream(s);
              std::size_t bad_rs = 0, bad_ag = 0, bad_a2a = 0, bad_bc = 0, bad_rd = 0;
              for (std::size_t i = 0; i < c; ++i) {
                float sum = 0, mx = block_value<float>(0, i);
                for (int q = 0; q < n; ++q) sum += block_value<float>(q, static_cast<std::size_t>(r) * c + i);
                for (int q = 0; q < n; ++q) mx = std::max(mx, block_value<float>(q, i));
                bad_rs += seen_rs[i] != sum;
                bad_bc += seen_bc[i] != block_value<float>(root, i);
                if (r == root) bad_rd += seen_rd[i] != mx;
              }
              for (int q = 0; q < n; ++q)
                for (std::size_t i = 0; i < c; ++i) {
                  bad_ag += seen_ag[static_cast<std::size_t>(q) * c + i] != block_value<float>(q, i);
                  bad_a2a += seen_a2a[static_cast<std::size_t>(q) * c + i] != block_value<float>(q, static_cast<std::size_t>(r) * c + i);
                }
              CHECK(bad_rs == 0);
              CHECK(bad_ag == 0);
              CHECK(bad_a2a == 0);
              CHECK(bad_bc == 0);
              CHECK(bad_rd == 0);
            },
            cfg);
      }
}

TEST_CASE("device send / recv / sendrecv through staging: a ring shift, messages cut in windows, host and device peers mixed") {
  fake_cuda_scope fk;
  gsync::config cfg;
  cfg.cuda_staging_bytes = 64 << 10;  // messages of 8K doubles per window
  for (int n : {2, 3, 4})
    for (std::size_t c : {std::size_t{0}, std::size_t{5}, std::size_t{30001}}) {
      CAPTURE(n);
      CAPTURE(c);
      gsync_test::run_inproc(
          n,
          [&](auto& comm, auto&) {
            auto& api = fk.api;
            const int r = comm.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
            std::vector<double> a(c), b(c), d(c), e(c);
            for (std::size_t i = 0; i < c; ++i) a[i] = block_value<double>(r, i);
            gsync::cuda_stream s = api.create_stream();
            // Ranks of one process share the device: each makes its staging memory before any
            // stream waits for a peer (the first device operation is point-to-point; the fake's
            // allocations synchronise the device as CUDA's do).
            gsync::prepare_device(comm);
            // a device sendrecv shift; then even ranks send from the device to odd ranks, which receive
            // on the host (device too above half the staging size: such messages travel cut), and back
            const bool mixed = c * sizeof(double) <= cfg.cuda_staging_bytes / 2;
            const bool pair = r % 2 == 0 ? next != r && (n % 2 == 0 || r != n - 1) : true;
            gsync::sendrecv(comm, gsync::device_span<double>{a.data(), c}, next, 3, gsync::device_span<double>{b.data(), c}, prev, 3, s);
            if (r % 2 == 0 && pair) {
              gsync::send(comm, gsync::device_span<double>{a.data(), c}, next, 4, s);
              gsync::recv(comm, gsync::device_span<double>{e.data(), c}, next, 5, s);
            }
            if (r % 2 == 1) {
              if (mixed) {
                gsync::recv(comm, std::span<double>(d), prev, 4);
                gsync::send(comm, std::span<const double>(a), prev, 5);
              } else {
                gsync::recv(comm, gsync::device_span<double>{d.data(), c}, prev, 4, s);
                gsync::send(comm, gsync::device_span<const double>{a.data(), c}, prev, 5, s);
              }
            }
            api.synchronize(s);
            api.destroy_stream(s);
            std::size_t bad = 0;
            for (std::size_t i = 0; i < c; ++i) {
              bad += b[i] != block_value<double>(prev, i);
              if (r % 2 == 1) bad += d[i] != block_value<double>(prev, i);
              if (r % 2 == 0 && pair) bad += e[i] != block_value<double>(next, i);
            }
            CHECK(bad == 0);
          },
          cfg);
    }
}

TEST_CASE("device allreduce through staging over shared memory and TCP links") {
  fake_cuda_scope fk;
  gsync::config cfg;
  cfg.cuda_staging_bytes = 256 << 10;
  const std::size_t count = 200003;  // several windows, each a pipelined ring
  auto body = [&](auto& comm, auto&) {
    const int r = comm.rank(), n = comm.size();
    std::vector<float> dev(count), host(count), seen;
    for (std::size_t i = 0; i < count; ++i) host[i] = gsync_test::input<float, gsync::op::sum>(r, i);
    gsync::cuda_stream s = fk.api.create_stream();
    fk.api.launch(s, [&] { dev = host; });
    gsync::allreduce(comm, gsync::device_span<float>{dev.data(), count}, gsync::op::sum{}, s);
    fk.api.launch(s, [&] { seen = dev; });
    fk.api.synchronize(s);
    fk.api.destroy_stream(s);
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<float, gsync::op::sum>(seen[i], n, i);
    CHECK(off == 0);
  };
  SUBCASE("shm, 3 ranks") { gsync_test::run_shm(3, body, cfg); }
  SUBCASE("tcp, 4 ranks") { gsync_test::run_tcp(4, body, cfg); }
}

TEST_CASE("device sendrecv with this rank itself: a local copy after the copy-in has landed") {
  fake_cuda_scope fk;
  gsync_test::run_inproc(1, [&](auto& comm, auto&) {
    const std::size_t c = 300007;  // many 1 MiB pieces: the copy-in is still landing when the window starts
    std::vector<float> a(c), b(c, -1.0f);
    gsync::cuda_stream s = fk.api.create_stream();
    fk.api.launch(s, [&] {
      for (std::size_t i = 0; i < c; ++i) a[i] = static_cast<float>(i % 1009);
    });
    gsync::sendrecv(comm, gsync::device_span<float>{a.data(), c}, 0, 9, gsync::device_span<float>{b.data(), c}, 0, 9, s);
    fk.api.synchronize(s);
    fk.api.destroy_stream(s);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < c; ++i) bad += b[i] != static_cast<float>(i % 1009);
    CHECK(bad == 0);
  });
}

TEST_CASE("device gather, scatter, allgatherv, reduce_scatterv, alltoallv through staging: world sizes 1-5, windows, uneven counts") {
  fake_cuda_scope fk;
  for (std::size_t staging : {std::size_t{64} << 20, std::size_t{64} << 10})
    for (int n = 1; n <= 5; ++n)
      for (std::size_t c : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{20011}}) {
        CAPTURE(staging);
        CAPTURE(n);
        CAPTURE(c);
        gsync::config cfg;
        cfg.cuda_staging_bytes = staging;
        const auto N = static_cast<std::size_t>(n);
        const std::size_t nc = N * c;
        // Uneven counts: block b holds c elements for odd b, c/3 + b for even b (0 when c is).
        std::vector<std::size_t> counts(N), off(N + 1, 0);
        for (std::size_t b = 0; b < N; ++b) counts[b] = c == 0 ? 0 : b % 2 ? c : c / 3 + b;
        for (std::size_t b = 0; b < N; ++b) off[b + 1] = off[b] + counts[b];
        const std::size_t total = off[N];
        gsync_test::run_inproc(
            n,
            [&](auto& comm, auto&) {
              auto& api = fk.api;
              const int r = comm.rank();
              const auto R = static_cast<std::size_t>(r);
              const int root = n / 2;
              // alltoallv: rank 0 sends rank j counts[j] elements, rank i > 0 sends counts[(i + j) % N] / (i + 1),
              // so the ranks' largest blocks, and their numbers of windows, differ.
              auto pair = [&](std::size_t i, std::size_t j) { return i == 0 ? counts[j] : counts[(i + j) % N] / (i + 1); };
              std::vector<std::size_t> sc(N), rc(N);
              for (std::size_t j = 0; j < N; ++j) {
                sc[j] = pair(R, j);
                rc[j] = pair(j, R);
              }
              std::size_t st = 0, rt = 0;
              for (std::size_t j = 0; j < N; ++j) st += sc[j], rt += rc[j];
              std::vector<float> g_in(c), g_out(r == root ? nc : 0), s_in(r == root ? nc : 0), s_out(c), av_in(counts[R]), av_out(total),
                  rv_in(total), rv_out(counts[R]), a_in(st), a_out(rt);
              gsync::cuda_stream s = api.create_stream();
              api.launch(s, [&] {
                for (std::size_t i = 0; i < c; ++i) g_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < s_in.size(); ++i) s_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < av_in.size(); ++i) av_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < total; ++i) rv_in[i] = block_value<float>(r, i);
                for (std::size_t i = 0; i < st; ++i) a_in[i] = block_value<float>(r, i);
              });
              using dspan = gsync::device_span<float>;
              using cspan = gsync::device_span<const float>;
              gsync::gather(comm, cspan{g_in.data(), c}, dspan{g_out.data(), g_out.size()}, root, s);
              gsync::scatter(comm, cspan{s_in.data(), s_in.size()}, dspan{s_out.data(), c}, root, s);
              gsync::allgatherv(comm, cspan{av_in.data(), av_in.size()}, dspan{av_out.data(), total}, counts, s);
              gsync::reduce_scatterv(comm, cspan{rv_in.data(), total}, dspan{rv_out.data(), rv_out.size()}, counts, gsync::op::sum{}, s);
              auto last = gsync::alltoallv_async(comm, cspan{a_in.data(), st}, sc, dspan{a_out.data(), rt}, rc, s);
              std::vector<float> seen_g, seen_s, seen_av, seen_rv, seen_a;
              api.launch(s, [&] {
                seen_g = g_out;
                seen_s = s_out;
                seen_av = av_out;
                seen_rv = rv_out;
                seen_a = a_out;
              });
              api.synchronize(s);
              last.wait();
              api.destroy_stream(s);
              std::size_t bad_g = 0, bad_s = 0, bad_av = 0, bad_rv = 0, bad_a = 0;
              if (r == root)
                for (std::size_t q = 0; q < N; ++q)
                  for (std::size_t i = 0; i < c; ++i) bad_g += seen_g[q * c + i] != block_value<float>(static_cast<int>(q), i);
              for (std::size_t i = 0; i < c; ++i) bad_s += seen_s[i] != block_value<float>(root, R * c + i);
              for (std::size_t q = 0; q < N; ++q)
                for (std::size_t i = 0; i < counts[q]; ++i) bad_av += seen_av[off[q] + i] != block_value<float>(static_cast<int>(q), i);
              for (std::size_t i = 0; i < counts[R]; ++i) {
                float sum = 0;
                for (int q = 0; q < n; ++q) sum += block_value<float>(q, off[R] + i);
                bad_rv += seen_rv[i] != sum;
              }
              std::size_t at = 0;  // block j of the output: rank j's block for this rank, which starts at rank j's offset of it
              for (std::size_t j = 0; j < N; ++j) {
                std::size_t from_at = 0;  // where rank j's block for rank r starts in rank j's input
                for (std::size_t k = 0; k < R; ++k) from_at += pair(j, k);
                for (std::size_t i = 0; i < rc[j]; ++i) bad_a += seen_a[at + i] != block_value<float>(static_cast<int>(j), from_at + i);
                at += rc[j];
              }
              CHECK(bad_g == 0);
              CHECK(bad_s == 0);
              CHECK(bad_av == 0);
              CHECK(bad_rv == 0);
              CHECK(bad_a == 0);
            },
            cfg);
      }
}

// A registration's hold that counts how many live.
struct counted_hold final : gsync::registration_hold {
  explicit counted_hold(std::atomic<int>& n) : live(n) { ++live; }
  ~counted_hold() override { --live; }
  std::atomic<int>& live;
};

TEST_CASE("device staging: the mirrors are registered once per allocation, the registrations ending before the memory goes") {
  fake_cuda_scope fk;
  std::vector<std::pair<const std::byte*, std::size_t>> made;
  std::atomic<int> live{0};
  auto reg = [&](std::byte* p, std::size_t n) {
    made.emplace_back(p, n);
    return gsync::memory_registration(std::span<const std::byte>(p, n), {std::make_shared<const counted_hold>(live)});
  };
  {
    gsync::cuda::detail::device_state st(fk.api, 64 << 10, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    st.register_mirrors(reg);
    REQUIRE(made.size() == 2);  // both mirrors
    CHECK(made[0].first != made[1].first);
    CHECK(made[0].second == gsync::cuda::detail::device_state::mirror_capacity(64 << 10));
    CHECK(live == 2);
    CHECK(st.mirror_adapters() == 1);
    st.register_mirrors(reg);  // the same memory: nothing new
    CHECK(made.size() == 2);
    st.ensure_capacity(std::size_t{1} << 20, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    CHECK(live == 0);  // ended with the old memory
    st.register_mirrors(reg);  // grown: registered again, at the new size
    REQUIRE(made.size() == 4);
    CHECK(made[2].second == std::size_t{1} << 20);
    CHECK(made[3].second == std::size_t{1} << 20);
    CHECK(live == 2);
  }
  CHECK(live == 0);
}
