// The hierarchical device allreduce (dispatch/ipc_hierarchical.hpp, cuda/ipc_hierarchical.hpp) on the
// host stand-in of the CUDA runtime (support/fake_cuda.hpp): ranks on several hosts (GSYNC_HOST_ID
// semantics: shared memory inside a host, TCP across), where the ranks of each host form a CUDA
// IPC group and the level across hosts goes through host staging. Results are checked against the
// double-precision reference and bit for bit across every rank; the fake's copy counters prove
// which form ran (only each rank's part crosses hosts in the three-level form).

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <gsync/gsync.hpp>

#include "support/fake_cuda.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

using gsync_test::fake_cuda;
using gsync_test::fake_cuda_scope;
namespace ipc = gsync::cuda::ipc;

namespace {

gsync::config hier_config(std::size_t slot_bytes) {
  gsync::config c;
  c.cuda_ipc.slot_bytes = slot_bytes;
  c.cuda_staging_bytes = std::size_t{256} << 10;  // several staging windows for the larger parts
  return c;
}

/// Allreduce (twice, on the same buffers) of `count` elements on `hosts` x `per_host` ranks (the
/// last host may have fewer: `n` ranks in all); checks every element and that every rank holds the
/// same bits. Returns the IPC state the communicators had.
template <class T, class Op>
void hier_case(fake_cuda& api, int n, int per_host, std::size_t count, bool out_of_place, gsync::config cfg,
               bool* across_hosts = nullptr) {
  std::vector<std::vector<T>> results(static_cast<std::size_t>(n));
  std::vector<int> across(static_cast<std::size_t>(n), -1);
  gsync_test::run_mixed(
      n, per_host,
      [&](auto& comm, auto& sync) {
        const int r = comm.rank();
        std::vector<T> dev(count), dev_out(count);
        gsync::cuda_stream s = api.create_stream();
        for (int rep = 0; rep < 2; ++rep) {
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
        auto st = std::static_pointer_cast<gsync::detail::ipc_state>(comm.ipc_state_slot());
        across[static_cast<std::size_t>(r)] = st && st->across_hosts;
        sync.bar.arrive_and_wait();
      },
      cfg);
  for (int r = 1; r < n; ++r)
    CHECK(std::memcmp(results[static_cast<std::size_t>(r)].data(), results[0].data(), count * sizeof(T)) == 0);
  for (int r = 1; r < n; ++r) CHECK(across[static_cast<std::size_t>(r)] == across[0]);
  if (across_hosts) *across_hosts = across[0] == 1;
}

}  // namespace

TEST_CASE("hierarchical device allreduce: parts and forms cover every element once") {
  for (int n = 1; n <= 8; ++n)
    for (std::size_t e : {std::size_t{2}, std::size_t{4}, std::size_t{8}})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{127}, std::size_t{129}, std::size_t{100003}}) {
        std::size_t next = 0;
        for (int r = 0; r < n; ++r) {
          const ipc::range p = ipc::part(count, n, r, e);
          CHECK(p.first == (p.count ? next : p.first));
          if (p.count) {
            CHECK(p.first * e % ipc::slice_align_bytes == 0);
            next = p.first + p.count;
          }
          CHECK(p.count <= ipc::part(count, n, 0, e).count);  // the first part is the largest (its steps are everyone's)
        }
        CHECK(next == count);
      }
  CHECK(ipc::choose_form(8, 4) == ipc::hier_form::two_level);
  CHECK(ipc::choose_form(std::size_t{256} << 20, 4) == ipc::hier_form::three_level);
  CHECK(ipc::choose_form(ipc::two_level_max_bytes(8), 8) == ipc::hier_form::three_level);
}

TEST_CASE("hierarchical device allreduce: each element size and kind x every op, both forms, 2-3 hosts of 2-3 ranks") {
  fake_cuda_scope fk(true);
  const bool small = std::getenv("GSYNC_TEST_MEDIUM") != nullptr;  // under the sanitizers: fewer shapes
  struct shape {
    int n, per_host;
  };
  // The shapes take turns over the dtype x op pairs at each count (the schedule depends on the
  // shape, the count and the element size; the reduction on dtype and op), so each shape still sees
  // every element size and every op; running every combination takes 3x as long. Under the
  // sanitizers (one shape, three counts) the counts take turns the same way.
  const shape shapes[] = {shape{4, 2}, shape{6, 3}, shape{6, 2}};
  int shapes_run[3] = {0, 0, 0};
  // 1 element; several chunks of the 64 KiB slots; two-level for 2- and 4-byte types but
  // three-level for 8-byte ones; three-level for all but the 2-byte types.
  const std::size_t counts[] = {1, 20011, 70001, 140001};
  for (int ci = 0; ci < 4; ++ci) {
    const std::size_t count = counts[ci];
    if (small && count == 20011) continue;
    int pair = 0;
    gsync_test::for_each_device_dtype([&]<class T>() {
      gsync_test::for_each_op([&]<class Op>() {
        const int turn = (pair++ + (small && ci > 0 ? ci - 1 : ci)) % 3;  // small: counts 0, 1, 2 of those run
        if (small && turn != 0) return;
        const int which = small ? 0 : turn;
        const shape sh = shapes[which];
        ++shapes_run[which];
        CAPTURE(sh.n);
        CAPTURE(sh.per_host);
        CAPTURE(count);
        CAPTURE(gsync::name(gsync::dtype_of<T>));
        CAPTURE(gsync::detail::op_name<Op>());
        bool across = false;
        hier_case<T, Op>(fk.api, sh.n, sh.per_host, count, count % 2 == 0, hier_config(64 << 10), &across);
        CHECK(across);
      });
    });
  }
  for (int w = 0; w < (small ? 1 : 3); ++w) CHECK(shapes_run[w] > 0);
  CHECK(fk.ipc.calls.load() > 0);
  CHECK(fk.api.exportable_now.load() == 0);
  CHECK(fk.api.registered_now.load() == 0);
}

