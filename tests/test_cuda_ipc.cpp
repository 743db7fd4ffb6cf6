// Device collectives over CUDA IPC (cuda/ipc_*.hpp, detail/ipc_*.hpp) on the host stand-in of the
// CUDA runtime (support/fake_cuda.hpp): the set-up decisions and the arithmetic of arenas, chunks
// and slices; then whole collectives on in-process worlds (ranks of one process reach each other's
// arenas by pointer), where the fake's streams run the stream memory operations and the IPC
// reduction kernel's element engine asynchronously, as a GPU would. Results are checked against
// the double-precision reference and bit for bit across ranks; the counters of the fake prove
// which path ran (no bytes through host staging on the IPC path).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <gsync/gsync.hpp>

#include "support/env.hpp"
#include "support/fake_cuda.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

using gsync_test::fake_cuda;
using gsync_test::fake_cuda_scope;
namespace ipc = gsync::cuda::ipc;

TEST_CASE("CUDA IPC plan: arena size, chunks and two-shot slices cover every element once") {
  ipc::arena_layout a;
  a.slot_bytes = 8 << 20;
  CHECK(a.bytes() == (16u << 20));
  a.slot_bytes = (1 << 20) + 4;
  CHECK(a.bytes() == (4u << 20));  // 2 slots rounded up to 2 MiB
  CHECK(a.slot_offset(1) == a.slot_bytes);
  CHECK(a.slot_offset(2) == 0);

  CHECK(ipc::chunks(0, 10) == 0);
  CHECK(ipc::chunks(10, 10) == 1);
  CHECK(ipc::chunks(11, 10) == 2);
  CHECK(ipc::chunk(25, 10, 2) == ipc::range{20, 5});
  CHECK(ipc::chunk_elems(64 << 10, 4) == 16384);

  for (std::size_t elem : {1u, 2u, 4u, 8u})
    for (int n = 1; n <= 9; ++n)
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{255}, std::size_t{4097},
                                std::size_t{1000003}}) {
        CAPTURE(elem);
        CAPTURE(n);
        CAPTURE(count);
        std::size_t next = 0;
        for (int r = 0; r < n; ++r) {
          const ipc::range s = ipc::slice(count, n, r, elem);
          if (s.count) {
            CHECK(s.first == next);                                   // consecutive, no gap or overlap
            CHECK((s.first * elem) % ipc::slice_align_bytes == 0);    // aligned starts
          }
          next = s.first + s.count;
        }
        CHECK(next == count);
      }
}

TEST_CASE("device allreduce algorithms: the model's choice, GSYNC_CUDA_IPC_ALGO, reasons and names") {
  namespace algo = gsync::algo;
  using reg = algo::device_allreduce_registry;
  const algo::ipc_cost_model m;  // 8 MiB slots
  auto pick = [&](std::size_t bytes, int n, const char* forced = "") { return algo::choose_device_allreduce(bytes, n, 1, m, forced); };
  CHECK(pick(256 << 20, 2).id == reg::id_of<algo::one_shot>());  // two GPUs: two-shot reads as much and waits twice
  CHECK(pick(1024, 4).id == reg::id_of<algo::one_shot>());
  CHECK(pick(64 << 20, 4).id == reg::id_of<algo::two_shot>());
  CHECK(pick(400 << 10, 8).id == reg::id_of<algo::two_shot>());
  CHECK(pick(400 << 10, 4).id == reg::id_of<algo::one_shot>());
  CHECK(pick(1, 1).id == reg::id_of<algo::one_shot>());
  // The crossover follows the model: one-shot while a round costs more than the reads it saves.
  for (int n = 3; n <= 8; ++n) {
    CAPTURE(n);
    const double cross = m.step_us * m.read_gbps * 1e3 * n / ((n - 1) * (n - 2));  // bytes where both estimates meet (one chunk)
    if (cross < static_cast<double>(m.slot_bytes)) {
      CHECK(pick(static_cast<std::size_t>(cross * 0.9), n).id == reg::id_of<algo::one_shot>());
      CHECK(pick(static_cast<std::size_t>(cross * 1.1), n).id == reg::id_of<algo::two_shot>());
    }
  }
  const auto c = pick(1 << 20, 4);
  CHECK(c.runner_up.has_value());
  CHECK(c.cost_us < c.runner_up_us);
  CHECK(c.reason().find("cheapest by the device model") != std::string::npos);
  CHECK(c.reason().find("one_shot") != std::string::npos);  // names the runner-up
  CHECK(pick(8, 4, "twoshot").id == reg::id_of<algo::two_shot>());
  CHECK(pick(1 << 30, 8, "oneshot").id == reg::id_of<algo::one_shot>());
  CHECK(pick(8, 4, "twoshot").reason().find("forced by GSYNC_CUDA_IPC_ALGO=twoshot") != std::string::npos);
  CHECK_THROWS_AS(pick(8, 4, "ring"), gsync::error);
  // Several hosts: the hierarchical form, the only device algorithm there.
  const auto h = algo::choose_device_allreduce(1 << 20, 4, 2, m, "");
  CHECK(h.id == reg::id_of<algo::hierarchical_ipc>());
  CHECK(h.cost_us > 0);
  CHECK(h.reason().find("the only device algorithm") != std::string::npos);
  // Names: the registry's, their aliases, and what the host parser says of them.
  CHECK(reg::find("one_shot") == reg::id_of<algo::one_shot>());
  CHECK(reg::find("oneshot") == reg::id_of<algo::one_shot>());
  CHECK(reg::find("two-shot") == reg::id_of<algo::two_shot>());
  CHECK(reg::find("hier_ipc") == reg::id_of<algo::hierarchical_ipc>());
  CHECK(!reg::find("ring"));
  CHECK_THROWS_WITH_AS(algo::parse_allreduce("two_shot", "gsync-perf -a"), doctest::Contains("device buffers"), gsync::error);
  CHECK_THROWS_WITH_AS(algo::parse_allreduce("threeshot", "GSYNC_ALGO"), doctest::Contains("one_shot, two_shot, hierarchical_ipc"),
                       gsync::error);
  // A device name in GSYNC_ALGO leaves the host choice automatic.
  const auto host = algo::choose_allreduce(1 << 20, 4, gsync::link_costs{}, "one_shot");
  CHECK(host.reason().find("forced") == std::string::npos);
  gsync_test::scoped_env e("GSYNC_CUDA_IPC_ALGO", "fastest");
  CHECK_THROWS_AS(gsync::config::from_env(), gsync::error);
}

