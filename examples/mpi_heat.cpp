// An MPI code that hands its reductions to gsync: a 1-D heat-diffusion solver, decomposed over the
// ranks of an MPI communicator, that keeps MPI for its halo exchange (MPI_Sendrecv) and replaces
// each MPI_Allreduce of the time loop with gsync's, on a communicator made by
// `gsync::tcp_communicator::from_mpi(comm)`. Every reduction is also done with MPI_Allreduce and
// the two results must be identical, bit for bit:
//   - the largest change of any cell in the step (max: exact in any order);
//   - the total heat, in fixed point (int64 sum: exact in any order), the conserved quantity;
//   - the number of cells above a threshold (int32 sum).
// The loop ends when gsync's largest change falls below the tolerance, so the solver is driven by
// gsync's results. The run is done twice at once: on MPI_COMM_WORLD, and on the two halves of an
// MPI_Comm_split (a gsync communicator for each, open together with the world's).
//
//   mpirun -np 4 ./mpi_heat [cells_per_rank] [max_steps]      exit 0 when every result agreed
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <gsync/gsync.hpp>
#include <gsync/mpi.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

namespace {

struct outcome {
  int steps = 0;
  int disagreements = 0;
  std::int64_t heat0 = 0, heat = 0;
};

/// Runs the solver over `mc` with gsync communicator `gc` for the reductions.
outcome solve(MPI_Comm mc, gsync::tcp_communicator& gc, int cells, int max_steps) {
  int rank = 0, size = 1;
  MPI_Comm_rank(mc, &rank);
  MPI_Comm_size(mc, &size);
  // Cells 1..cells are this rank's; 0 and cells+1 are halo copies of the neighbours' edge cells.
  std::vector<double> u(static_cast<std::size_t>(cells) + 2, 0.0), next(u.size(), 0.0);
  for (int i = 1; i <= cells; ++i) {
    const double x = (static_cast<double>(rank) * cells + i) / (static_cast<double>(size) * cells);
    u[static_cast<std::size_t>(i)] = std::exp(-200.0 * (x - 0.3) * (x - 0.3)) + 0.5 * std::exp(-400.0 * (x - 0.7) * (x - 0.7));
  }
  const int left = rank > 0 ? rank - 1 : MPI_PROC_NULL, right = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
  const auto fixed = [](double v) { return static_cast<std::int64_t>(std::llround(v * 1e12)); };
  outcome o;
  for (int step = 0; step < max_steps; ++step) {
    // Halo exchange stays with MPI. Insulated ends: the missing neighbour mirrors the edge cell.
    MPI_Sendrecv(&u[1], 1, MPI_DOUBLE, left, 0, &u[static_cast<std::size_t>(cells) + 1], 1, MPI_DOUBLE, right, 0, mc, MPI_STATUS_IGNORE);
    MPI_Sendrecv(&u[static_cast<std::size_t>(cells)], 1, MPI_DOUBLE, right, 1, &u[0], 1, MPI_DOUBLE, left, 1, mc, MPI_STATUS_IGNORE);
    if (left == MPI_PROC_NULL) u[0] = u[1];
    if (right == MPI_PROC_NULL) u[static_cast<std::size_t>(cells) + 1] = u[static_cast<std::size_t>(cells)];
    double change = 0.0;
    std::int64_t heat = 0;
    std::int32_t hot = 0;
    for (std::size_t i = 1; i <= static_cast<std::size_t>(cells); ++i) {
      next[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
      change = std::max(change, std::fabs(next[i] - u[i]));
      heat += fixed(next[i]);
      hot += next[i] > 0.1;
    }
    std::swap(u, next);
    // The reductions: gsync's drive the solver, MPI's are the reference.
    double g_change = change, m_change = change;
    std::int64_t g_heat = heat, m_heat = heat;
    std::int32_t g_hot = hot, m_hot = hot;
    gsync::allreduce(gc, std::span<double>(&g_change, 1), gsync::op::max{});
    gsync::allreduce(gc, std::span<std::int64_t>(&g_heat, 1), gsync::op::sum{});
    gsync::allreduce(gc, std::span<std::int32_t>(&g_hot, 1), gsync::op::sum{});
    MPI_Allreduce(MPI_IN_PLACE, &m_change, 1, MPI_DOUBLE, MPI_MAX, mc);
    MPI_Allreduce(MPI_IN_PLACE, &m_heat, 1, MPI_INT64_T, MPI_SUM, mc);
    MPI_Allreduce(MPI_IN_PLACE, &m_hot, 1, MPI_INT32_T, MPI_SUM, mc);
    if (g_change != m_change || g_heat != m_heat || g_hot != m_hot) {
      ++o.disagreements;
      std::printf("rank %d step %d: gsync (%.17g, %lld, %d) != MPI (%.17g, %lld, %d)\n", rank, step, g_change,
                  static_cast<long long>(g_heat), g_hot, m_change, static_cast<long long>(m_heat), m_hot);
    }
    if (step == 0) o.heat0 = g_heat;
    o.heat = g_heat;
    o.steps = step + 1;
    if (g_change < 1e-6) break;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const int cells = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int max_steps = argc > 2 ? std::atoi(argv[2]) : 300;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int bad = 0;
  try {
    // Two gsync communicators open at once: the world's, and one per half of a split.
    auto world = gsync::tcp_communicator::from_mpi(MPI_COMM_WORLD);
    MPI_Comm half = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    auto sub = gsync::tcp_communicator::from_mpi(half);
    const outcome w = solve(MPI_COMM_WORLD, world, cells, max_steps);
    const outcome h = solve(half, sub, cells, max_steps);
    bad = w.disagreements + h.disagreements;
    if (world.rank() == 0)
      std::printf("world (%d ranks): %d steps, heat %lld -> %lld; half %d (%d ranks): %d steps; %d disagreements with MPI on rank 0\n",
                  world.size(), w.steps, static_cast<long long>(w.heat0), static_cast<long long>(w.heat), rank % 2, sub.size(), h.steps, bad);
    MPI_Comm_free(&half);
  } catch (const gsync::error& e) {
    std::printf("rank %d: %s\n", rank, e.what());
    bad = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
