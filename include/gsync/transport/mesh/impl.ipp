#pragma once
/// \file
/// Definitions of `transport::tcp` (transport/tcp.hpp) over `transport::host_mesh`: included by
/// transport/tcp.hpp in the header-only mode, by gsync/impl/src.hpp with GSYNC_SEPARATE_COMPILATION.

#include <utility>

#include "gsync/transport/mesh/data_path.ipp"
#include "gsync/transport/mesh/diagnostics.ipp"
#include "gsync/transport/mesh/failure.ipp"
#include "gsync/transport/mesh/host_mesh.hpp"
#include "gsync/transport/mesh/link_path.ipp"
#include "gsync/transport/mesh/progress.ipp"
#include "gsync/transport/mesh/setup.ipp"
#include "gsync/transport/tcp.hpp"

namespace gsync::transport {

GSYNC_DECL tcp::tcp(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log)
    : tcp(li, timeout, std::move(log), detail::tcp_options_from_env()) {}
GSYNC_DECL tcp::tcp(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, tcp_options opt)
    : m_(std::make_unique<host_mesh>(li, timeout, std::move(log), std::move(opt))),
      rank_(m_->rank()), size_(m_->size()), name_(m_->name()), topo_(&m_->topo()), local_(&m_->local_costs()) {}
GSYNC_DECL tcp::~tcp() = default;

GSYNC_DECL int tcp::local_size() const noexcept { return m_->local_size(); }
GSYNC_DECL bool tcp::is_shm_peer(int peer) const noexcept { return m_->is_shm_peer(peer); }
GSYNC_DECL bool tcp::shm_asymmetric_fences() const noexcept { return m_->shm_asymmetric_fences(); }
GSYNC_DECL std::uint64_t tcp::shm_late_wakeups() const noexcept { return m_->shm_late_wakeups(); }
GSYNC_DECL std::uint64_t tcp::shm_read_position(int peer) const noexcept { return m_->shm_read_position(peer); }
GSYNC_DECL bootstrap::store_client& tcp::store() { return m_->store(); }
GSYNC_DECL void tcp::abort(const std::string& why) noexcept { m_->abort(why); }
GSYNC_DECL std::uint64_t tcp::payload_bytes_posted() const noexcept { return m_->payload_bytes_posted(); }

GSYNC_DECL void tcp::post_send(int peer, message_id id, const std::byte* src, std::size_t n) { m_->post_send(peer, id, src, n); }
GSYNC_DECL void tcp::recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) { m_->recv(peer, id, dst, n, dl); }
GSYNC_DECL void tcp::recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                                 detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
  m_->recv_stream(peer, id, n, align, consume, dl);
}
GSYNC_DECL void tcp::flush_sends(deadline dl) { m_->flush_sends(dl); }
GSYNC_DECL void tcp::progress_sends() { m_->progress_sends(); }
GSYNC_DECL void tcp::op_finished() noexcept { m_->op_finished(); }

}  // namespace gsync::transport
