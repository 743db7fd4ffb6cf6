#pragma once
/// \file
/// The CUDA IPC collectives as work queued on the caller's stream (no host thread in the loop; the
/// watchdog in cuda/ipc_group.hpp only observes). Element types are run-time values: only the
/// reduction (`ipc_reduction`, cuda/ipc_api.hpp: the installed kernels, or a user operator's kernel
/// compiled in the caller's .cu file) touches elements.
///
/// How chunks move. A message is cut into chunks that fit one arena slot; chunk k is step g of the
/// group (steps count chunks of every operation, in the same order on every rank) and uses slot
/// g mod 2. For each step, every rank:
/// 1. waits until every peer's `done` reached g-2 (the peers finished reading the slot this step
///    overwrites), unless this rank waited for every peer's `arrive` at step g-1, which a peer
///    writes only after it finished step g-2 (so in allreduce, reduce-scatter and allgather only
///    the first step of an operation after a broadcast or reduce waits);
/// 2. copies its input chunk into its slot (device to device) and writes `arrive = g`;
/// 3. waits until every peer's `arrive` reached g (their chunks are in their slots);
/// 4. reads the peers' slots directly:
///    - allreduce one-shot: reduces the whole chunk from all slots, in rank order, into its output;
///    - allreduce two-shot: reduces its own slice of the chunk from all slots into its own slot,
///      writes `reduced = g`, waits for every peer's `reduced`, and copies every rank's reduced
///      slice into its output (the same bits everywhere: each slice is summed once, in rank order);
///    - reduce-scatter: the slot holds the chunk of every destination block; it reduces the blocks
///      destined to it;
///    - allgather: copies every rank's chunk into its output;
///    - alltoall: the slot holds the chunk of every destination block; it copies the blocks
///      destined to it from every slot;
///    - broadcast: only the root copies in; the others copy from the root's slot;
/// 5. writes `done = g`;
/// and at the end of an operation, a word only this rank reads (its own progress, which peers
/// cannot write forward on a failure).
/// All waits and writes are stream memory operations on the control pages in host memory.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "gsync/core/dtype.hpp"
#include "gsync/core/error.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/ipc_api.hpp"
#include "gsync/cuda/ipc_group.hpp"
#include "gsync/cuda/ipc_plan.hpp"

namespace gsync::cuda::ipc {

/// The collectives the IPC schedules implement (part of every step's signature).
enum class collective : std::uint8_t {
  allreduce = 1, reduce_scatter, allgather, broadcast, reduce, alltoall,
  parts_reduce_scatter, parts_allgather  ///< the within-host levels of the hierarchical allreduce (cuda/ipc_hierarchical.hpp)
};

namespace detail {

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

/// One operation's queued steps on one stream.
class stepper {
 public:
  /// \param limit the operation's timeout: the watchdog (cuda/ipc_group.hpp) releases the stream
  /// when it passes; the waits themselves are bounded later, only where the runtime cannot wait
  /// without a host thread.
  stepper(group& g, cuda_stream s, std::chrono::milliseconds limit, std::uint64_t op_signature)
      : g_(g), api_(g.api()), s_(s), limit_(limit + std::chrono::seconds(10)), sig_(op_signature) {}

  /// Starts step for chunk `k`: records its signature, waits for the slot to be free. Returns the
  /// slot's byte offset.
  std::size_t begin(std::size_t k) {
    step_ = g_.next_step();
    if (first_ == 0) first_ = step_;
    g_.enqueued(step_, mix(sig_, k));
    // A slot is free once every peer is done with step - 2; waiting for all peers' arrival at
    // step - 1 (which they signal after finishing step - 2) proved that already.
    if (step_ > 2 && g_.all_arrived_step() + 1 != step_) wait_peers(&control_page::done, step_ - 2);
    return g_.layout().slot_offset(step_);
  }
  /// Queues a device-to-device copy from this rank's own memory (nothing for 0 bytes).
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes) api_.copy_async(dst, src, bytes, copy_kind::device_to_device, s_);
  }
  /// Queues a copy out of a peer's arena: a kernel that reads nothing once the group failed.
  void fetch(void* dst, const void* src, std::size_t bytes) {
    if (!bytes) return;
    ipc_kernels* k = installed_ipc_kernels();
    if (!k) throw error(errc::cuda, "device collective over CUDA IPC: the IPC kernels were uninstalled after the group formed");
    k->copy(dst, src, bytes, s_, g_.cancel_word());
  }
  /// Queues this rank's `field = step`.
  void signal(std::uint64_t control_page::*field) { api_.write_word(s_, &(g_.page(g_.rank()).*field), step_); }
  /// Queues waits until every peer's `field` reached the current step.
  void wait_all(std::uint64_t control_page::*field) {
    wait_peers(field, step_);
    if (field == &control_page::arrive) g_.set_all_arrived_step(step_);
  }
  /// Queues a wait until rank `r`'s `field` reached the current step.
  void wait_one(int r, std::uint64_t control_page::*field) {
    if (r != g_.rank()) api_.wait_word(s_, &(g_.page(r).*field), step_, limit_);
  }
  /// Ends the operation: queues this rank's private record of its last step (what teardown and
  /// failure handling wait for: the shared counters may have been written forward by peers) and
  /// returns the steps enqueued.
  step_range finish() {
    if (!first_) return {};
    api_.write_word(s_, g_.local_done_word(), step_);
    return {first_, step_};
  }
  std::uint64_t step() const noexcept { return step_; }  ///< current step

