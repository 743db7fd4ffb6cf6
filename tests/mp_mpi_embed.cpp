// An MPI program that embeds gsync, as an HPC code would: MPI_Init_thread first, then a gsync
// communicator joined from Open MPI's environment in the same process, then gsync collectives
// interleaved with MPI's own on the same data, each gsync result compared with MPI's:
//   - exactly, for integer data and for doubles holding small integers (every order of summation
//     gives the same value);
//   - within a bound, for float sums of arbitrary values (the two libraries add in different orders);
//   - in place (MPI_IN_PLACE against gsync's aliasing forms), with roots on every rank;
//   - point to point: sendrecv against MPI_Sendrecv, send/recv against MPI_Send/MPI_Recv;
//   - an asynchronous gsync allreduce in flight while the main thread runs MPI collectives;
//   - a second communicator from the same environment after the first is destroyed.
// gather, scatter and the v-collectives against MPI_Gather, MPI_Scatter, MPI_Allgatherv,
// MPI_Reduce_scatter and MPI_Alltoallv, with uneven and empty blocks.
// Counts 0, 1, fewer than ranks, primes and large (not divisible by the world size).
// Exit 0 when every rank agrees with MPI everywhere, 1 otherwise (each mismatch is printed).

// Open MPI's deprecated C++ bindings are not wanted here (and warn under -Wextra).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <gsync/async.hpp>
#include <gsync/gsync.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

int g_bad = 0;
int g_rank = 0;

void fail(const char* what, std::size_t count) {
  ++g_bad;
  std::printf("rank %d: %s, count %zu: differs from MPI\n", g_rank, what, count);
}

template <class T>
MPI_Datatype mpi_type();
template <> MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <> MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> MPI_Datatype mpi_type<std::int32_t>() { return MPI_INT32_T; }
template <> MPI_Datatype mpi_type<std::int64_t>() { return MPI_INT64_T; }
template <> MPI_Datatype mpi_type<std::uint8_t>() { return MPI_UINT8_T; }
template <> MPI_Datatype mpi_type<std::int16_t>() { return MPI_INT16_T; }

/// Small integers in T (exact under any order of reduction for sum, min, max).
template <class T>
std::vector<T> small_ints(std::mt19937& g, std::size_t c, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(c);
  for (auto& x : v) x = static_cast<T>(d(g));
  return v;
}

template <class T, class Op>
void allreduce_exact(gsync::tcp_communicator& comm, std::mt19937& g, std::size_t c, Op op, MPI_Op mop,
                     const char* what) {
  auto in = small_ints<T>(g, c, -100, 100);
  std::vector<T> ref(c), out(c);
  MPI_Allreduce(in.data(), ref.data(), static_cast<int>(c), mpi_type<T>(), mop, MPI_COMM_WORLD);
  gsync::allreduce(comm, std::span<const T>{in}, std::span<T>{out}, op);
  if (out != ref) fail(what, c);
  // In place, both sides.
  auto a = in, b = in;
  MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(c), mpi_type<T>(), mop, MPI_COMM_WORLD);
  gsync::allreduce(comm, std::span<T>{b}, op);
  if (a != b) fail("in-place allreduce", c);
}