TEST_CASE("CUDA IPC set-up decisions: which peers map each other's arenas, and why not") {
  auto rec = [](int rank, int pid) {
    ipc::peer_record r;
    r.rank = rank;
    r.pid = pid;
    r.pid_ns = 4026531836u;
    ipc::set_field(r.machine, "boot-1");
    r.device.uuid.fill(7);
    r.slot_bytes = 8 << 20;
    r.ready = 1;
    return r;
  };
  const auto a = rec(0, 100), b = rec(1, 200);
  CHECK(ipc::decide(a, b).how == ipc::peer_access::ipc);
  CHECK(ipc::decide(a, rec(1, 100)).how == ipc::peer_access::same_process);  // a process cannot open its own handles

  auto other_ns = b;
  other_ns.pid_ns = 1;
  CHECK(ipc::decide(a, other_ns).how == ipc::peer_access::none);
  CHECK(ipc::decide(a, other_ns).why.find("PID namespace") != std::string::npos);

  auto other_machine = b;
  ipc::set_field(other_machine.machine, "boot-2");
  CHECK(ipc::decide(a, other_machine).why.find("another machine") != std::string::npos);

  auto disabled = b;
  disabled.enabled = 0;
  CHECK(ipc::decide(a, disabled).why.find("GSYNC_CUDA_IPC_DISABLE=1 on rank 1") != std::string::npos);

  auto broken = b;
  broken.refuse("cudaMalloc failed: out of memory");
  CHECK(ipc::decide(a, broken).why == "rank 1: cudaMalloc failed: out of memory");

  auto exclusive = b;
  exclusive.device.compute_mode = 3;
  CHECK(ipc::decide(a, exclusive).why.find("exclusive-process") != std::string::npos);
  exclusive.device.uuid.fill(8);  // another GPU in exclusive mode: fine
  CHECK(ipc::decide(a, exclusive).how == ipc::peer_access::ipc);

  auto old = b;
  old.version = 0;
  CHECK(ipc::decide(a, old).how == ipc::peer_access::none);

  std::vector<ipc::peer_record> all{a, b, rec(2, 300)};
  CHECK(ipc::group_refusal(all).empty());
  all[2].slot_bytes = 1 << 20;
  CHECK(ipc::group_slot_bytes(all) == (1u << 20));
  all[2] = other_ns;
  all[2].rank = 2;
  CHECK(!ipc::group_refusal(all).empty());
  std::vector<ipc::peer_record> many;
  for (int r = 0; r <= gsync::cuda::max_ipc_ranks; ++r) many.push_back(rec(r, 100));
  CHECK(ipc::group_refusal(many).find("at most") != std::string::npos);
}

TEST_CASE("CUDA IPC settings: GSYNC_CUDA_IPC_* are read in config and checked") {
  {
    gsync_test::scoped_env e("GSYNC_CUDA_IPC_DISABLE", "1");
    CHECK(!gsync::config::from_env().cuda_ipc.enabled);
  }
  {
    gsync_test::scoped_env e("GSYNC_CUDA_IPC_DISABLE", "yes");
    CHECK_THROWS_AS(gsync::config::from_env(), gsync::error);
  }
  {
    gsync_test::scoped_env e("GSYNC_CUDA_IPC_BUFFER", "1M");
    CHECK(gsync::config::from_env().cuda_ipc.slot_bytes == (1u << 20));
  }
  {
    gsync_test::scoped_env e("GSYNC_CUDA_IPC_BUFFER", "4K");
    CHECK_THROWS_AS(gsync::config::from_env(), gsync::error);
  }
  {  // a slot size that is not whole 256-byte units would misalign the second slot
    gsync_test::scoped_env e("GSYNC_CUDA_IPC_BUFFER", "100000");
    CHECK_THROWS_AS(gsync::config::from_env(), gsync::error);
  }
  CHECK(gsync::config::from_env().cuda_ipc.enabled);
}