 private:
  void wait_peers(std::uint64_t control_page::*field, std::uint64_t value) {
    for (int p = 0; p < g_.size(); ++p)
      if (p != g_.rank()) api_.wait_word(s_, &(g_.page(p).*field), value, limit_);
  }
  group& g_;
  runtime_api& api_;
  cuda_stream s_;
  std::chrono::milliseconds limit_;
  std::uint64_t sig_;
  std::uint64_t step_ = 0, first_ = 0;
};

inline std::uint64_t signature(collective c, dtype t, std::uint8_t op, std::size_t count, int root, schedule sch) noexcept {
  std::uint64_t h = mix(static_cast<std::uint64_t>(c), static_cast<std::uint64_t>(t));
  h = mix(h, static_cast<std::uint64_t>(op));
  h = mix(h, count);
  h = mix(h, static_cast<std::uint64_t>(root + 1));
  return mix(h, static_cast<std::uint64_t>(sch));
}

inline std::byte* at(void* p, std::size_t bytes) noexcept { return static_cast<std::byte*>(p) + bytes; }
inline const std::byte* at(const void* p, std::size_t bytes) noexcept { return static_cast<const std::byte*>(p) + bytes; }

}  // namespace detail

/// Queues an allreduce of `count` elements of `t` from `in` to `out` (may be equal) on `s`.
inline step_range allreduce(group& g, const ipc_reduction& red, const void* in, void* out, std::size_t count, dtype t, schedule sch,
                            cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t), n = static_cast<std::size_t>(g.size());
  const std::size_t per = chunk_elems(g.layout().slot_bytes, e);
  detail::stepper st(g, s, limit, detail::signature(collective::allreduce, t, red.code(), count, -1, sch));
  for (std::size_t c = 0, nc = chunks(count, per); c < nc; ++c) {
    const range ch = chunk(count, per, c);
    const std::size_t slot = st.begin(c);
    st.copy(g.arena(g.rank()) + slot, detail::at(in, ch.first * e), ch.count * e);
    st.signal(&control_page::arrive);
    st.wait_all(&control_page::arrive);
    ipc_sources src;
    src.n = g.size();
    if (sch == schedule::one_shot) {
      for (std::size_t p = 0; p < n; ++p) src.p[p] = g.arena(static_cast<int>(p)) + slot;
      red(src, detail::at(out, ch.first * e), ch.count, true, s, g.cancel_word());
    } else {
      const range mine = slice(ch.count, g.size(), g.rank(), e);
      if (mine.count) {
        for (std::size_t p = 0; p < n; ++p) src.p[p] = g.arena(static_cast<int>(p)) + slot + mine.first * e;
        red(src, g.arena(g.rank()) + slot + mine.first * e, mine.count, true, s, g.cancel_word());
      }
      st.signal(&control_page::reduced);
      st.wait_all(&control_page::reduced);
      for (int p = 0; p < g.size(); ++p) {
        const range sl = slice(ch.count, g.size(), p, e);
        st.fetch(detail::at(out, (ch.first + sl.first) * e), g.arena(p) + slot + sl.first * e, sl.count * e);
      }
    }
    st.signal(&control_page::done);
  }
  return st.finish();
}

/// Queues a reduce-scatter on `s`: `in` holds size() blocks of `count` elements; `out` (`count`
/// elements) receives the reduction of block rank().
inline step_range reduce_scatter(group& g, const ipc_reduction& red, const void* in, void* out, std::size_t count, dtype t,
                                 cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t), n = static_cast<std::size_t>(g.size());
  const std::size_t per = std::max<std::size_t>(1, chunk_elems(g.layout().slot_bytes, e) / n);
  detail::stepper st(g, s, limit, detail::signature(collective::reduce_scatter, t, red.code(), count, -1, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(count, per); c < nc; ++c) {
    const range ch = chunk(count, per, c);
    const std::size_t slot = st.begin(c);
    for (std::size_t b = 0; b < n; ++b)
      st.copy(g.arena(g.rank()) + slot + b * ch.count * e, detail::at(in, (b * count + ch.first) * e), ch.count * e);
    st.signal(&control_page::arrive);
    st.wait_all(&control_page::arrive);
    ipc_sources src;
    src.n = g.size();
    for (std::size_t p = 0; p < n; ++p)
      src.p[p] = g.arena(static_cast<int>(p)) + slot + static_cast<std::size_t>(g.rank()) * ch.count * e;
    red(src, detail::at(out, ch.first * e), ch.count, true, s, g.cancel_word());
    st.signal(&control_page::done);
  }
  return st.finish();
}

