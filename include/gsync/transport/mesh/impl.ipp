#pragma once
/// \file
/// Definitions of `transport::mesh_view` (transport/mesh_view.hpp) over `transport::host_mesh`,
/// and the link list of `transport::tcp`: included by transport/tcp.hpp in the header-only mode,
/// by gsync/impl/src.hpp with GSYNC_SEPARATE_COMPILATION.

#include <utility>

#include "gsync/core/config.hpp"
#include "gsync/transport/links/link_kit.hpp"
#include "gsync/transport/links/shm_endpoint.hpp"
#include "gsync/transport/links/shm_link.hpp"
#include "gsync/transport/links/tcp_link.hpp"
#include "gsync/transport/links/verbs_endpoint.hpp"
#include "gsync/transport/mesh/any_source.ipp"
#include "gsync/transport/mesh/connect.ipp"
#include "gsync/transport/mesh/data_path.ipp"
#include "gsync/transport/mesh/diagnostics.ipp"
#include "gsync/transport/mesh/failure.ipp"
#include "gsync/transport/mesh/host_mesh.hpp"
#include "gsync/transport/mesh/link_path.ipp"
#include "gsync/transport/mesh/progress.ipp"
#include "gsync/transport/mesh/rare_calls.ipp"
#include "gsync/transport/mesh/setup.ipp"
#include "gsync/transport/mesh/setup_steps.ipp"
#include "gsync/transport/mesh/shrink.ipp"
#include "gsync/transport/tcp.hpp"

namespace gsync::transport {

#if defined(GSYNC_SEPARATE_COMPILATION)
#if GSYNC_HAVE_VERBS
template std::unique_ptr<link_kit> make_link_kit<shm_link, verbs_link, tcp_link>();  // declared extern in transport/tcp.hpp
#else
template std::unique_ptr<link_kit> make_link_kit<shm_link, tcp_link>();  // declared extern in transport/tcp.hpp
#endif
#endif

GSYNC_DECL mesh_view::mesh_view(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, kit_maker make)
    : mesh_view(li, timeout, std::move(log), gsync::detail::host_options_from_env(), make) {}
GSYNC_DECL mesh_view::mesh_view(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, host_options opt, kit_maker make)
    : m_(std::make_shared<host_mesh>(li, timeout, std::move(log), std::move(opt), make())),
      rank_(m_->rank()), size_(m_->size()), name_(m_->name()), topo_(&m_->topo()), local_(&m_->local_costs()) {}
GSYNC_DECL mesh_view::~mesh_view() {
  if (comm_ != 0 && m_) m_->forget_comm(comm_);
}

GSYNC_DECL void mesh_view::shrink_into(mesh_view& t, std::chrono::milliseconds timeout, const shrink_terms& terms, shrink_report& report) const {
  t.m_ = m_->shrink(timeout, terms, report, world_, comm_);  // a split view: over its members, in its order
  t.rank_ = t.m_->rank();
  t.size_ = t.m_->size();
  t.name_ = t.m_->name();
  t.topo_ = &t.m_->topo();
  t.local_ = &t.m_->local_costs();
}

GSYNC_DECL void mesh_view::split_into(mesh_view& view, const std::vector<int>& members, std::uint64_t comm) const {
  if (comm == 0) throw error(errc::invalid_argument, "tcp::split: communicator id 0 is the world's");
  mesh_view* v = &view;
  v->m_ = m_;
  v->comm_ = comm;
  v->world_.reserve(members.size());
  v->rank_ = -1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int r = members[i];
    if (r < 0 || r >= size_) throw error(errc::invalid_argument, "tcp::split: rank " + std::to_string(r) + " is not in the communicator");
    if (r == rank_) v->rank_ = static_cast<int>(i);
    v->world_.push_back(job_rank(r));
  }
  if (v->rank_ < 0) throw error(errc::invalid_argument, "tcp::split: this rank is not among the members");
  v->size_ = static_cast<int>(members.size());
  v->name_ = name_;
  v->local_ = local_;
  v->own_topo_ = std::make_shared<const topology>(m_->topo().subset(v->world_));
  v->topo_ = v->own_topo_.get();
  v->staging_ = std::shared_ptr<std::byte[]>(new (std::align_val_t{64}) std::byte[m_->options().staging_bytes],
                                             [](std::byte* p) { ::operator delete[](p, std::align_val_t{64}); });
  m_->share();
}

