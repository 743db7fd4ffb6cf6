#pragma once
/// \file
/// `transport::mesh_rare_calls`: the table through which the host mesh's data path reaches its
/// rare calls (connections made on first use, the failure protocol, the timeout and stall reports,
/// abort). Only the mesh's constructor references the table (transport/mesh/rare_calls.ipp), so a
/// header-only file that only calls collectives on a communicator it was given compiles none of
/// those calls, nor the store client and the Asio code they use: GCC emits only what a file can
/// reach. A virtual call would not do: GCC compiles its only implementation, to call it speculatively.

#include <chrono>
#include <cstddef>
#include <string>

#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/transport/frame.hpp"

namespace gsync::transport {

class host_mesh;

struct mesh_rare_calls {
  void (*dial)(host_mesh&, int peer, deadline dl);
  void (*accept_ready)(host_mesh&, deadline dl);
  void (*admit_some)(host_mesh&);
  void (*check_lost_while_unconnected)(host_mesh&);
  void (*fail)(host_mesh&, errc kind, const std::string& msg, int lost);  // do not return
  void (*lost)(host_mesh&, int peer, const std::string& msg, int culprit);
  void (*on_notice)(host_mesh&, int peer, const frame_header& h, const std::byte* have, std::size_t got, message_id id);
  void (*bad_frame)(host_mesh&, const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got);
  void (*timed_out)(host_mesh&, int in_peer, message_id id);
  void (*closed_elsewhere)(host_mesh&, int peer, message_id id);
  void (*abort)(host_mesh&, const std::string& why) noexcept;
  void (*stall_report)(host_mesh&, int in_peer, message_id id, deadline dl, std::chrono::steady_clock::time_point now);
  void (*erase_stall_record)(host_mesh&) noexcept;
};

}  // namespace gsync::transport
