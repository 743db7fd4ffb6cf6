#pragma once
/// \file
/// The table of the data path's rare calls (`mesh_rare_calls`, transport/mesh/rare_calls.hpp):
/// connections made on first use, the failure protocol, the diagnostics. Referenced only by the
/// constructor, so that a file that only calls collectives compiles none of them.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

GSYNC_DECL const host_mesh::rare_calls host_mesh::rare{
    [](host_mesh& m, int peer, deadline dl) { m.do_dial(peer, dl); },
    [](host_mesh& m, deadline dl) { m.do_accept_ready(dl); },
    [](host_mesh& m) { m.do_admit_some(); },
    [](host_mesh& m) { m.do_check_lost_while_unconnected(); },
    [](host_mesh& m, errc kind, const std::string& msg, int lost) { m.do_fail(kind, msg, lost); },
    [](host_mesh& m, int peer, const std::string& msg, int culprit) { m.do_lost(peer, msg, culprit); },
    [](host_mesh& m, int peer, const frame_header& h, const std::byte* have, std::size_t got, message_id id) { m.do_on_notice(peer, h, have, got, id); },
    [](host_mesh& m, const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got) {
      m.do_bad_frame(h, id, n, peer, have, got);
    },
    [](host_mesh& m, int in_peer, message_id id) { m.do_timed_out(in_peer, id); },
    [](host_mesh& m, int peer, message_id id) { m.do_closed_elsewhere(peer, id); },
    [](host_mesh& m, const std::string& why) noexcept { m.do_abort(why); },
    [](host_mesh& m, int in_peer, message_id id, deadline dl, std::chrono::steady_clock::time_point now) { m.do_stall_report(in_peer, id, dl, now); },
    [](host_mesh& m) noexcept { m.stall_.erase_record(); },
};

}  // namespace gsync::transport