namespace {

/// Allreduce of `count` elements on `n` ranks over device buffers; checks every element against
/// the reference and that every rank holds the same bits.
template <class T, class Op>
void ipc_allreduce_case(fake_cuda& api, int n, std::size_t count, bool out_of_place, gsync::config cfg) {
  std::vector<std::vector<T>> results(static_cast<std::size_t>(n));
  gsync_test::run_inproc(
      n,
      [&](auto& comm, auto& sync) {
        const int r = comm.rank();
        std::vector<T> dev(count), dev_out(count);
        gsync::cuda_stream s = api.create_stream();
        api.launch(s, [&] {
          for (std::size_t i = 0; i < count; ++i) dev[i] = gsync_test::input<T, Op>(r, i);
        });
        for (int rep = 0; rep < 2; ++rep) {  // twice: the second call reuses the slots of the first
          if (rep)
            api.launch(s, [&] {
              for (std::size_t i = 0; i < count; ++i) dev[i] = gsync_test::input<T, Op>(r, i);
            });
          if (out_of_place)
            gsync::allreduce(comm, gsync::device_span<const T>{dev.data(), count}, gsync::device_span<T>{dev_out.data(), count}, Op{},
                             s);
          else
            gsync::allreduce(comm, gsync::device_span<T>{dev.data(), count}, Op{}, s);
        }
        api.synchronize(s);
        api.destroy_stream(s);
        const std::vector<T>& seen = out_of_place ? dev_out : dev;
        std::size_t off = 0;
        for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<T, Op>(seen[i], n, i);
        CHECK(off == 0);
        results[static_cast<std::size_t>(r)] = seen;
        sync.bar.arrive_and_wait();
      },
      cfg);
  for (int r = 1; r < n; ++r)
    CHECK(std::memcmp(results[static_cast<std::size_t>(r)].data(), results[0].data(), count * sizeof(T)) == 0);
}

/// A user operator (not one the IPC kernels know).
struct absmax {
  static constexpr std::string_view name = "absmax";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return (a < 0 ? -a : a) < (b < 0 ? -b : b) ? b : a; }
};

/// User operators given a GPU reduction, as a .cu file gives every operator (cuda/ipc_kernels.cuh):
/// here the fake's stand-in of that kernel (support/fake_cuda.hpp `fake_user_reduction`).
struct absmax_dev {
  static constexpr std::string_view name = "absmax_dev";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return (a < 0 ? -a : a) < (b < 0 ? -b : b) ? b : a; }
};
/// A user mean: sums, then its finalize divides by the world size once.
struct mean_dev {
  static constexpr std::string_view name = "mean_dev";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return a + b; }
  template <class A> GSYNC_HD constexpr A finalize(A v, int n) const noexcept { return v / static_cast<A>(n); }
};

gsync::config ipc_config(std::size_t slot_bytes, const char* algo) {
  gsync::config c;
  c.cuda_ipc.slot_bytes = slot_bytes;
  c.cuda_ipc.algo = algo;
  return c;
}

}  // namespace

namespace gsync::cuda {
template <class T>
struct ipc_user_reduction<T, absmax_dev> : gsync_test::fake_user_reduction<T, absmax_dev> {};
template <class T>
struct ipc_user_reduction<T, mean_dev> : gsync_test::fake_user_reduction<T, mean_dev> {};
}  // namespace gsync::cuda

namespace {
/// Value of rank r at i for the user-operator tests: signs and magnitudes that differ by rank.
float user_input(int r, std::size_t i) { return static_cast<float>((static_cast<int>(i % 17) - 8) * (r + 1)) * (r % 2 ? -0.75f : 0.5f); }
}  // namespace

TEST_CASE("device collectives over CUDA IPC: a user operator runs in the IPC kernels, bitwise equal on every rank, finalized once") {
  fake_cuda_scope fk(true);
  for (const char* algo : {"oneshot", "twoshot"})
    for (int n : {2, 3, 4})
      for (std::size_t count : {std::size_t{1021}, std::size_t{40000}}) {
        CAPTURE(algo);
        CAPTURE(n);
        CAPTURE(count);
        std::vector<std::vector<float>> amax(static_cast<std::size_t>(n)), mean(static_cast<std::size_t>(n));
        std::vector<std::vector<gsync::bfloat16>> mean16(static_cast<std::size_t>(n));
        gsync_test::run_inproc(n, [&](auto& comm, auto&) {
          const int r = comm.rank();
          const std::size_t R = static_cast<std::size_t>(r);
          std::vector<float> a(count), m(count), blocks(count * static_cast<std::size_t>(n)), rs(count), red(count);
          std::vector<gsync::bfloat16> h(count);
          for (std::size_t i = 0; i < count; ++i) a[i] = m[i] = user_input(r, i), h[i] = gsync::bfloat16(user_input(r, i));
          for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = user_input(r, i);
          gsync::cuda_stream s = fk.api.create_stream();
          gsync::allreduce(comm, gsync::device_span<float>{a.data(), count}, absmax_dev{}, s);
          gsync::allreduce(comm, gsync::device_span<float>{m.data(), count}, mean_dev{}, s);
          gsync::allreduce(comm, gsync::device_span<gsync::bfloat16>{h.data(), count}, mean_dev{}, s);
          gsync::reduce_scatter(comm, gsync::device_span<const float>{blocks.data(), blocks.size()}, gsync::device_span<float>{rs.data(), count},
                                absmax_dev{}, s);
          gsync::reduce(comm, gsync::device_span<const float>{blocks.data(), count}, gsync::device_span<float>{red.data(), count}, mean_dev{},
                        n - 1, s);
          fk.api.synchronize(s);
          fk.api.destroy_stream(s);
          std::size_t off = 0;
          for (std::size_t i = 0; i < count; ++i) {
            float want_a = user_input(0, i), want_rs = user_input(0, R * count + i);
            double sum = 0;
            for (int q = 0; q < n; ++q) {
              want_a = absmax_dev{}(want_a, user_input(q, i));
              want_rs = absmax_dev{}(want_rs, user_input(q, R * count + i));
              sum += user_input(q, i);
            }
            off += a[i] != want_a;
            off += rs[i] != want_rs;
            off += std::abs(m[i] - sum / n) > 1e-5;
            off += std::abs(static_cast<float>(h[i]) - sum / n) > 0.05 * (1 + std::abs(sum / n));
            if (r == n - 1) off += std::abs(red[i] - sum / n) > 1e-5;
          }
          CHECK(off == 0);
          amax[R] = a;
          mean[R] = m;
          mean16[R] = h;
        }, ipc_config(64 << 10, algo));
        for (int r = 1; r < n; ++r) {
          const std::size_t R = static_cast<std::size_t>(r);
          CHECK(std::memcmp(amax[R].data(), amax[0].data(), count * sizeof(float)) == 0);
          CHECK(std::memcmp(mean[R].data(), mean[0].data(), count * sizeof(float)) == 0);
          CHECK(std::memcmp(mean16[R].data(), mean16[0].data(), count * 2) == 0);
        }
      }
  CHECK(fk.ipc.user_calls.load() > 0);
  CHECK(fk.api.d2h_bytes.load() == 0);  // nothing through host staging
}

