#pragma once
/// \file
/// The hook behind `communicator::from_mpi`: `mpi_launch<MPI_Comm>::info(comm)` describes this
/// rank's place in an MPI communicator as a `bootstrap::launch_info`. Defined in gsync/mpi.hpp,
/// the only gsync header that includes mpi.h, so that programs without MPI never see it.

namespace gsync::detail {

/// Specialised for `MPI_Comm` by gsync/mpi.hpp.
template <class MpiComm>
struct mpi_launch {
  static_assert(sizeof(MpiComm) == 0, "communicator::from_mpi(comm) needs #include <gsync/mpi.hpp>, and comm must be an MPI_Comm");
};

}  // namespace gsync::detail
