#pragma once
/// \file
/// `grad::detail::bucket_space`: what the bucket engine (grad/bucket_engine.hpp) asks of the place
/// where a synchronizer's buckets live. The host and the device synchronizers run the same engine
/// and differ only in their space: grad/host_space.hpp (host memory, element loops, `bucket_reducer`)
/// and grad/device_space.hpp (device memory, stream-ordered kernels, `device_bucket_reducer`).

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/half.hpp"
#include "gsync/core/request.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/synchronizer_common.hpp"

namespace gsync::grad::detail {

/// How a synchronizer presents itself beyond its memory: the name in its errors, their form, and
/// whether a step is a span on the GSYNC_TRACE timeline. The device synchronizer has always given
/// the short messages and no trace span; kept, since programs may match the messages.
struct synchronizer_style {
  const char* who;        ///< "synchronizer" or "device_synchronizer"
  bool detailed_errors;   ///< the long forms (which calls build, the index, the type asked for)
  bool trace_steps;       ///< one "step" / "micro-step" span per finish()
};

/// A bucket space: where a synchronizer's buckets live and how one bucket is packed, reduced and
/// unpacked; the bucket engine (grad/bucket_engine.hpp) does the rest. For the transport X of the
/// communicator, a space `s` of type S provides:
/// - `S::style`, a constexpr `synchronizer_style`;
/// - `s.allocate(timeout, tensors, buckets, place)`: calls `place()` (which takes every bucket's
///   memory from `s.zeroed` and `s.buffer`) where allocating is safe, and makes what the space itself
///   needs for `tensors` tensors and `buckets` buckets; once, at build;
/// - `s.zeroed(bytes)`, `s.buffer(bytes)`: bucket memory of at least one byte, the first `bytes`
///   zeroed (`zeroed`: before any later work on the bucket) or not; the space frees it when destroyed;
/// - `s.pack(t, place, bucket)`: copies tensor `t` into its bucket, or casts it to the wire buffer;
/// - `s.launch(comm, b, data, count, average, bytes_sent)`, W float, bfloat16 or half: starts the
///   reduction of bucket `b` (`count` elements of W at `data`) over the ranks; the bucket is packed;
/// - `s.unpack(plan, buckets, tensors, factor, reports, timeout)`: once every bucket finished,
///   writes every tensor back (cast, times `factor`, non-finite count) and appends a report for each
///   tensor with non-finite values; when it returns the results are where the caller sees them;
/// - `s.drain(built, timeout)`, noexcept: after the buckets' requests ended, waits for the space's
///   own work still queued (bounded by `timeout`), before the engine or the space is destroyed.
template <class S, class X>
concept bucket_space =
    transport_policy<X> &&
    requires(S& s, communicator<X>& comm, std::chrono::milliseconds timeout, std::size_t n, gsync::detail::function_ref<void()> place,
             const registered_tensor& t, const tensor_place& pl, bucket_state& bs, const bucket_plan& plan,
             const std::vector<bucket_state>& buckets, const std::vector<registered_tensor>& tensors, float factor,
             std::vector<nonfinite_report>& reports, float* f32, bfloat16* b16, half* f16, std::uint64_t* bytes, bool flag) {
      { S::style } -> std::convertible_to<synchronizer_style>;
      s.allocate(timeout, n, n, place);
      { s.zeroed(n) } -> std::same_as<std::byte*>;
      { s.buffer(n) } -> std::same_as<std::byte*>;
      s.pack(t, pl, bs);
      { s.launch(comm, n, f32, n, flag, bytes) } -> std::same_as<request>;
      { s.launch(comm, n, b16, n, flag, bytes) } -> std::same_as<request>;
      { s.launch(comm, n, f16, n, flag, bytes) } -> std::same_as<request>;
      s.unpack(plan, buckets, tensors, factor, reports, timeout);
      { s.drain(flag, timeout) } noexcept;
    };

}  // namespace gsync::grad::detail