void run(gsync::tcp_communicator& comm, std::size_t c, int n, int r) {
  std::mt19937 g(static_cast<unsigned>(7919 * c + r));
  allreduce_exact<double>(comm, g, c, gsync::op::sum{}, MPI_SUM, "allreduce double sum");
  allreduce_exact<std::int32_t>(comm, g, c, gsync::op::max{}, MPI_MAX, "allreduce int32 max");
  allreduce_exact<std::int64_t>(comm, g, c, gsync::op::min{}, MPI_MIN, "allreduce int64 min");

  // avg: the exact integer sum divided by N, as MPI's sum then a division gives it.
  {
    auto in = small_ints<double>(g, c, -1000, 1000);
    std::vector<double> ref(c), out(c);
    MPI_Allreduce(in.data(), ref.data(), static_cast<int>(c), mpi_type<double>(), MPI_SUM, MPI_COMM_WORLD);
    for (auto& x : ref) x /= n;
    gsync::allreduce(comm, std::span<const double>{in}, std::span<double>{out}, gsync::op::avg{});
    if (out != ref) fail("allreduce double avg", c);
  }
  // float sum of arbitrary values: both within n ulps of the sum taken in double.
  {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> in(c), ref(c), out(c);
    for (auto& x : in) x = d(g);
    std::vector<double> in_d(in.begin(), in.end()), exact(c);
    MPI_Allreduce(in.data(), ref.data(), static_cast<int>(c), mpi_type<float>(), MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(in_d.data(), exact.data(), static_cast<int>(c), mpi_type<double>(), MPI_SUM, MPI_COMM_WORLD);
    gsync::allreduce(comm, std::span<const float>{in}, std::span<float>{out}, gsync::op::sum{});
    for (std::size_t i = 0; i < c; ++i) {
      const double tol = 1e-6 * n * (1.0 + std::fabs(exact[i]));
      if (std::fabs(out[i] - exact[i]) > tol || std::fabs(ref[i] - exact[i]) > tol) { fail("allreduce float sum", c); break; }
    }
  }
  // reduce_scatter (MPI_Reduce_scatter_block), out of place and in place.
  {
    auto in = small_ints<std::int64_t>(g, c * n, -50, 50);
    std::vector<std::int64_t> ref(c), out(c);
    MPI_Reduce_scatter_block(in.data(), ref.data(), static_cast<int>(c), mpi_type<std::int64_t>(), MPI_SUM, MPI_COMM_WORLD);
    gsync::reduce_scatter(comm, std::span<const std::int64_t>{in}, std::span<std::int64_t>{out}, gsync::op::sum{});
    if (out != ref) fail("reduce_scatter int64 sum", c);
    auto buf = in;
    gsync::reduce_scatter(comm, std::span<const std::int64_t>{buf},
                          std::span<std::int64_t>{buf.data() + static_cast<std::size_t>(r) * c, c}, gsync::op::sum{});
    if (!std::equal(ref.begin(), ref.end(), buf.begin() + static_cast<std::ptrdiff_t>(r * c))) fail("in-place reduce_scatter", c);
  }
  // allgather, out of place and in place.
  {
    auto in = small_ints<float>(g, c, -9, 9);
    std::vector<float> ref(c * n), out(c * n);
    MPI_Allgather(in.data(), static_cast<int>(c), mpi_type<float>(), ref.data(), static_cast<int>(c), mpi_type<float>(), MPI_COMM_WORLD);
    gsync::allgather(comm, std::span<const float>{in}, std::span<float>{out});
    if (out != ref) fail("allgather float", c);
    std::vector<float> buf(c * n, -1.f);
    std::copy(in.begin(), in.end(), buf.begin() + static_cast<std::ptrdiff_t>(r * c));
    gsync::allgather(comm, std::span<const float>{buf.data() + static_cast<std::size_t>(r) * c, c}, std::span<float>{buf});
    if (buf != ref) fail("in-place allgather", c);
  }
  // broadcast and reduce from every root.
  for (int root = 0; root < n; ++root) {
    auto b = small_ints<std::uint8_t>(g, c, 0, 255);
    auto m = b;
    MPI_Bcast(m.data(), static_cast<int>(c), mpi_type<std::uint8_t>(), root, MPI_COMM_WORLD);
    gsync::broadcast(comm, std::span<std::uint8_t>{b}, root);
    if (b != m) fail("broadcast uint8", c);
    auto in = small_ints<std::int32_t>(g, c, -3, 3);
    std::vector<std::int32_t> ref(c), out(r == root ? c : 0);
    MPI_Reduce(in.data(), ref.data(), static_cast<int>(c), mpi_type<std::int32_t>(), MPI_PROD, root, MPI_COMM_WORLD);
    gsync::reduce(comm, std::span<const std::int32_t>{in}, std::span<std::int32_t>{out}, gsync::op::prod{}, root);
    if (r == root && out != ref) fail("reduce int32 prod", c);
  }
  // gather and scatter from every root, out of place and in place (MPI_IN_PLACE on the root).
  for (int root = 0; root < n; ++root) {
    const std::size_t nn = static_cast<std::size_t>(n), R = static_cast<std::size_t>(root);
    auto in = small_ints<std::int32_t>(g, c, -1000, 1000);
    std::vector<std::int32_t> ref(r == root ? c * nn : 0), out(r == root ? c * nn : 0, -1);
    MPI_Gather(in.data(), static_cast<int>(c), mpi_type<std::int32_t>(), ref.data(), static_cast<int>(c), mpi_type<std::int32_t>(), root,
               MPI_COMM_WORLD);
    gsync::gather(comm, std::span<const std::int32_t>{in}, std::span<std::int32_t>{out}, root);
    if (out != ref) fail("gather int32", c);
    if (r == root) {
      std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(R * c));
      gsync::gather(comm, std::span<const std::int32_t>{out.data() + R * c, c}, std::span<std::int32_t>{out}, root);
      if (out != ref) fail("in-place gather", c);
    } else {
      gsync::gather(comm, std::span<const std::int32_t>{in}, std::span<std::int32_t>{}, root);
    }
    auto sin = small_ints<double>(g, r == root ? c * nn : 0, -50, 50);
    std::vector<double> sref(c), sout(c, -1.0);
    MPI_Scatter(sin.data(), static_cast<int>(c), mpi_type<double>(), sref.data(), static_cast<int>(c), mpi_type<double>(), root, MPI_COMM_WORLD);
    gsync::scatter(comm, std::span<const double>{sin}, std::span<double>{sout}, root);
    if (sout != sref) fail("scatter double", c);
    if (r == root) {
      gsync::scatter(comm, std::span<const double>{sin}, std::span<double>{sin.data() + R * c, c}, root);
      if (!std::equal(sref.begin(), sref.end(), sin.begin() + static_cast<std::ptrdiff_t>(R * c))) fail("in-place scatter", c);
    } else {
      gsync::scatter(comm, std::span<const double>{}, std::span<double>{sout}, root);
    }
  }
  // The v-collectives with uneven counts (some empty): block b holds (c * (b + 1) / n) elements,
  // plus one on odd blocks; alltoallv's pair (i, j) carries (c * (i + 2 * j + 1)) / (3 * n) elements.
  {
    const std::size_t nn = static_cast<std::size_t>(n);
    std::vector<std::size_t> counts(nn);
    std::vector<int> icounts(nn), displs(nn);
    for (std::size_t b = 0; b < nn; ++b) counts[b] = c * (b + 1) / nn + (b % 2);
    std::size_t total = 0;
    for (std::size_t b = 0; b < nn; ++b) {
      icounts[b] = static_cast<int>(counts[b]);
      displs[b] = static_cast<int>(total);
      total += counts[b];
    }
    const std::size_t mine = counts[static_cast<std::size_t>(r)], at = static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]);
    auto in = small_ints<float>(g, mine, -9, 9);
    std::vector<float> ref(total), out(total, -1.f);
    MPI_Allgatherv(in.data(), static_cast<int>(mine), mpi_type<float>(), ref.data(), icounts.data(), displs.data(), mpi_type<float>(), MPI_COMM_WORLD);
    gsync::allgatherv(comm, std::span<const float>{in}, std::span<float>{out}, counts);
    if (out != ref) fail("allgatherv float", c);
    std::vector<float> buf(total, -1.f);
    std::copy(in.begin(), in.end(), buf.begin() + static_cast<std::ptrdiff_t>(at));
    gsync::allgatherv(comm, std::span<const float>{buf.data() + at, mine}, std::span<float>{buf}, counts);
    if (buf != ref) fail("in-place allgatherv", c);

    auto rin = small_ints<std::int64_t>(g, total, -50, 50);
    std::vector<std::int64_t> rref(mine), rout(mine);
    MPI_Reduce_scatter(rin.data(), rref.data(), icounts.data(), mpi_type<std::int64_t>(), MPI_MAX, MPI_COMM_WORLD);
    gsync::reduce_scatterv(comm, std::span<const std::int64_t>{rin}, std::span<std::int64_t>{rout}, counts, gsync::op::max{});
    if (rout != rref) fail("reduce_scatterv int64 max", c);
    gsync::reduce_scatterv(comm, std::span<const std::int64_t>{rin}, std::span<std::int64_t>{rin.data() + at, mine}, counts, gsync::op::max{});
    if (!std::equal(rref.begin(), rref.end(), rin.begin() + static_cast<std::ptrdiff_t>(at))) fail("in-place reduce_scatterv", c);

    auto pair = [&](std::size_t i, std::size_t j) { return c * (i + 2 * j + 1) / (3 * nn); };
    std::vector<std::size_t> sc(nn), rc(nn);
    std::vector<int> isc(nn), irc(nn), sd(nn), rd(nn);
    std::size_t st = 0, rt = 0;
    for (std::size_t j = 0; j < nn; ++j) {
      sc[j] = pair(static_cast<std::size_t>(r), j);
      rc[j] = pair(j, static_cast<std::size_t>(r));
      isc[j] = static_cast<int>(sc[j]);
      irc[j] = static_cast<int>(rc[j]);
      sd[j] = static_cast<int>(st);
      rd[j] = static_cast<int>(rt);
      st += sc[j];
      rt += rc[j];
    }
    auto ain = small_ints<std::int16_t>(g, st, -300, 300);
    std::vector<std::int16_t> aref(rt), aout(rt, 7);
    MPI_Alltoallv(ain.data(), isc.data(), sd.data(), mpi_type<std::int16_t>(), aref.data(), irc.data(), rd.data(), mpi_type<std::int16_t>(),
                  MPI_COMM_WORLD);
    gsync::alltoallv(comm, std::span<const std::int16_t>{ain}, sc, std::span<std::int16_t>{aout}, rc);
    if (aout != aref) fail("alltoallv int16", c);
  }
  // alltoall.
  {
    std::vector<std::int16_t> in(c * n), ref(c * n), out(c * n);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int16_t>(r * 1000 + static_cast<int>(i % 997));
    MPI_Alltoall(in.data(), static_cast<int>(c), mpi_type<std::int16_t>(), ref.data(), static_cast<int>(c), mpi_type<std::int16_t>(), MPI_COMM_WORLD);
    gsync::alltoall(comm, std::span<const std::int16_t>{in}, std::span<std::int16_t>{out});
    if (out != ref) fail("alltoall int16", c);
  }
  // A ring shift with gsync::sendrecv, against MPI_Sendrecv of the same data; then plain send and
  // recv between neighbours (even ranks send first), against MPI_Send/MPI_Recv.
  if (n > 1) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto s = small_ints<double>(g, c, -7, 7);
    std::vector<double> got(c, 99.0), ref(c);
    MPI_Sendrecv(s.data(), static_cast<int>(c), mpi_type<double>(), next, 3, ref.data(), static_cast<int>(c), mpi_type<double>(),
                 prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    gsync::sendrecv(comm, std::span<const double>{s}, next, 3, std::span<double>{got}, prev, 3);
    if (got != ref) fail("sendrecv double", c);
    const int partner = r % 2 == 0 ? r + 1 : r - 1;
    if (partner < n) {
      auto m = small_ints<std::int32_t>(g, c, -1000, 1000);
      std::vector<std::int32_t> mref(c), mgot(c, 7);
      if (r % 2 == 0) {
        MPI_Send(m.data(), static_cast<int>(c), mpi_type<std::int32_t>(), partner, 4, MPI_COMM_WORLD);
        MPI_Recv(mref.data(), static_cast<int>(c), mpi_type<std::int32_t>(), partner, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        gsync::send(comm, std::span<const std::int32_t>{m}, partner, 4);
        gsync::recv(comm, std::span<std::int32_t>{mgot}, partner, 4);
      } else {
        MPI_Recv(mref.data(), static_cast<int>(c), mpi_type<std::int32_t>(), partner, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(m.data(), static_cast<int>(c), mpi_type<std::int32_t>(), partner, 4, MPI_COMM_WORLD);
        auto q = gsync::recv_async(comm, std::span<std::int32_t>{mgot}, partner, 4);
        q.wait();
        gsync::send(comm, std::span<const std::int32_t>{m}, partner, 4);
      }
      if (mgot != mref) fail("send/recv int32", c);
    }
  }
  // An asynchronous gsync allreduce in flight while this thread runs MPI collectives.
  {
    auto in = small_ints<double>(g, c, -100, 100);
    std::vector<double> ref(c), out(c);
    auto rq = gsync::allreduce_async(comm, std::span<const double>{in}, std::span<double>{out}, gsync::op::sum{});
    MPI_Allreduce(in.data(), ref.data(), static_cast<int>(c), mpi_type<double>(), MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    rq.wait();
    if (out != ref) fail("allreduce_async double sum beside MPI", c);
  }
  gsync::barrier(comm);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int r = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  g_rank = r;
  if (provided < MPI_THREAD_SERIALIZED && r == 0)
    std::printf("note: MPI gave thread level %d; the asynchronous case still only calls MPI from the main thread\n", provided);
  try {
    auto comm = gsync::tcp_communicator::from_env();
    if (comm.rank() != r || comm.size() != n) {
      std::printf("rank %d: gsync says rank %d of %d, MPI says %d of %d\n", r, comm.rank(), comm.size(), r, n);
      ++g_bad;
    } else {
      const std::size_t nn = static_cast<std::size_t>(n);
      for (std::size_t c : {std::size_t{0}, std::size_t{1}, nn > 1 ? nn - 1 : 1, std::size_t{13}, std::size_t{4099},
                            std::size_t{65537}, std::size_t{1} << 19 | 3})
        run(comm, c, n, r);
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", r, e.what());
    ++g_bad;
  }
  // A second communicator from the same environment once the first is gone (the first one's
  // store may still be waiting for its slowest rank to leave).
  try {
    auto comm = gsync::tcp_communicator::from_env();
    std::mt19937 g(static_cast<unsigned>(r));
    allreduce_exact<std::int32_t>(comm, g, 4099, gsync::op::max{}, MPI_MAX, "second communicator: allreduce int32 max");
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", r, e.what());
    ++g_bad;
  }
  int total = 0;
  MPI_Allreduce(&g_bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (r == 0) std::printf("%d ranks: %d mismatches with MPI\n", n, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
