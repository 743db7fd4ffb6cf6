#pragma once
/// \file
/// `transport::tcp`: the transport of `gsync::tcp_communicator`, ranks in processes on one or many
/// hosts. Peers on other hosts are reached over TCP, peers on the same host through shared-memory
/// rings; set-up goes through the rendezvous store (bootstrap/store.hpp). It is the mesh
/// (transport/mesh_view.hpp) over gsync's links, shared memory first, then verbs (where built),
/// then TCP (transport/links/); how it works, from set-up to failures: transport/mesh/host_mesh.hpp.
///
/// Light on purpose: the link types are only named here. The definitions (transport/mesh/*.ipp)
/// are included below in the header-only mode, and compiled once elsewhere with
/// GSYNC_SEPARATE_COMPILATION (detail/build_mode.hpp).

#include <memory>

#include "gsync/detail/build_mode.hpp"
#include "gsync/transport/mesh_view.hpp"

namespace gsync::transport {

class shm_link;
class tcp_link;
#if GSYNC_HAVE_VERBS
class verbs_link;

/// Shared memory between ranks of one host; InfiniBand / RoCE verbs between hosts where both
/// ranks have a port (transport/links/verbs_link.hpp); TCP otherwise (and where a host's segment
/// could not be made). Satisfies `transport_policy`, `send_progress_transport`,
/// `counting_transport`, `splittable_transport`, `shrinkable_transport`, and can be aborted from
/// another thread.
using tcp = mesh<shm_link, verbs_link, tcp_link>;
#if defined(GSYNC_SEPARATE_COMPILATION)
extern template std::unique_ptr<link_kit> make_link_kit<shm_link, verbs_link, tcp_link>();  // compiled in gsync/impl/src.hpp
#endif
#else
/// Shared memory between ranks of one host, TCP between hosts (built without libibverbs' headers).
using tcp = mesh<shm_link, tcp_link>;
#if defined(GSYNC_SEPARATE_COMPILATION)
extern template std::unique_ptr<link_kit> make_link_kit<shm_link, tcp_link>();  // compiled in gsync/impl/src.hpp
#endif
#endif

}  // namespace gsync::transport

#if !defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/transport/mesh/impl.ipp"
#endif