TEST_CASE("device allreduce over CUDA IPC: each element size and kind x every op, one-shot and two-shot, world sizes 1-4") {
  fake_cuda_scope fk(true);
  const bool small = std::getenv("GSYNC_TEST_MEDIUM") != nullptr;  // under the sanitizers: fewer shapes
  for (const char* algo : {"oneshot", "twoshot"})
    for (int n : {1, 2, 3, 4})
      for (std::size_t count : {std::size_t{1}, std::size_t{67}, std::size_t{1021}}) {
        if (small && (count == 67 || n == 3)) continue;
        gsync_test::for_each_device_dtype([&]<class T>() {
          gsync_test::for_each_op([&]<class Op>() {
            CAPTURE(algo);
            CAPTURE(n);
            CAPTURE(count);
            CAPTURE(gsync::name(gsync::dtype_of<T>));
            CAPTURE(gsync::detail::op_name<Op>());
            ipc_allreduce_case<T, Op>(fk.api, n, count, count % 2 == 1, ipc_config(64 << 10, algo));
          });
        });
      }
  CHECK(fk.ipc.calls.load() > 0);
  CHECK(fk.api.d2h_bytes.load() == 0);  // nothing went through host staging
  CHECK(fk.api.exportable_now.load() == 0);
  CHECK(fk.api.registered_now.load() == 0);
}

TEST_CASE("device allreduce over CUDA IPC: messages of many chunks, world sizes 1-8, automatic schedule") {
  fake_cuda_scope fk(true);
  for (int n = 1; n <= 8; ++n)
    for (std::size_t count : {std::size_t{16384}, std::size_t{16385}, std::size_t{100003}}) {  // slots of 16K floats
      CAPTURE(n);
      CAPTURE(count);
      ipc_allreduce_case<float, gsync::op::sum>(fk.api, n, count, false, ipc_config(64 << 10, ""));
      ipc_allreduce_case<float, gsync::op::avg>(fk.api, n, count, true, ipc_config(64 << 10, "twoshot"));
      ipc_allreduce_case<gsync::bfloat16, gsync::op::sum>(fk.api, n, count, false, ipc_config(64 << 10, "twoshot"));
    }
  CHECK(fk.api.d2h_bytes.load() == 0);
}

TEST_CASE("device reduce and broadcast over CUDA IPC: a slow reader holds back the ranks that would overwrite its slots") {
  // The reading rank (reduce: the root; broadcast: a non-root) is slow; the others do not wait for
  // its arrival at each step, so only the wait for its `done` before a slot is reused keeps them
  // from copying chunk k+2 over the chunk k it is still reading.
  fake_cuda_scope fk(true);
  const std::size_t count = 16384 * 6 + 5;  // 7 chunks of the 64K slots
  for (int root : {0, 2}) {
    CAPTURE(root);
    gsync_test::run_inproc(
        3,
        [&](auto& comm, auto&) {
          const int r = comm.rank();
          std::vector<float> in(count), out(count, -1.0f), data(count);
          for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<float, gsync::op::sum>(r, i);
          for (std::size_t i = 0; i < count; ++i) data[i] = r == root ? static_cast<float>(i % 1000) : -1.0f;
          gsync::cuda_stream s = fk.api.create_stream();
          gsync_test::slow_stream_us = r == root ? 20000 : 0;
          gsync::reduce(comm, gsync::device_span<const float>{in.data(), count}, gsync::device_span<float>{out.data(), count},
                        gsync::op::sum{}, root, s);
          gsync_test::slow_stream_us = r == (root + 1) % 3 ? 20000 : 0;
          gsync::broadcast(comm, gsync::device_span<float>{data.data(), count}, root, s);
          fk.api.synchronize(s);
          fk.api.destroy_stream(s);
          gsync_test::slow_stream_us = 0;
          std::size_t off = 0, boff = 0;
          if (r == root)
            for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<float, gsync::op::sum>(out[i], 3, i);
          for (std::size_t i = 0; i < count; ++i) boff += data[i] != static_cast<float>(i % 1000);
          CHECK(off == 0);
          CHECK(boff == 0);
        },
        ipc_config(64 << 10, ""));
  }
  CHECK(fk.api.d2h_bytes.load() == 0);
}

