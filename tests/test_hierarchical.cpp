// Hierarchical allreduce on pretend and real multi-host placements: in-process worlds whose ranks
// are placed on hosts, and host-transport worlds with shared memory inside a host and TCP across.
// Every result is checked against the double reference and for bitwise equality across ranks.

#include <doctest/doctest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "support/failures.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

#include <gsync/algo/hierarchical.hpp>
#include <gsync/algo/select.hpp>

namespace {

using errors = gsync_test::failures;

template <class T, class Op, class Algo, class Comm>
void one(Comm& comm, gsync_test::world_sync& sync, errors& errs, std::size_t count, bool in_place, const std::string& where) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  if (in_place) {
    out = in;
    gsync::allreduce<Algo>(comm, std::span<T>{out}, Op{});
  } else {
    gsync::allreduce<Algo>(comm, std::span<const T>{in}, std::span<T>{out}, Op{});
  }
  const std::string what = where + " " + std::string(gsync::name(gsync::dtype_of<T>)) + " " + std::string(Op::name) +
                           " count=" + std::to_string(count) + (in_place ? " in-place" : "") + " rank " + std::to_string(r);
  for (std::size_t i = 0; i < count; ++i)
    if (!gsync_test::check_element<T, Op>(out[i], n, i)) {
      errs.add(what + ": element " + std::to_string(i) + " wrong");
      break;
    }
  sync.outputs[r] = out.data();
  sync.bar.arrive_and_wait();
  if (count && std::memcmp(out.data(), sync.outputs[0], count * sizeof(T)) != 0) errs.add(what + ": differs from rank 0");
  sync.bar.arrive_and_wait();
}

template <class Algo, class Comm>
void workload(Comm& comm, gsync_test::world_sync& sync, errors& errs, const std::string& where) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, std::size_t{257}, std::size_t{99991}}) {
    comm.set_segment_bytes(count == 257 ? 16 : 64 << 10);
    for (int ip = 0; ip < 2; ++ip) {
      one<float, gsync::op::sum, Algo>(comm, sync, errs, count, ip, where);
      one<float, gsync::op::avg, Algo>(comm, sync, errs, count, ip, where);
      one<gsync::half, gsync::op::avg, Algo>(comm, sync, errs, count, ip, where);
      one<double, gsync::op::prod, Algo>(comm, sync, errs, count, ip, where);
      one<std::int32_t, gsync::op::max, Algo>(comm, sync, errs, count, ip, where);
      one<std::int64_t, gsync::op::avg, Algo>(comm, sync, errs, count, ip, where);
    }
  }
}

using hier_ring = gsync::algo::hierarchical<>;
using hier_rd = gsync::algo::hierarchical<gsync::algo::ring, gsync::algo::recursive_doubling>;

gsync::config cfg() {
  gsync::config c;
  c.timeout = std::chrono::seconds(60);
  return c;
}

}  // namespace

TEST_CASE("hierarchical allreduce, in-process ranks placed on hosts") {
  // (world, ranks per host): uniform placements, one host, one rank per host, and irregular ones
  // (the last host smaller), which fall back to the flat ring.
  for (auto [n, per] : {std::pair{4, 2}, std::pair{6, 2}, std::pair{6, 3}, std::pair{8, 4}, std::pair{8, 2}, std::pair{3, 3},
                        std::pair{3, 1}, std::pair{5, 2}, std::pair{7, 3}, std::pair{1, 1}}) {
    errors errs;
    const std::string where = "inproc N=" + std::to_string(n) + " L=" + std::to_string(per);
    auto comms = gsync::make_inproc_world(n, cfg(), per);
    gsync_test::run_threads<gsync::inproc_communicator>(
        n, [&](int r) { return std::move(comms[r]); },
        [&](auto& comm, gsync_test::world_sync& sync) {
          workload<hier_ring>(comm, sync, errs, where + " hier<ring,ring>");
          workload<hier_rd>(comm, sync, errs, where + " hier<ring,rd>");
        });
    for (auto& e : errs.list) FAIL_CHECK(e);
  }
}

TEST_CASE("hierarchical allreduce over shared memory inside hosts and TCP across") {
  for (const auto& shape : {std::pair{4, 2}, std::pair{6, 3}, std::pair{6, 2}}) {
    const int n = shape.first, per = shape.second;  // (not a structured binding: clang 14 cannot capture those)
    errors errs;
    const std::string where = "host N=" + std::to_string(n) + " L=" + std::to_string(per);
    gsync_test::run_mixed(n, per, [&](auto& comm, gsync_test::world_sync& sync) {
      CHECK(comm.transport().topo().hosts() == n / per);
      workload<hier_ring>(comm, sync, errs, where);
    }, cfg());
    for (auto& e : errs.list) FAIL_CHECK(e);
  }
}

TEST_CASE("automatic choice: hierarchical for large buffers when ranks span hosts evenly") {
  using namespace gsync::algo;
  const gsync::topology two_by_four = gsync::topology::blocks(8, 4);
  CHECK(choose_allreduce(std::size_t{64} << 20, 8, "shm+tcp", "", &two_by_four).id == allreduce_id::hierarchical);
  CHECK(choose_allreduce(8, 8, "shm+tcp", "", &two_by_four).id != allreduce_id::hierarchical);
  const std::string why = choose_allreduce(std::size_t{64} << 20, 8, "shm+tcp", "", &two_by_four).reason();
  CHECK(why.find("several hosts") != std::string::npos);
  // Uneven placement (hosts of 3, 3, 2 ranks), one host, or one rank per host: never hierarchical.
  const gsync::topology uneven = gsync::topology::blocks(8, 3), one = gsync::topology::single_host(8),
                        spread = gsync::topology::blocks(8, 1);
  for (std::size_t bytes = 8; bytes <= (std::size_t{256} << 20); bytes *= 4)
    for (const auto* t : {&uneven, &one, &spread}) CHECK(choose_allreduce(bytes, 8, "tcp", "", t).id != allreduce_id::hierarchical);
  // Forced by name, whatever the placement.
  CHECK(choose_allreduce(8, 8, "tcp", "hierarchical", &one).id == allreduce_id::hierarchical);
  // On the network, large buffers go to the pipelined ring rather than halving-doubling.
  const gsync::topology four_hosts = gsync::topology::blocks(4, 1);
  CHECK(choose_allreduce(std::size_t{64} << 20, 4, "tcp", "", &four_hosts).id == allreduce_id::ring);
}
