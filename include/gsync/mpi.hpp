#pragma once
/// \file
/// gsync inside an MPI program: `auto comm = gsync::tcp_communicator::from_mpi(MPI_COMM_WORLD);`
///
/// `from_mpi(c)` is collective over the MPI communicator `c` (the world or any split of it) and
/// returns a gsync communicator over the same ranks, in the same order. Everything gsync needs to
/// start comes through MPI: rank and size from `c`; which ranks share a host from
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`; a job key of 32 random bytes drawn by rank 0 and
/// broadcast, so every connection is authenticated without GSYNC_JOB_KEY; and the address of the
/// store, which rank 0 serves on a free port of its own address (loopback when every rank is on
/// one host; else GSYNC_SOCKET_IFNAME's address, or the one of its default route) and broadcasts.
/// No master address or port is read, so any number of communicators can be made, at once or one
/// after another. Other GSYNC_* settings are read as by `from_env()` unless `cfg` is given.
///
/// MPI must be initialised. gsync makes MPI calls only inside `from_mpi`, on the calling thread;
/// afterwards the two libraries are independent (gsync's traffic is its own TCP and shared
/// memory), so any MPI thread level will do.

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's deprecated C++ bindings are not wanted
#endif
#include <mpi.h>

#include <string>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"

namespace gsync::detail {

/// Throws `errc::system` naming the MPI call when `rc` is not MPI_SUCCESS.
inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw error(errc::system, std::string("from_mpi: ") + what + " failed: " + std::string(msg, static_cast<std::size_t>(len)));
}

/// Broadcasts `s` from rank 0 of `c` (its length first).
inline void mpi_bcast_string(MPI_Comm c, std::string& s) {
  int rank = 0;
  mpi_check(MPI_Comm_rank(c, &rank), "MPI_Comm_rank");
  unsigned long long n = s.size();
  mpi_check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, c), "MPI_Bcast");
  if (rank != 0) s.assign(static_cast<std::size_t>(n), '\0');
  if (n > 0) mpi_check(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, c), "MPI_Bcast");
}

template <>
struct mpi_launch<MPI_Comm> {
  static bootstrap::launch_info info(MPI_Comm c) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) throw error(errc::invalid_argument, "from_mpi: MPI is not initialised (call MPI_Init or MPI_Init_thread first)");
    if (c == MPI_COMM_NULL) throw error(errc::invalid_argument, "from_mpi: MPI_COMM_NULL (a rank that split with MPI_UNDEFINED is in no communicator)");
    int inter = 0;
    mpi_check(MPI_Comm_test_inter(c, &inter), "MPI_Comm_test_inter");
    if (inter) throw error(errc::invalid_argument, "from_mpi: an intercommunicator; pass an intracommunicator");
    bootstrap::launch_info li;
    mpi_check(MPI_Comm_rank(c, &li.rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(c, &li.size), "MPI_Comm_size");
    MPI_Comm node = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, li.rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    mpi_check(MPI_Comm_rank(node, &li.local_rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(node, &li.local_size), "MPI_Comm_size");
    MPI_Comm_free(&node);
    li.source = "mpi";
    // Rank 0 decides where the store lives: loopback when the communicator fits in its host.
    int all_local = li.local_size == li.size;
    mpi_check(MPI_Bcast(&all_local, 1, MPI_INT, 0, c), "MPI_Bcast");
    li.master_addr = all_local ? "127.0.0.1" : "";
    li.master_port = 0;
    std::string key;
#if defined(GSYNC_HAVE_OPENSSL)
    if (li.rank == 0) {
      const auto a = bootstrap::auth::fresh_nonce(), b = bootstrap::auth::fresh_nonce();
      key.assign(reinterpret_cast<const char*>(a.data()), a.size());
      key.append(reinterpret_cast<const char*>(b.data()), b.size());
    }
    mpi_bcast_string(c, key);
#else
    if (li.rank == 0)
      logger(0).warn("from_mpi: built without libcrypto (OpenSSL): connections are NOT authenticated");
#endif
    li.job_key = key;
    li.share_store = [c](std::string& s) { mpi_bcast_string(c, s); };
    return li;
  }
};

}  // namespace gsync::detail