TEST_CASE("device collectives over CUDA IPC: reduce-scatter, allgather, broadcast, reduce and alltoall, world sizes 1-5") {
  fake_cuda_scope fk(true);
  for (int n = 1; n <= 5; ++n)
    for (std::size_t count : {std::size_t{1}, std::size_t{333}, std::size_t{40001}}) {  // up to 3 chunks of the 64K slots
      CAPTURE(n);
      CAPTURE(count);
      const std::size_t N = static_cast<std::size_t>(n);
      gsync_test::run_inproc(
          n,
          [&](auto& comm, auto&) {
            const int r = comm.rank();
            const int root = n - 1;
            std::vector<std::int64_t> blocks(N * count), mine(count), gathered(N * count), data(count), in(count), red(count, -7);
            for (std::size_t i = 0; i < N * count; ++i) blocks[i] = gsync_test::input<std::int64_t, gsync::op::max>(r, i);
            for (std::size_t i = 0; i < count; ++i) {
              in[i] = gsync_test::input<std::int64_t, gsync::op::sum>(r, i);
              data[i] = r == root ? static_cast<std::int64_t>(i * 3 + 1) : 0;
            }
            gsync::cuda_stream s = fk.api.create_stream();
            gsync::reduce_scatter(comm, gsync::device_span<const std::int64_t>{blocks.data(), N * count},
                                  gsync::device_span<std::int64_t>{mine.data(), count}, gsync::op::max{}, s);
            gsync::allgather(comm, gsync::device_span<const std::int64_t>{mine.data(), count},
                             gsync::device_span<std::int64_t>{gathered.data(), N * count}, s);
            gsync::broadcast(comm, gsync::device_span<std::int64_t>{data.data(), count}, root, s);
            gsync::reduce(comm, gsync::device_span<const std::int64_t>{in.data(), count}, gsync::device_span<std::int64_t>{red.data(), count},
                          gsync::op::sum{}, 0, s);
            std::vector<std::int64_t> sent(N * count), got(N * count);
            for (std::size_t p = 0; p < N; ++p)
              for (std::size_t i = 0; i < count; ++i) sent[p * count + i] = static_cast<std::int64_t>(r * 1000003 + p * 7919 + i);
            gsync::alltoall(comm, gsync::device_span<const std::int64_t>{sent.data(), N * count},
                            gsync::device_span<std::int64_t>{got.data(), N * count}, s);
            fk.api.synchronize(s);
            fk.api.destroy_stream(s);
            std::size_t off = 0;
            for (std::size_t i = 0; i < count; ++i)
              off += !gsync_test::check_element<std::int64_t, gsync::op::max>(mine[i], n, static_cast<std::size_t>(r) * count + i);
            for (std::size_t i = 0; i < N * count; ++i) off += !gsync_test::check_element<std::int64_t, gsync::op::max>(gathered[i], n, i);
            for (std::size_t i = 0; i < count; ++i) off += data[i] != static_cast<std::int64_t>(i * 3 + 1);
            for (std::size_t i = 0; i < count; ++i)
              off += r == 0 ? !gsync_test::check_element<std::int64_t, gsync::op::sum>(red[i], n, i) : red[i] != -7;  // only the root's out
            for (std::size_t p = 0; p < N; ++p)
              for (std::size_t i = 0; i < count; ++i)
                off += got[p * count + i] != static_cast<std::int64_t>(static_cast<std::size_t>(p) * 1000003 + static_cast<std::size_t>(r) * 7919 + i);
            CHECK(off == 0);
          },
          ipc_config(64 << 10, ""));
    }
  CHECK(fk.api.d2h_bytes.load() == 0);
}

TEST_CASE("device collectives over CUDA IPC: host staging where the IPC path does not apply, with right results") {
  SUBCASE("GSYNC_CUDA_IPC_DISABLE") {
    fake_cuda_scope fk(true);
    gsync::config cfg = ipc_config(64 << 10, "");
    cfg.cuda_ipc.enabled = false;
    ipc_allreduce_case<float, gsync::op::sum>(fk.api, 3, 1000, false, cfg);
    CHECK(fk.ipc.calls.load() == 0);
    CHECK(fk.api.d2h_bytes.load() > 0);
    CHECK(fk.api.exportable_now.load() == 0);
  }
  SUBCASE("no IPC kernels installed") {
    fake_cuda_scope fk(false);
    ipc_allreduce_case<float, gsync::op::sum>(fk.api, 3, 1000, false, ipc_config(64 << 10, ""));
    CHECK(fk.api.d2h_bytes.load() > 0);
    CHECK(fk.api.exportable_now.load() == 0);
  }
  SUBCASE("a user operator and a forced host algorithm") {
    fake_cuda_scope fk(true);
    gsync_test::run_inproc(2, [&](auto& comm, auto&) {
      std::vector<float> v(100, comm.rank() == 0 ? -5.0f : 3.0f), w(100, 1.0f);
      gsync::cuda_stream s = fk.api.create_stream();
      gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, absmax{}, s);
      gsync::allreduce<gsync::algo::ring>(comm, gsync::device_span<float>{w.data(), w.size()}, gsync::op::sum{}, s);
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
      CHECK(v[7] == -5.0f);
      CHECK(w[7] == 2.0f);
    });
    CHECK(fk.ipc.calls.load() == 0);
    CHECK(fk.api.d2h_bytes.load() > 0);
  }
}

