#pragma once
/// \file
/// The within-host levels of the hierarchical device allreduce (dispatch/ipc_hierarchical.hpp runs
/// them around a host-staged allreduce across hosts), queued on the caller's stream like the other
/// CUDA IPC schedules (cuda/ipc_schedule.hpp says how one step is ordered), and the choice between
/// the two hierarchical forms.
///
/// How chunks move. The buffer of `count` elements is cut into one part per rank of the host
/// (`part`: consecutive, each but the last a whole number of 256 bytes); local rank i owns part i.
/// - `reduce_scatter_parts`: step k moves piece k of every part (pieces of S/L elements for slots
///   of S, L ranks): each rank copies piece k of each part b of its input into its slot at
///   b x S/L; once every peer arrived, it reduces piece k of its own part from every slot, in rank
///   order, into its output at that piece's place. Afterwards rank i's output holds part i combined
///   over the host; nothing else of the output is written.
/// - `allgather_parts`: step k: each rank copies piece k of its own part (pieces of S elements)
///   from its buffer into its slot; once every peer arrived, it copies the peers' pieces into their
///   places in its buffer.
/// Both take as many steps as the largest part needs, on every rank.

#include <algorithm>
#include <chrono>
#include <cstddef>

#include "gsync/core/dtype.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/ipc_api.hpp"
#include "gsync/cuda/ipc_group.hpp"
#include "gsync/cuda/ipc_plan.hpp"
#include "gsync/cuda/ipc_schedule.hpp"

namespace gsync::cuda::ipc {

/// The part of the buffer local rank `r` of `n` owns in the hierarchical allreduce (as `slice`
/// cuts a two-shot chunk).
inline range part(std::size_t count, int n, int r, std::size_t elem) noexcept { return slice(count, n, r, elem); }

/// Forms of the hierarchical device allreduce.
enum class hier_form : std::uint8_t {
  two_level,    ///< allreduce inside the host over CUDA IPC, then the whole buffer across hosts
  three_level,  ///< reduce-scatter inside the host, this rank's part across hosts, allgather inside
};

/// Name of a form, for logs.
inline std::string_view name(hier_form f) noexcept { return f == hier_form::two_level ? "two-level" : "three-level"; }

/// Largest message (bytes) that takes the two-level form: there every rank of a host sends the
/// whole buffer across hosts (L times the bytes of the three-level form on the host's link), which
/// only pays for small messages, where one level fewer saves a step of latency. Not measured yet
/// (no machine with several GPU hosts here): 512 KiB up to 4 ranks per host, 256 KiB above, the
/// one-shot bounds published for NVLink-connected GPUs (vLLM's custom allreduce).
inline std::size_t two_level_max_bytes(int local) noexcept { return local <= 4 ? std::size_t{512} << 10 : std::size_t{256} << 10; }

/// The form for `bytes` with `local` ranks per host.
inline hier_form choose_form(std::size_t bytes, int local) noexcept {
  return bytes < two_level_max_bytes(local) ? hier_form::two_level : hier_form::three_level;
}

namespace detail {
/// Piece of one part per step of `reduce_scatter_parts`: a slot's share, whole 256-byte units.
inline std::size_t rs_piece_elems(std::size_t slot_bytes, int n, std::size_t e) noexcept {
  const std::size_t align = std::max<std::size_t>(1, slice_align_bytes / e);
  const std::size_t share = std::max<std::size_t>(1, chunk_elems(slot_bytes, e) / static_cast<std::size_t>(n));
  return share >= align ? share / align * align : share;
}
}  // namespace detail

/// Queues on `s` the reduce-scatter of the hierarchical allreduce (see the file comment): `out`
/// (may equal `in`) receives, at part rank()'s place, that part of `in` combined over the group.
/// `red` combines without finalizing (avg's division and a user operator's finalize come once, in
/// the level across hosts).
inline step_range reduce_scatter_parts(group& g, const ipc_reduction& red, const void* in, void* out, std::size_t count, dtype t,
                                       cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t), n = static_cast<std::size_t>(g.size());
  const std::size_t per = detail::rs_piece_elems(g.layout().slot_bytes, g.size(), e);
  const range mine = part(count, g.size(), g.rank(), e);
  detail::stepper st(g, s, limit, detail::signature(collective::parts_reduce_scatter, t, red.code(), count, -1, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(part(count, g.size(), 0, e).count, per); c < nc; ++c) {
    const std::size_t slot = st.begin(c);
    for (std::size_t b = 0; b < n; ++b) {
      const range pb = part(count, g.size(), static_cast<int>(b), e);
      const range piece = chunk(pb.count, per, c);
      st.copy(g.arena(g.rank()) + slot + b * per * e, detail::at(in, (pb.first + piece.first) * e), piece.count * e);
    }
    st.signal(&control_page::arrive);
    st.wait_all(&control_page::arrive);
    if (const range piece = chunk(mine.count, per, c); piece.count) {
      ipc_sources src;
      src.n = g.size();
      for (std::size_t p = 0; p < n; ++p)
        src.p[p] = g.arena(static_cast<int>(p)) + slot + static_cast<std::size_t>(g.rank()) * per * e;
      red(src, detail::at(out, (mine.first + piece.first) * e), piece.count, false, s, g.cancel_word());
    }
    st.signal(&control_page::done);
  }
  return st.finish();
}

/// Queues on `s` the allgather of the hierarchical allreduce: every rank's `data` holds its own
/// part (at its place) and receives every other part from its owner.
inline step_range allgather_parts(group& g, void* data, std::size_t count, dtype t, cuda_stream s, std::chrono::milliseconds limit) {
  const std::size_t e = size_of(t);
  const std::size_t per = chunk_elems(g.layout().slot_bytes, e);
  const range mine = part(count, g.size(), g.rank(), e);
  detail::stepper st(g, s, limit, detail::signature(collective::parts_allgather, t, std::uint8_t{0}, count, -1, schedule::one_shot));
  for (std::size_t c = 0, nc = chunks(part(count, g.size(), 0, e).count, per); c < nc; ++c) {
    const std::size_t slot = st.begin(c);
    const range own = chunk(mine.count, per, c);
    st.copy(g.arena(g.rank()) + slot, detail::at(data, (mine.first + own.first) * e), own.count * e);
    st.signal(&control_page::arrive);
    st.wait_all(&control_page::arrive);
    for (int p = 0; p < g.size(); ++p) {
      if (p == g.rank()) continue;
      const range pp = part(count, g.size(), p, e);
      const range piece = chunk(pp.count, per, c);
      st.fetch(detail::at(data, (pp.first + piece.first) * e), g.arena(p) + slot, piece.count * e);
    }
    st.signal(&control_page::done);
  }
  return st.finish();
}

}  // namespace gsync::cuda::ipc
