/* ompi_latency: MPI's small-message latency measured in bursts, as benchmarks/latency_bursts.cpp
 * measures gsync's (same calls, same warm-up, same report).
 *
 *   mpirun -np 2 ompi_latency [--bytes B] [--bursts K] [--per N] [--pingpong]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* One timed call: an allreduce, or (pingpong) a round trip between ranks 0 and 1. */
static void call(const float* in, float* out, int n, int rank, int pingpong) {
  if (!pingpong) {
    MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (rank == 0) {
    MPI_Send(in, n, MPI_FLOAT, 1, 1, MPI_COMM_WORLD);
    MPI_Recv(out, n, MPI_FLOAT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(out, n, MPI_FLOAT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(in, n, MPI_FLOAT, 0, 2, MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t bytes = 8;
  int bursts = 200, per = 1000, pingpong = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--bursts") && i + 1 < argc) bursts = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--per") && i + 1 < argc) per = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--pingpong")) pingpong = 1;
    else {
      if (rank == 0) fprintf(stderr, "usage: ompi_latency [--bytes B] [--bursts K] [--per N] [--pingpong]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (bursts < 1 || per < 1 || (pingpong && size != 2)) {
    if (rank == 0) fprintf(stderr, "ompi_latency: --bursts and --per must be >= 1; --pingpong needs 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const int n = (int)(bytes / sizeof(float));
  float* in = malloc(sizeof(float) * (size_t)(n + 1));
  float* out = calloc((size_t)(n + 1), sizeof(float));
  double* t = malloc(sizeof(double) * (size_t)bursts);
  for (int i = 0; i < n; ++i) in[i] = 1.0f;
  for (int k = 0; k < 5000; ++k) call(in, out, n, rank, pingpong);
  for (int b = 0; b < bursts; ++b) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < per; ++i) call(in, out, n, rank, pingpong);
    t[b] = (MPI_Wtime() - t0) * 1e6 / per;
  }
  qsort(t, (size_t)bursts, sizeof(double), cmp);
  if (rank == 0)
    printf("ompi %s %zu B np %d: min %.3f p10 %.3f median %.3f us\n", pingpong ? "pingpong" : "allreduce", bytes, size, t[0],
           t[bursts / 10], t[bursts / 2]);
  free(in);
  free(out);
  free(t);
  MPI_Finalize();
  return 0;
}
