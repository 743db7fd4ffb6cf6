#pragma once
/// \file
/// For a program that brings its own link type: `transport::mesh<Ls...>` (transport/mesh_view.hpp)
/// with what instantiates a list of its own (transport/links/link_kit.hpp), and gsync's link
/// types to build the list with (shm_link, verbs_link where built, tcp_link last). For example, with `my_link` a type of the `link` concept
/// (core/concepts.hpp) whose `link_traits` name its endpoint (transport/links/link_setup.hpp):
///
///     using my_transport = gsync::transport::mesh<my_link, gsync::transport::tcp_link>;
///     auto comm = gsync::communicator<my_transport>::join(launch_info, gsync::config::from_env());
///
/// tests/test_outside_link.cpp does this with a link over Unix-domain sockets.

#include "gsync/transport/links/link_kit.hpp"
#include "gsync/transport/links/shm_endpoint.hpp"
#include "gsync/transport/links/shm_link.hpp"
#include "gsync/transport/links/tcp_link.hpp"
#include "gsync/transport/links/verbs_endpoint.hpp"
#include "gsync/transport/mesh_view.hpp"
#include "gsync/transport/tcp.hpp"