// The device algorithms of the registry (algo/cuda_ipc.hpp), forced as users force host ones.
TEST_CASE("device allreduce algorithms: one_shot, two_shot forced by template argument or GSYNC_ALGO, refused where they cannot run") {
  namespace algo = gsync::algo;
  SUBCASE("forced by the template argument: right results over CUDA IPC, and the ranks really run what they were told") {
    fake_cuda_scope fk(true);
    gsync_test::run_inproc(3, [&](auto& comm, auto&) {
      const std::size_t count = 40000;  // 3 chunks of the 64 KiB slots
      std::vector<float> a(count), b(count), out(count);
      gsync::cuda_stream s = fk.api.create_stream();
      fk.api.launch(s, [&] {
        for (std::size_t i = 0; i < count; ++i) a[i] = b[i] = gsync_test::input<float, gsync::op::sum>(comm.rank(), i);
      });
      gsync::allreduce<algo::one_shot>(comm, gsync::device_span<float>{a.data(), count}, gsync::op::sum{}, s);
      gsync::allreduce<algo::two_shot>(comm, gsync::device_span<const float>{b.data(), count}, gsync::device_span<float>{out.data(), count},
                                       gsync::op::max{}, s);
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
      std::size_t off = 0;
      for (std::size_t i = 0; i < count; ++i) off += !gsync_test::check_element<float, gsync::op::sum>(a[i], 3, i);
      CHECK(off == 0);
      for (std::size_t i = 0; i < count; i += 997) {
        float want = b[i];
        for (int q = 0; q < 3; ++q) want = std::max(want, gsync_test::input<float, gsync::op::sum>(q, i));
        CHECK(out[i] == want);
      }
    }, ipc_config(64 << 10, ""));
    CHECK(fk.ipc.calls.load() > 0);
    CHECK(fk.api.d2h_bytes.load() == 0);
  }
  SUBCASE("ranks forced to different schedules: a mismatch on every rank, not a wrong result") {
    fake_cuda_scope fk(true);
    std::vector<std::optional<gsync::errc>> got(2);
    gsync_test::run_inproc(2, [&](auto& comm, auto&) {
      std::vector<float> v(1000, 1.0f);
      gsync::cuda_stream s = fk.api.create_stream();
      try {
        if (comm.rank() == 0) gsync::allreduce<algo::one_shot>(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
        else gsync::allreduce<algo::two_shot>(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
        gsync::barrier(comm);
      } catch (const gsync::error& e) {
        got[static_cast<std::size_t>(comm.rank())] = e.kind();
      }
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
    }, ipc_config(64 << 10, ""));
    CHECK(got[0] == gsync::errc::mismatch);
    CHECK(got[1] == gsync::errc::mismatch);
  }
  SUBCASE("GSYNC_ALGO=two_shot forces device allreduces, and host allreduces keep their own choice") {
    fake_cuda_scope fk(true);
    gsync::config cfg = ipc_config(64 << 10, "");
    cfg.algo = "two_shot";
    gsync_test::run_inproc(4, [&](auto& comm, auto&) {
      std::vector<double> h(100, 1.0);
      gsync::allreduce(comm, std::span<double>{h});
      CHECK(h[99] == 4.0);
    }, cfg);
    ipc_allreduce_case<float, gsync::op::avg>(fk.api, 4, 5000, false, cfg);
    CHECK(fk.ipc.calls.load() > 0);
    CHECK(fk.api.d2h_bytes.load() == 0);
  }
  SUBCASE("GSYNC_ALGO=ring and allreduce<ring> on device buffers run the ring on host staging") {
    fake_cuda_scope fk(true);
    gsync::config cfg = ipc_config(64 << 10, "");
    cfg.algo = "ring";
    ipc_allreduce_case<float, gsync::op::sum>(fk.api, 3, 5000, false, cfg);
    CHECK(fk.ipc.calls.load() == 0);
    CHECK(fk.api.d2h_bytes.load() > 0);
  }
  auto refused = [](gsync::config cfg, auto call) {
    fake_cuda_scope fk(true);
    std::vector<std::string> why(2);
    gsync_test::run_inproc(2, [&](auto& comm, auto&) {
      std::vector<float> v(100, 1.0f);
      gsync::cuda_stream s = fk.api.create_stream();
      try {
        call(comm, gsync::device_span<float>{v.data(), v.size()}, s);
      } catch (const gsync::error& e) {
        if (e.kind() == gsync::errc::invalid_argument) why[static_cast<std::size_t>(comm.rank())] = e.what();
      }
      gsync::barrier(comm);  // the communicator still works
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
      CHECK(v[0] == 1.0f);  // untouched
    }, cfg);
    CHECK(why[0] == why[1]);
    return why[0];
  };
  SUBCASE("refused: CUDA IPC disabled") {
    gsync::config cfg = ipc_config(64 << 10, "");
    cfg.cuda_ipc.enabled = false;
    const std::string w = refused(cfg, [](auto& comm, auto d, auto s) { gsync::allreduce<algo::one_shot>(comm, d, gsync::op::sum{}, s); });
    CHECK(w.find("one_shot (forced by allreduce<algo::one_shot>) cannot run") != std::string::npos);
    CHECK(w.find("GSYNC_CUDA_IPC_DISABLE") != std::string::npos);
  }
  SUBCASE("refused: GSYNC_ALGO=one_shot with IPC disabled") {
    gsync::config cfg = ipc_config(64 << 10, "");
    cfg.cuda_ipc.enabled = false;
    cfg.algo = "oneshot";
    const std::string w = refused(cfg, [](auto& comm, auto d, auto s) { gsync::allreduce(comm, d, gsync::op::sum{}, s); });
    CHECK(w.find("forced by GSYNC_ALGO=oneshot") != std::string::npos);
  }
  SUBCASE("refused: a user operator this file has no GPU kernel of") {
    const std::string w = refused(ipc_config(64 << 10, ""), [](auto& comm, auto d, auto s) { gsync::allreduce<algo::two_shot>(comm, d, absmax{}, s); });
    CHECK(w.find("user operator absmax: this file was not compiled by nvcc") != std::string::npos);
  }
  SUBCASE("a user operator with a GPU kernel, forced to two_shot") {
    fake_cuda_scope fk(true);
    gsync_test::run_inproc(3, [&](auto& comm, auto&) {
      std::vector<float> v(5000, comm.rank() == 1 ? -7.0f : 2.0f);
      gsync::cuda_stream s = fk.api.create_stream();
      gsync::allreduce<algo::two_shot>(comm, gsync::device_span<float>{v.data(), v.size()}, absmax_dev{}, s);
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
      CHECK(v[4999] == -7.0f);
    }, ipc_config(64 << 10, ""));
    CHECK(fk.ipc.user_calls.load() > 0);
  }
  SUBCASE("refused: the hierarchical form on one host") {
    const std::string w =
        refused(ipc_config(64 << 10, ""), [](auto& comm, auto d, auto s) { gsync::allreduce<algo::hierarchical_ipc>(comm, d, gsync::op::sum{}, s); });
    CHECK(w.find("every rank is on one host") != std::string::npos);
  }
  SUBCASE("refused at the call: an unknown GSYNC_ALGO") {
    gsync::config cfg = ipc_config(64 << 10, "");
    cfg.algo = "ringg";
    const std::string w = refused(cfg, [](auto& comm, auto d, auto s) { gsync::allreduce(comm, d, gsync::op::sum{}, s); });
    CHECK(w.find("unknown allreduce algorithm 'ringg'") != std::string::npos);
  }
  SUBCASE("refused: a device algorithm on host memory") {
    gsync_test::run_inproc(2, [&](auto& comm, auto&) {
      std::vector<float> v(10, 1.0f);
      CHECK_THROWS_WITH_AS(gsync::allreduce<algo::one_shot>(comm, std::span<float>{v}), doctest::Contains("device buffers"), gsync::error);
      CHECK_THROWS_AS((void)gsync::allreduce_async<algo::two_shot>(comm, std::span<float>{v}), gsync::error);
      gsync::allreduce(comm, std::span<float>{v});
      CHECK(v[0] == 2.0f);
    });
  }
}

// Ranks of one process on two GPUs reach each other's arenas by pointer: only with peer access,
// which the stand-in enforces (a kernel reading another device's memory without it is a fault).
TEST_CASE("device allreduce over CUDA IPC: ranks of one process on two GPUs enable peer access, or keep to staging saying why") {
  for (bool possible : {true, false}) {
    CAPTURE(possible);
    fake_cuda_scope fk(true);
    fk.api.peer_access_possible = possible;
    std::vector<std::string> refusal(4);
    gsync_test::run_inproc(4, [&](auto& comm, auto&) {
      fk.api.set_device(comm.rank() % 2);  // ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1
      std::vector<float> v(40000);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = gsync_test::input<float, gsync::op::sum>(comm.rank(), i);
      gsync::cuda_stream s = fk.api.create_stream();
      gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
      std::size_t off = 0;
      for (std::size_t i = 0; i < v.size(); ++i) off += !gsync_test::check_element<float, gsync::op::sum>(v[i], 4, i);
      CHECK(off == 0);
      auto st = std::static_pointer_cast<gsync::detail::ipc_state>(comm.ipc_state_slot());
      REQUIRE(st);
      refusal[static_cast<std::size_t>(comm.rank())] = st->refusal;
    }, ipc_config(64 << 10, ""));
    CHECK(fk.api.peer_enables.load() > 0);
    if (possible) {
      CHECK(fk.ipc.calls.load() > 0);
      CHECK(fk.api.d2h_bytes.load() == 0);
    } else {
      CHECK(fk.ipc.calls.load() == 0);  // every rank on staging
      CHECK(fk.api.d2h_bytes.load() > 0);
      CHECK(refusal[0].find("cannot access GPU") != std::string::npos);
    }
  }
}

TEST_CASE("device collectives over CUDA IPC: a mismatched call is reported as a mismatch on every rank") {
  fake_cuda_scope fk(true);
  gsync_test::run_inproc(
      2,
      [&](auto& comm, auto&) {
        std::vector<float> v(300, 1.0f);
        gsync::cuda_stream s = fk.api.create_stream();
        const std::size_t count = comm.rank() == 0 ? 100 : 200;  // a bug in the caller
        auto req = gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), count}, gsync::op::sum{}, s);
        try {
          req.wait();
          CHECK_MESSAGE(false, "no error");
        } catch (const gsync::error& e) {
          CHECK(e.kind() == gsync::errc::mismatch);
          CHECK(std::string(e.what()).find("different operation") != std::string::npos);
        }
        CHECK_THROWS_AS(gsync::allreduce(comm, gsync::device_span<float>{v.data(), 10}, gsync::op::sum{}, s), gsync::error);  // broken
        fk.api.synchronize(s);
        fk.api.destroy_stream(s);
      },
      ipc_config(64 << 10, ""));
}