[[noreturn]] GSYNC_DECL void mesh_view::bad_peer(int peer) const {
  throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ": invalid peer rank " + std::to_string(peer) +
                                          " (communicator of " + std::to_string(size_) + " ranks)");
}

GSYNC_DECL int mesh_view::local_size() const noexcept {
  if (world_.empty()) return m_->local_size();
  return static_cast<int>(topo_->ranks_on(topo_->host_of(rank_)).size());
}
GSYNC_DECL bool mesh_view::is_shm_peer(int peer) const noexcept {
  if (peer < 0 || peer >= size_) return false;
  return m_->is_shm_peer(job_rank(peer));
}
GSYNC_DECL std::string_view mesh_view::link_name(int peer) const noexcept {
  if (peer < 0 || peer >= size_ || peer == rank_) return {};
  return m_->link_name(job_rank(peer));
}
GSYNC_DECL std::string_view mesh_view::link_where(int peer) const noexcept {
  if (peer < 0 || peer >= size_ || peer == rank_) return {};
  return m_->link_where(job_rank(peer));
}
GSYNC_DECL memory_registration mesh_view::register_memory(std::span<const std::byte> bytes) {
  return memory_registration(bytes, m_->register_memory(bytes));
}
GSYNC_DECL bool mesh_view::shm_asymmetric_fences() const noexcept { return m_->shm_asymmetric_fences(); }
GSYNC_DECL std::uint64_t mesh_view::shm_late_wakeups() const noexcept { return m_->shm_late_wakeups(); }
GSYNC_DECL std::uint64_t mesh_view::shm_read_position(int peer) const noexcept {
  return peer >= 0 && peer < size_ ? m_->shm_read_position(job_rank(peer)) : 0;
}
GSYNC_DECL bootstrap::store_client& mesh_view::store() { return m_->store(); }
GSYNC_DECL void mesh_view::measure_links(std::chrono::milliseconds timeout) {
  if (comm_ != 0) throw error(errc::invalid_argument, "tcp::measure_links: on the job's transport, not a split view");
  m_->measure_links(std::chrono::steady_clock::now() + timeout);
}
GSYNC_DECL void mesh_view::abort(const std::string& why) noexcept { m_->abort(why); }
GSYNC_DECL health_report mesh_view::health() const noexcept { return m_ ? m_->health() : health_report{}; }

GSYNC_DECL void mesh_view::post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
  id.fp.comm = comm_;
  m_->post_send(to_job(peer), id, src, n);
  posted_ += n;
}
GSYNC_DECL void mesh_view::recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
  id.fp.comm = comm_;
  m_->recv(to_job(peer), id, dst, n, dl);
}
GSYNC_DECL void mesh_view::recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                                 detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
  id.fp.comm = comm_;
  m_->recv_stream(to_job(peer), id, n, align, consume, dl, staging_.get());
}
GSYNC_DECL int mesh_view::probe_any(std::span<const message_id> ids, deadline dl) {
  if (ids.size() != static_cast<std::size_t>(size_)) throw error(errc::invalid_argument, "tcp::probe_any: one id per rank of the view");
  std::vector<host_mesh::probe_target> t;
  std::vector<int> view;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || ids[static_cast<std::size_t>(p)].tag == 0) continue;
    message_id id = ids[static_cast<std::size_t>(p)];
    id.fp.comm = comm_;
    t.push_back({to_job(p), id});
    view.push_back(p);
  }
  if (t.empty()) throw error(errc::invalid_argument, "tcp::probe_any: no peer to receive from");
  return view[m_->probe_any(t, dl)];
}
GSYNC_DECL void mesh_view::flush_sends(deadline dl) { m_->flush_sends(dl, comm_); }
GSYNC_DECL void mesh_view::progress_sends() { m_->progress_sends(); }
GSYNC_DECL void mesh_view::op_finished() noexcept {
  if (comm_ == 0) m_->op_finished();
}

}  // namespace gsync::transport
