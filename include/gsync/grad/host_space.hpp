#pragma once
/// \file
/// `grad::detail::host_space<Reducer>`: the bucket space (grad/bucket_space.hpp) of the host
/// synchronizer. Buckets are aligned host memory; packing and the fused unpack are the element
/// passes of grad/nonfinite.hpp, run by the caller's thread; a bucket is reduced by the host bucket
/// reducer (grad/bucket_reducer.hpp) on the communicator's progress engine.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "gsync/communicator.hpp"
#include "gsync/core/request.hpp"
#include "gsync/detail/aligned_buffer.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_reducer.hpp"
#include "gsync/grad/bucket_space.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/synchronizer_common.hpp"

namespace gsync::grad::detail {

/// Host buckets reduced by `Reducer` (a `bucket_reducer`). \tparam Reducer the reducer.
template <class Reducer>
class host_space {
 public:
  static constexpr synchronizer_style style{"synchronizer", true, true};  ///< names and messages

  /// A space whose buckets `reducer` reduces.
  explicit host_space(Reducer reducer) : reducer_(std::move(reducer)) {}
  host_space(const host_space&) = delete;
  host_space& operator=(const host_space&) = delete;

  /// Host memory needs no care: runs `place`.
  void allocate(std::chrono::milliseconds, std::size_t, std::size_t, gsync::detail::function_ref<void()> place) { place(); }
  /// Aligned bucket memory, the first `bytes` zeroed.
  std::byte* zeroed(std::size_t bytes) {
    std::byte* p = buffer(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  /// Aligned bucket memory.
  std::byte* buffer(std::size_t bytes) {
    return owned_.emplace_back(gsync::detail::make_aligned_bytes(std::max<std::size_t>(1, bytes))).get();
  }

  /// Copies `t` into the bucket, or casts it into the wire buffer; a view with no cast already sits
  /// in the communicated buffer.
  void pack(const registered_tensor& t, const tensor_place& pl, bucket_state& bs) {
    const bool cast = bs.wire_type != bs.grad_type;
    if (!t.is_view && !cast) {
      std::memcpy(bs.storage + pl.offset * size_of(bs.grad_type), t.ref.data, pl.count * size_of(bs.grad_type));
    } else if (cast) {
      visit2(bs.grad_type, bs.wire_type, [&](auto g, auto w) {
        using G = decltype(g);
        using W = decltype(w);
        cast_into(static_cast<const G*>(t.ref.data), reinterpret_cast<W*>(bs.wire) + pl.offset, pl.count);
      });
    }
  }

  /// Issues the reduction of bucket `b` through the reducer. \tparam X transport. \tparam W wire element.
  template <class X, class W>
  request launch(communicator<X>& comm, std::size_t b, W* data, std::size_t count, bool average, std::uint64_t* bytes_sent) {
    bucket_job<W> job{b, std::span<W>{data, count}, average, bytes_sent};
    return reducer_.start(comm, job);
  }

  /// The fused unpack of every bucket, bucket by bucket; a report per tensor with non-finite values.
  void unpack(const bucket_plan& plan, const std::vector<bucket_state>& buckets, const std::vector<registered_tensor>& tensors,
              float factor, std::vector<nonfinite_report>& reports, std::chrono::milliseconds) {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const bucket_state& bs = buckets[b];
      visit2(bs.wire_type, bs.grad_type, [&](auto w, auto g) {
        using W = decltype(w);
        using G = decltype(g);
        const W* src = reinterpret_cast<const W*>(bs.comm_buffer());
        for (std::size_t i : plan.bucket(b).tensors) {
          const tensor_place& pl = plan.place(i);
          G* dst = static_cast<G*>(tensors[i].ref.data);
          const std::size_t bad = unpack_scan(src + pl.offset, dst, pl.count, factor);
          if (bad != 0) {
            const std::size_t first = first_nonfinite(dst, pl.count);
            reports.push_back({b, i, tensors[i].name, bad, first, static_cast<float>(dst[first])});
          }
        }
      });
    }
  }

  /// Nothing of the host's is queued beyond the requests.
  void drain(bool, std::chrono::milliseconds) noexcept {}

 private:
  template <class F>
  static void visit2(dtype a, dtype b, F&& f) {
    visit_grad_type(a, [&](auto ta) { visit_grad_type(b, [&](auto tb) { f(ta, tb); }); });
  }

  Reducer reducer_;
  std::vector<gsync::detail::aligned_bytes> owned_;  // every bucket's memory
};

}  // namespace gsync::grad::detail