TEST_CASE("device collectives over CUDA IPC: a rank that never comes is a timeout naming it, reported to the others") {
  fake_cuda_scope fk(true);
  gsync::config cfg = ipc_config(64 << 10, "");
  cfg.timeout = std::chrono::milliseconds(2000);
  gsync_test::run_inproc(
      3,
      [&](auto& comm, auto& sync) {
        std::vector<float> v(1000, 1.0f);
        gsync::cuda_stream s = fk.api.create_stream();
        gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);  // the group forms
        fk.api.synchronize(s);
        if (comm.rank() != 2) {  // rank 2 skips the second allreduce
          auto req = gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
          try {
            req.wait();
            CHECK_MESSAGE(false, "no error");
          } catch (const gsync::error& e) {
            CHECK(e.kind() == gsync::errc::timeout);
            CHECK_MESSAGE(std::string(e.what()).find("rank 2 arrived 1") != std::string::npos, std::string(e.what()));
          }
        }
        sync.bar.arrive_and_wait();
        if (comm.rank() == 2) {  // its next call learns what happened
          auto req = gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
          try {
            req.wait();
            CHECK_MESSAGE(false, "no error");
          } catch (const gsync::error& e) {
            CHECK(e.kind() == gsync::errc::timeout);
            CHECK(std::string(e.what()).find("reported") != std::string::npos);
          }
        }
        fk.api.synchronize(s);
        fk.api.destroy_stream(s);
      },
      cfg);
  CHECK(fk.api.exportable_now.load() == 0);  // every arena freed
}

