#pragma once
/// \file
/// Public communicator types:
///   gsync::tcp_communicator     ranks in processes (or hosts), connected over TCP; `from_env()`
///   gsync::inproc_communicator  ranks as threads of one process (tests, thread-parallel codes)

#include <memory>
#include <vector>

#include "gsync/bootstrap/join.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/recovery.hpp"
#include "gsync/split.hpp"
#include "gsync/transport/inproc.hpp"
#include "gsync/transport/tcp.hpp"

namespace gsync {

/// Communicator over the TCP transport: `auto comm = gsync::tcp_communicator::from_env();`
using tcp_communicator = communicator<transport::tcp>;

/// Communicator over the in-process transport (ranks are threads).
using inproc_communicator = communicator<transport::inproc>;

#if defined(GSYNC_SEPARATE_COMPILATION)
// Compiled once, in the library (gsync/impl/src.hpp): a file that makes or uses a tcp_communicator
// calls the members that are not inlined instead of generating them again. Not inproc_communicator:
// clang 14 instantiates the members whose constraints it fails (from_env, shrink) when the whole
// class is instantiated explicitly.
extern template class communicator<transport::tcp>;
#endif

/// Makes the `n` communicators of one in-process world; hand element r to the thread of rank r.
/// With `ranks_per_host` > 0 the ranks pretend to live on hosts of that many consecutive ranks
/// (for testing hierarchical schedules without a cluster).
inline std::vector<inproc_communicator> make_inproc_world(int n, config cfg = config::from_env(), int ranks_per_host = 0) {
  auto w = std::make_shared<transport::inproc_world>(n, ranks_per_host > 0 ? topology::blocks(n, ranks_per_host) : topology{});
  std::vector<inproc_communicator> v;
  v.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) v.emplace_back(std::make_unique<transport::inproc>(w, r), cfg);
  return v;
}

}  // namespace gsync
