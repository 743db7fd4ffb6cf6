#pragma once
/// \file
/// The staged memory space: host mirrors of device buffers (cuda/staging.hpp), whose bytes arrive
/// from the device while the schedule already runs. Its primitives are the host primitives, each
/// first waiting until the mirror bytes it reads or overwrites have arrived (a receive into a
/// range must not be overwritten by that range's late copy-in). Scratch is not a mirror: no wait.

#include <cstddef>
#include <span>
#include <string_view>

#include "gsync/core/memory_space.hpp"
#include "gsync/core/primitives.hpp"
#include "gsync/cuda/staging.hpp"

namespace gsync {

/// Host mirrors of device buffers being copied in (the space the staged path runs schedules in).
struct staged_memory {
  static constexpr std::string_view name = "staged";  ///< for messages
  /// Moved by whatever moves host memory. \tparam X a transport.
  template <class X>
  static constexpr bool moved_by = host_memory::moved_by<X>;
};
static_assert(memory_space<staged_memory>);

namespace cuda::detail {

/// Host primitives over mirrors, waiting for copy-in (`current_readiness`, read when made).
/// Untyped like the host space's, so that its schedules too are compiled once per transport.
/// \tparam X transport.
template <class X>
class staged_primitives {
 public:
  using region_t = host_region;  ///< the regions schedules name
  /// As basic_host_primitives (see memory_space.hpp for the arguments; `op` must outlive these).
  template <class T, class Op>
  staged_primitives(X& x, message_id id, const T* in, T* out, std::size_t count, std::size_t segment_elems,
                    const Op& op, deadline dl, std::span<std::byte> scratch = {})
      : h_(x, id, in, out, count, segment_elems, op, dl, scratch), es_(sizeof(T)), r_(current_readiness) {}

  int rank() const { return h_.rank(); }                                     ///< this rank
  int size() const { return h_.size(); }                                     ///< world size
  std::size_t count() const { return h_.count(); }                           ///< elements
  std::size_t segment_elems() const { return h_.segment_elems(); }           ///< pipelining unit
  bool in_place() const { return h_.in_place(); }                            ///< in == out
  const topology& topo() const { return h_.topo(); }                         ///< placement
  std::size_t scratch_elems() const { return h_.scratch_elems(); }           ///< scratch size
  region_t scratch(range r) const { return h_.scratch(r); }                  ///< scratch range
  region_t in(range r) const { return h_.in(r); }                            ///< input range
  region_t out(range r) const { return h_.out(r); }                          ///< output range

  /// basic_host_primitives::send once `src` has arrived.
  void send(int to, region_t src) {
    ready(src);
    h_.send(to, src);
  }
  /// basic_host_primitives::recv once `dst` is no longer being copied in.
  void recv(int from, region_t dst) {
    ready(dst);
    h_.recv(from, dst);
  }
  /// basic_host_primitives::recv_reduce once `dst` and `local` have arrived.
  void recv_reduce(int from, region_t dst, region_t local, bool final) {
    ready(dst);
    ready(local);
    h_.recv_reduce(from, dst, local, final);
  }
  /// basic_host_primitives::recv_reduce_send once `dst` and `local` have arrived.
  void recv_reduce_send(int from, int to, region_t dst, region_t local, bool final) {
    ready(dst);
    ready(local);
    h_.recv_reduce_send(from, to, dst, local, final);
  }
  /// basic_host_primitives::recv_copy_send once `dst` is no longer being copied in.
  void recv_copy_send(int from, int to, region_t dst) {
    ready(dst);
    h_.recv_copy_send(from, to, dst);
  }
  /// basic_host_primitives::copy_final once both have arrived.
  void copy_final(region_t dst, region_t src) {
    ready(dst);
    ready(src);
    h_.copy_final(dst, src);
  }
  /// basic_host_primitives::reduce once all three have arrived.
  void reduce(region_t dst, region_t a, region_t b, bool final) {
    ready(dst);
    ready(a);
    ready(b);
    h_.reduce(dst, a, b, final);
  }
  /// basic_host_primitives::copy once both have arrived.
  void copy(region_t dst, region_t src) {
    ready(dst);
    ready(src);
    h_.copy(dst, src);
  }
  /// basic_host_primitives::finish.
  void finish() { h_.finish(); }

 private:
  void ready(region_t r) {
    if (r_) r_->ensure(r.p_, r.n_ * es_);
  }
  basic_host_primitives<X> h_;
  std::size_t es_;
  readiness* r_;
};

}  // namespace cuda::detail

/// The staged space runs schedules over staged_primitives.
/// \tparam T element type. \tparam Op reduction operator. \tparam X transport.
template <class T, class Op, class X>
struct primitives_for<staged_memory, T, Op, X> {
  using type = cuda::detail::staged_primitives<X>;  ///< the staged space's primitives
};

}  // namespace gsync