TEST_CASE("device collectives over CUDA IPC: abort() fails the running operation at once, and the peers learn it") {
  fake_cuda_scope fk(true);
  gsync::config cfg = ipc_config(64 << 10, "");
  cfg.timeout = std::chrono::seconds(20);  // far longer than the test: the abort, not a timeout, ends it
  gsync_test::run_inproc(
      2,
      [&](auto& comm, auto& sync) {
        std::vector<float> v(1000, 1.0f);
        gsync::cuda_stream s = fk.api.create_stream();
        gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);  // the group forms
        fk.api.synchronize(s);
        const auto t0 = std::chrono::steady_clock::now();
        if (comm.rank() == 0) {  // rank 1 never joins this one; rank 0 gives up
          auto req = gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
          comm.abort("test gives up");
          try {
            req.wait();
            CHECK_MESSAGE(false, "no error");
          } catch (const gsync::error& e) {
            CHECK(e.kind() == gsync::errc::aborted);
          }
        }
        sync.bar.arrive_and_wait();
        if (comm.rank() == 1) {  // learns it from the pages (the request fails) or from the transport (the call throws)
          std::optional<gsync::request> req;  // outlives the handler: the exception it holds is read there
          try {
            req = gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
            req->wait();
            CHECK_MESSAGE(false, "no error");
          } catch (const gsync::error& e) {
            CHECK(e.kind() == gsync::errc::aborted);
            CHECK_MESSAGE(std::string(e.what()).find("rank 0") != std::string::npos, std::string(e.what()));
          }
        }
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
        fk.api.synchronize(s);
        fk.api.destroy_stream(s);
      },
      cfg);
}

// Sub-communicators (split) run device collectives as their parent does: over CUDA IPC among the
// ranks of one host (their own arenas and slots, next to the parent's), through host staging
// across hosts; nested splits too, and the parent's own calls in between.
TEST_CASE("device allreduce on sub-communicators: CUDA IPC within a host, staging across hosts, nested") {
  fake_cuda_scope fk(true);
  const int n = 6;
  auto value = [](int q, std::size_t i) { return static_cast<float>((static_cast<std::size_t>(q) * 7 + i) % 13); };
  auto body = [&](auto& comm, auto&) {
    const int r = comm.rank();
    auto half = comm.split(r % 2, r);                          // evens, odds (3 ranks each)
    auto inner = half.split(half.rank() / 2, half.rank());     // {0, 2}, {4}; {1, 3}, {5}
    std::vector<int> half_members, inner_members;
    for (int q = r % 2; q < n; q += 2) half_members.push_back(q);
    for (int k = 0; k < 3; ++k)
      if (k / 2 == half.rank() / 2) inner_members.push_back(half_members[static_cast<std::size_t>(k)]);
    REQUIRE(half.size() == 3);
    REQUIRE(inner.size() == static_cast<int>(inner_members.size()));
    // Ranks of one process on one device: every communicator's device memory first, on every
    // rank, before any stream waits (an allocation synchronises the device, and streams of the
    // others would be waiting for this rank): then a barrier, as inner's ranks may be alone.
    gsync::prepare_device(half);
    gsync::prepare_device(comm);
    gsync::prepare_device(inner);
    gsync::barrier(comm);
    const std::size_t count = 70001;  // two chunks of the 64 KiB slots
    gsync::cuda_stream s = fk.api.create_stream();
    std::vector<float> dev(count);
    auto run = [&](auto& c, const std::vector<int>& members) {
      fk.api.launch(s, [&] {
        for (std::size_t i = 0; i < count; ++i) dev[i] = value(r, i);
      });
      gsync::allreduce(c, gsync::device_span<float>{dev.data(), count}, gsync::op::sum{}, s);
      fk.api.synchronize(s);
      std::size_t off = 0;
      for (std::size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q : members) want += value(q, i);
        off += dev[i] != want;
      }
      CHECK(off == 0);
    };
    std::vector<int> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    run(half, half_members);
    run(comm, all);
    run(inner, inner_members);
    run(half, half_members);
    fk.api.destroy_stream(s);
  };
  SUBCASE("one host: CUDA IPC") {
    gsync_test::run_inproc(n, body);
    CHECK(fk.ipc.calls.load() > 0);
    CHECK(fk.api.d2h_bytes.load() == 0);  // nothing through host staging
  }
  SUBCASE("hosts of 2 ranks: each sub-communicator's ranks on different hosts") {
    gsync_test::run_mixed(n, 2, body);
    CHECK(fk.api.d2h_bytes.load() > 0);
  }
  CHECK(fk.api.exportable_now.load() == 0);
  CHECK(fk.api.registered_now.load() == 0);
}