TEST_CASE("hierarchical device allreduce: only each rank's part crosses hosts in the three-level form") {
  fake_cuda_scope fk(true);
  const std::size_t count = 300007;  // 1.2 MB of float: three-level
  REQUIRE(ipc::choose_form(count * 4, 2) == ipc::hier_form::three_level);
  hier_case<float, gsync::op::avg>(fk.api, 6, 2, count, false, hier_config(64 << 10));
  // Two calls; per call each host stages its parts once: hosts x count elements in all.
  CHECK(fk.api.d2h_bytes.load() == static_cast<long>(2 * 3 * count * sizeof(float)));
  CHECK(fk.api.h2d_bytes.load() == static_cast<long>(2 * 3 * count * sizeof(float)));
  const long before = fk.api.d2h_bytes.load();
  const std::size_t small = 1000;  // two-level: every rank stages the whole buffer
  REQUIRE(ipc::choose_form(small * 4, 2) == ipc::hier_form::two_level);
  hier_case<float, gsync::op::sum>(fk.api, 6, 2, small, true, hier_config(64 << 10));
  CHECK(fk.api.d2h_bytes.load() - before == static_cast<long>(2 * 6 * small * sizeof(float)));
}

TEST_CASE("hierarchical device allreduce: placements it does not cover keep to host staging, with right results") {
  fake_cuda_scope fk(true);
  bool across = true;
  SUBCASE("hosts of different sizes") { hier_case<float, gsync::op::sum>(fk.api, 5, 2, 5000, false, hier_config(64 << 10), &across); }
  SUBCASE("one rank per host") { hier_case<double, gsync::op::avg>(fk.api, 3, 1, 5000, true, hier_config(64 << 10), &across); }
  SUBCASE("GSYNC_CUDA_IPC_DISABLE") {
    gsync::config cfg = hier_config(64 << 10);
    cfg.cuda_ipc.enabled = false;
    hier_case<float, gsync::op::max>(fk.api, 4, 2, 5000, false, cfg, &across);
  }
  CHECK_FALSE(across);
  CHECK(fk.ipc.calls.load() == 0);
  CHECK(fk.api.d2h_bytes.load() > 0);
  CHECK(fk.api.exportable_now.load() == 0);
}

TEST_CASE("hierarchical device allreduce: the other device collectives of such a communicator use host staging") {
  fake_cuda_scope fk(true);
  gsync_test::run_mixed(4, 2, [&](auto& comm, auto&) {
    const int n = comm.size(), r = comm.rank();
    std::vector<float> v(100, 1.0f + static_cast<float>(r)), all(100 * static_cast<std::size_t>(n));
    gsync::cuda_stream s = fk.api.create_stream();
    gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);  // forms the groups
    gsync::allgather(comm, gsync::device_span<const float>{v.data(), v.size()}, gsync::device_span<float>{all.data(), all.size()}, s);
    gsync::broadcast(comm, gsync::device_span<float>{v.data(), v.size()}, 3, s);
    fk.api.synchronize(s);
    fk.api.destroy_stream(s);
    CHECK(v[99] == 10.0f);
    CHECK(all[100 * 3 + 5] == 10.0f);
    auto st = std::static_pointer_cast<gsync::detail::ipc_state>(comm.ipc_state_slot());
    REQUIRE(st);
    CHECK(st->across_hosts);
    CHECK_FALSE(st->flat());
  });
}