/// Queues an alltoall on `s`: `in` holds size() blocks of `count` elements, block p for rank p;
/// `out` receives size() blocks, block p from rank p.
inline step_range alltoall(group& g, const void* in, void* out, std::size_t count, dtype t, cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t), n = static_cast<std::size_t>(g.size());
  const std::size_t per = std::max<std::size_t>(1, chunk_elems(g.layout().slot_bytes, e) / n);
  detail::stepper st(g, s, limit, detail::signature(collective::alltoall, t, std::uint8_t{0}, count, -1, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(count, per); c < nc; ++c) {
    const range ch = chunk(count, per, c);
    const std::size_t slot = st.begin(c);
    for (std::size_t b = 0; b < n; ++b)
      st.copy(g.arena(g.rank()) + slot + b * ch.count * e, detail::at(in, (b * count + ch.first) * e), ch.count * e);
    st.signal(&control_page::arrive);
    st.wait_all(&control_page::arrive);
    for (std::size_t p = 0; p < n; ++p)
      st.fetch(detail::at(out, (p * count + ch.first) * e), g.arena(static_cast<int>(p)) + slot + static_cast<std::size_t>(g.rank()) * ch.count * e,
               ch.count * e);
    st.signal(&control_page::done);
  }
  return st.finish();
}

/// Queues an allgather on `s`: `in` (`count` elements) from every rank into `out` (size() blocks
/// of `count`, block r from rank r). `in` may be block rank() of `out`.
inline step_range allgather(group& g, const void* in, void* out, std::size_t count, dtype t, cuda_stream s,
                            std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t);
  const std::size_t per = chunk_elems(g.layout().slot_bytes, e);
  detail::stepper st(g, s, limit, detail::signature(collective::allgather, t, std::uint8_t{0}, count, -1, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(count, per); c < nc; ++c) {
    const range ch = chunk(count, per, c);
    const std::size_t slot = st.begin(c);
    st.copy(g.arena(g.rank()) + slot, detail::at(in, ch.first * e), ch.count * e);
    st.signal(&control_page::arrive);
    st.wait_all(&control_page::arrive);
    for (int p = 0; p < g.size(); ++p)
      st.fetch(detail::at(out, (static_cast<std::size_t>(p) * count + ch.first) * e), g.arena(p) + slot, ch.count * e);
    st.signal(&control_page::done);
  }
  return st.finish();
}

/// Queues a broadcast of `count` elements from `root`'s `data` into every rank's `data` on `s`.
inline step_range broadcast(group& g, void* data, std::size_t count, dtype t, int root, cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t);
  const std::size_t per = chunk_elems(g.layout().slot_bytes, e);
  detail::stepper st(g, s, limit, detail::signature(collective::broadcast, t, std::uint8_t{0}, count, root, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(count, per); c < nc; ++c) {
    const range ch = chunk(count, per, c);
    const std::size_t slot = st.begin(c);
    if (g.rank() == root) st.copy(g.arena(root) + slot, detail::at(data, ch.first * e), ch.count * e);
    st.signal(&control_page::arrive);
    if (g.rank() != root) {
      st.wait_one(root, &control_page::arrive);
      st.fetch(detail::at(data, ch.first * e), g.arena(root) + slot, ch.count * e);
    }
    st.signal(&control_page::done);
  }
  return st.finish();
}

/// Queues a reduce of `count` elements from every rank's `in` into `root`'s `out` on `s` (`out`
/// is only written on the root).
inline step_range reduce(group& g, const ipc_reduction& red, const void* in, void* out, std::size_t count, dtype t, int root,
                         cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t), n = static_cast<std::size_t>(g.size());
  const std::size_t per = chunk_elems(g.layout().slot_bytes, e);
  detail::stepper st(g, s, limit, detail::signature(collective::reduce, t, red.code(), count, root, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(count, per); c < nc; ++c) {
    const range ch = chunk(count, per, c);
    const std::size_t slot = st.begin(c);
    st.copy(g.arena(g.rank()) + slot, detail::at(in, ch.first * e), ch.count * e);
    st.signal(&control_page::arrive);
    if (g.rank() == root) {
      st.wait_all(&control_page::arrive);
      ipc_sources src;
      src.n = g.size();
      for (std::size_t p = 0; p < n; ++p) src.p[p] = g.arena(static_cast<int>(p)) + slot;
      red(src, detail::at(out, ch.first * e), ch.count, true, s, g.cancel_word());
    }
    st.signal(&control_page::done);
  }
  return st.finish();
}

}  // namespace gsync::cuda::ipc
