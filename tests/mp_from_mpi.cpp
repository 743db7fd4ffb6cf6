// gsync::tcp_communicator::from_mpi under mpirun: communicators over MPI_COMM_WORLD, over the
// halves of an MPI_Comm_split (ordered by a reversed key), and over all ranks but 0 (rank 0 gets
// MPI_COMM_NULL, which from_mpi must refuse with invalid_argument), all open at once; each must
// have MPI's rank and size, and its allreduces must equal MPI_Allreduce's on the same data
// (int64 sums and double maxima: exact in any order), interleaved across the communicators.
// GSYNC_MASTER_ADDR and _PORT are set to an address nobody serves: from_mpi must not read them.
// Exit 0 when every rank saw every check pass.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <gsync/gsync.hpp>
#include <gsync/mpi.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

int g_bad = 0;
int g_world_rank = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++g_bad;
  std::printf("world rank %d: FAILED: %s\n", g_world_rank, what.c_str());
}

/// One round of allreduces on `gc` and `mc`, compared.
void compare(gsync::tcp_communicator& gc, MPI_Comm mc, int round, const char* name) {
  int r = 0, n = 0;
  MPI_Comm_rank(mc, &r);
  MPI_Comm_size(mc, &n);
  expect(gc.rank() == r && gc.size() == n, std::string(name) + ": gsync rank/size " + std::to_string(gc.rank()) + "/" +
                                               std::to_string(gc.size()) + ", MPI " + std::to_string(r) + "/" + std::to_string(n));
  const std::size_t count = 1000 + 37 * static_cast<std::size_t>(round);
  std::vector<std::int64_t> a(count), am(count);
  std::vector<double> d(count), dm(count);
  for (std::size_t i = 0; i < count; ++i) {
    a[i] = am[i] = static_cast<std::int64_t>((g_world_rank + 1) * 1000003 + i * 7 + round);
    d[i] = dm[i] = static_cast<double>((g_world_rank * 31 + static_cast<int>(i) * 17 + round) % 101) / 7.0;
  }
  gsync::allreduce(gc, std::span<std::int64_t>(a), gsync::op::sum{});
  gsync::allreduce(gc, std::span<double>(d), gsync::op::max{});
  MPI_Allreduce(MPI_IN_PLACE, am.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM, mc);
  MPI_Allreduce(MPI_IN_PLACE, dm.data(), static_cast<int>(count), MPI_DOUBLE, MPI_MAX, mc);
  expect(a == am, std::string(name) + ": int64 sum differs from MPI's, round " + std::to_string(round));
  expect(d == dm, std::string(name) + ": double max differs from MPI's, round " + std::to_string(round));
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
  ::setenv("GSYNC_MASTER_ADDR", "198.18.255.254", 1);  // nobody serves these: from_mpi must not use them
  ::setenv("GSYNC_MASTER_PORT", "1", 1);
  MPI_Comm half = MPI_COMM_NULL, others = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, g_world_rank % 2, -g_world_rank, &half);  // reversed order within each half
  MPI_Comm_split(MPI_COMM_WORLD, g_world_rank == 0 ? MPI_UNDEFINED : 1, g_world_rank, &others);
  try {
    auto world = gsync::tcp_communicator::from_mpi(MPI_COMM_WORLD);
    auto h = gsync::tcp_communicator::from_mpi(half);
    std::optional<gsync::tcp_communicator> o;
    if (others != MPI_COMM_NULL) {
      o.emplace(gsync::tcp_communicator::from_mpi(others));
    } else {
      bool refused = false;
      try {
        (void)gsync::tcp_communicator::from_mpi(others);
      } catch (const gsync::error& e) {
        refused = e.kind() == gsync::errc::invalid_argument;
      }
      expect(refused, "from_mpi(MPI_COMM_NULL) was not refused with invalid_argument");
    }
    for (int round = 0; round < 3; ++round) {
      compare(world, MPI_COMM_WORLD, round, "world");
      compare(h, half, round, "half");
      if (o) compare(*o, others, round, "all but rank 0");
    }
  } catch (const std::exception& e) {
    expect(false, e.what());
  }
  if (half != MPI_COMM_NULL) MPI_Comm_free(&half);
  if (others != MPI_COMM_NULL) MPI_Comm_free(&others);
  int bad = g_bad;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_world_rank == 0) std::printf("from_mpi: %s (%d failed checks over all ranks)\n", bad == 0 ? "OK" : "FAILED", bad);
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
