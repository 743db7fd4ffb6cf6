#pragma once
/// \file
/// The two build modes of gsync, as Asio offers them.
///
/// - Header-only (the default): the set-up code (store, connections, shared-memory rings, the
///   transport's out-of-line functions, reading the environment, logging, the trace writer) is
///   `inline` and compiled in every translation unit that uses it; nothing to link but the system
///   libraries.
/// - `GSYNC_SEPARATE_COMPILATION` defined in every translation unit of the program: the set-up
///   code is only declared by the headers (no Asio, OpenSSL or store code is parsed there), and one
///   source file compiles it: `src/gsync.cpp` (CMake target `gsync::compiled`), or a file of the
///   program's own that says `#include <gsync/impl/src.hpp>`. That file also instantiates
///   `tcp_communicator` and the common allreduces, which the headers then declare `extern template`.
///   Mixing the modes in one program breaks the one-definition rule.
///
/// The definitions of a header `x.hpp` that this concerns are in `x.ipp` beside it, marked
/// `GSYNC_DECL`; `x.hpp` includes its `.ipp` at its end in the header-only mode.

#if defined(GSYNC_SEPARATE_COMPILATION)
#define GSYNC_DECL
#else
#define GSYNC_DECL inline
#endif

/// `GSYNC_HAVE_VERBS`: 1 when the InfiniBand / RoCE verbs link is built (libibverbs' headers are
/// found and the program does not define GSYNC_NO_VERBS), else 0. A program may define it itself;
/// the separate-compilation library states the value it was built with (CMake's gsync::compiled),
/// as the transport's type depends on it.
#if !defined(GSYNC_HAVE_VERBS)
#if defined(GSYNC_NO_VERBS) || !__has_include(<infiniband/verbs.h>)
#define GSYNC_HAVE_VERBS 0
#else
#define GSYNC_HAVE_VERBS 1
#endif
#endif
