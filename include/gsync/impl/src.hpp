#pragma once
/// \file
/// The compiled part of gsync in GSYNC_SEPARATE_COMPILATION mode (see detail/build_mode.hpp):
/// include this header in exactly one source file of the program (src/gsync.cpp does, for the
/// CMake target `gsync::compiled`).

#if !defined(GSYNC_SEPARATE_COMPILATION)
#error "gsync/impl/src.hpp is for GSYNC_SEPARATE_COMPILATION builds; header-only builds need no source file"
#endif

#include "gsync/bootstrap/fd_limit.ipp"
#include "gsync/core/config.ipp"
#include "gsync/core/log.ipp"
#include "gsync/core/trace.ipp"
#include "gsync/transport/mesh/impl.ipp"

// The allreduce instantiations users' files declare extern (detail/compiled_instances.hpp).
#include "gsync/allreduce.hpp"

// The communicator that communicator.hpp declares extern in this mode: after allreduce.hpp, which
// defines its out-of-class members (split, shrink), so that this instantiates them too.
template class gsync::communicator<gsync::transport::tcp>;

#define GSYNC_INSTANTIATE_ALLREDUCE_RUN(T, Op) template GSYNC_ALLREDUCE_RUN_SIGNATURE(T, Op);
GSYNC_COMPILED_ALLREDUCE(GSYNC_INSTANTIATE_ALLREDUCE_RUN)
#undef GSYNC_INSTANTIATE_ALLREDUCE_RUN