TEST_CASE("hierarchical device allreduce: forced as algo::hierarchical_ipc, with one_shot and two_shot refused across hosts") {
  fake_cuda_scope fk(true);
  gsync_test::run_mixed(4, 2, [&](auto& comm, auto&) {
    const int r = comm.rank();
    std::vector<float> v(70000, 1.0f + static_cast<float>(r)), w(100, 1.0f);
    gsync::cuda_stream s = fk.api.create_stream();
    gsync::allreduce<gsync::algo::hierarchical_ipc>(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
    std::string why;
    try {
      gsync::allreduce<gsync::algo::one_shot>(comm, gsync::device_span<float>{w.data(), w.size()}, gsync::op::sum{}, s);
    } catch (const gsync::error& e) {
      CHECK(e.kind() == gsync::errc::invalid_argument);
      why = e.what();
    }
    CHECK(why.find("the ranks span 2 hosts") != std::string::npos);
    fk.api.synchronize(s);
    fk.api.destroy_stream(s);
    CHECK(v[0] == 10.0f);
    CHECK(v[69999] == 10.0f);
    CHECK(w[0] == 1.0f);
  }, hier_config(64 << 10));
  CHECK(fk.ipc.calls.load() > 0);
}

namespace {
/// A user mean with a GPU reduction (the fake's stand-in of the kernel a .cu file compiles).
struct user_mean {
  static constexpr std::string_view name = "user_mean";
  template <class A> GSYNC_HD constexpr A operator()(A a, A b) const noexcept { return a + b; }
  template <class A> GSYNC_HD constexpr A finalize(A v, int n) const noexcept { return v / static_cast<A>(n); }
};
}  // namespace
namespace gsync::cuda {
template <class T>
struct ipc_user_reduction<T, user_mean> : gsync_test::fake_user_reduction<T, user_mean> {};
}  // namespace gsync::cuda

TEST_CASE("hierarchical device allreduce: a user operator combines inside hosts on the GPU and finalizes once, across hosts") {
  fake_cuda_scope fk(true);
  for (std::size_t count : {std::size_t{1000}, std::size_t{300007}}) {  // two-level, three-level
    CAPTURE(count);
    REQUIRE(ipc::choose_form(count * sizeof(float), 2) == (count == 1000 ? ipc::hier_form::two_level : ipc::hier_form::three_level));
    gsync_test::run_mixed(6, 2, [&](auto& comm, auto&) {
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i % 7) + 3 * comm.rank());
      gsync::cuda_stream s = fk.api.create_stream();
      gsync::allreduce(comm, gsync::device_span<float>{v.data(), count}, user_mean{}, s);
      fk.api.synchronize(s);
      fk.api.destroy_stream(s);
      std::size_t off = 0;
      for (std::size_t i = 0; i < count; ++i) off += std::abs(v[i] - (static_cast<float>(i % 7) + 7.5f)) > 1e-4f;  // mean of 3r over 6 ranks
      CHECK(off == 0);
    }, hier_config(64 << 10));
  }
  CHECK(fk.ipc.user_calls.load() > 0);
}

TEST_CASE("hierarchical device allreduce: a rank that never comes fails every other rank, naming it, without a hang") {
  fake_cuda_scope fk(true);
  gsync::config cfg = hier_config(64 << 10);
  cfg.timeout = std::chrono::milliseconds(2000);
  const std::size_t count = 300007;  // three-level: reduce-scatter, across hosts, allgather
  std::atomic<int> failed{0}, named{0};
  gsync_test::run_mixed(
      4, 2,
      [&](auto& comm, auto& sync) {
        std::vector<float> v(count, 1.0f);
        gsync::cuda_stream s = fk.api.create_stream();
        gsync::allreduce(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);  // the groups form
        fk.api.synchronize(s);
        CHECK(v[count - 1] == 4.0f);
        if (comm.rank() != 3) {  // rank 3 (host 1) skips the second allreduce
          std::optional<gsync::request> req;  // outlives the handler: the exception it holds is read there
          try {
            req = gsync::allreduce_async(comm, gsync::device_span<float>{v.data(), v.size()}, gsync::op::sum{}, s);
            req->wait();
            CHECK_MESSAGE(false, "no error on rank ", comm.rank());
          } catch (const gsync::error& e) {
            ++failed;
            CHECK(e.kind() == gsync::errc::timeout);
            // rank 2 shares a host with rank 3 and waits for it inside the host (the IPC watchdog
            // names it); rank 0 waits for rank 2 across hosts, rank 1 for rank 3.
            if (comm.rank() != 0) CHECK(std::string(e.what()).find("rank 3") != std::string::npos);
            if (comm.rank() == 2) CHECK(std::string(e.what()).find("over CUDA IPC") != std::string::npos);
            if (std::string(e.what()).find("rank 3") != std::string::npos) ++named;
          }
        }
        sync.bar.arrive_and_wait();
        fk.api.synchronize(s);
        fk.api.destroy_stream(s);
      },
      cfg);
  CHECK(failed.load() == 3);
  CHECK(named.load() == 2);
  CHECK(fk.api.exportable_now.load() == 0);  // every arena freed
}
