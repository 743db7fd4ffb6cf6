#pragma once
/// \file
/// `gsync::grad::synchronizer`: data-parallel gradient synchronization with bucketing and overlap, in
/// the manner of PyTorch DDP's reducer, for host-memory gradients of type float32, bfloat16 or float16.
///
/// \code
///   gsync::grad::synchronizer sync(comm, {.bucket_bytes = 25 << 20});
///   for (auto& p : params) sync.add(std::span<float>{p.grad}, p.name);   // in forward order
///   for (step...) {
///     forward();
///     for (layer from last to first) { backward(layer); sync.mark_ready(layer.grad_index); }
///     auto r = sync.finish();            // waits, unpacks; gradients now averaged over the ranks
///     if (r.apply) optimizer_step();
///   }
/// \endcode
///
/// How data moves in one step:
/// 1. Registration (`add`, `add_view`) records tensors; the first use plans buckets (bucket_plan.hpp:
///    reverse registration order, one element type per bucket, a small first bucket) and allocates them.
///    All ranks must register the same tensors in the same order; a fingerprint of the plan is checked
///    across the ranks once (one small allreduce) and a difference is `errc::mismatch`.
/// 2. Backward calls `mark_ready(i)` as each gradient is final. The tensor is packed into its bucket at
///    once (copied, or cast to the wire type; gradients registered with `add_view` already live in the
///    bucket). When the last tensor of a bucket is marked, the bucket's collective is issued on the
///    communicator's progress engine (`allreduce_async`, avg) and runs while backward continues. Buckets
///    are issued strictly in plan order, so all ranks issue identical sequences even if they mark
///    tensors in different orders.
/// 3. `finish()` marks any tensor not yet marked (its current contents are synchronized), waits for
///    every bucket, and unpacks in one fused pass per tensor: cast back from the wire type, multiply by
///    1/accumulation_steps and 1/loss_scale, and count non-finite values (nonfinite.hpp explains why the
///    verdict is the same on every rank without another collective). The average over ranks is done by
///    `op::avg` inside the last reduction step of the allreduce, not by a separate pass.
///
/// Modes and policies:
/// - Copy mode (`add(span, name)`): gradients live in the caller's tensors and are packed/unpacked.
///   Zero-copy mode (`add_view<T>(count, name)`, PyTorch's gradient_as_bucket_view): the synchronizer
///   owns the gradient memory inside the buckets and hands out views (`view<T>(i)`, valid once
///   `build()` ran); nothing is packed and, with a native wire type, the allreduce runs in place on the
///   gradients. Both kinds can be mixed in one synchronizer.
/// - Wire type (`wire_dtype`): buckets may travel as bfloat16 or float16 (cast on pack, cast back on
///   unpack; the library combines 16-bit types in float inside each reduction step), halving the bytes.
/// - Gradient accumulation: with `accumulation_steps = k`, steps 1..k-1 of every k only record marks
///   (no communication; the caller keeps accumulating into its gradients), the k-th synchronizes and
///   divides by k in the unpack pass. `will_sync()` says which kind the current step is.
/// - Loss scaling (`loss_scaling`): finish() unscales in the unpack pass and feeds the non-finite verdict
///   to a `loss_scaler`, which skips the step and backs off on an overflow on any rank.
/// - The bucket reducer (template parameter `Reducer`) is the seam where compression plugs in: it gets
///   each bucket as a span of wire elements and returns a `gsync::request`. The default,
///   `allreduce_reducer`, runs a plain allreduce on the progress engine (as a job that also counts the
///   bytes the transport is handed). A compression policy is wrapped as a reducer
///   whose `start()` queues the compressed exchange as one compound job with `gsync::submit` and
///   stores the bytes it sent (see `bucket_reducer`).
///
/// Threading: one caller thread drives a synchronizer (as for its communicator). Bucket buffers are
/// touched by the progress engine only between their launch and finish(); the caller never touches a
/// launched bucket, and must not modify a marked tensor (or view) until finish() returns.
/// The communicator must outlive the synchronizer and must not be moved while it exists.
///
/// The synchronizer, by concern (this header includes them all):
///   grad/synchronizer_options.hpp  its settings: `wire_dtype`, `synchronizer_options`
///   grad/bucket_reducer.hpp        the reducer seam: `bucket_job`, `bucket_reducer`, `allreduce_reducer`,
///                                  `allreduce_bytes_sent`
///   grad/bucket_synchronizer.hpp   the `synchronizer` class: the engine over host buckets
///   grad/bucket_engine.hpp         the logic it shares with `device_synchronizer`, and `step_result`
///   grad/bucket_space.hpp          what the engine asks of where buckets live (`bucket_space`)
///   grad/host_space.hpp            host buckets: aligned memory, the element passes, the reducer

#include "gsync/grad/bucket_reducer.hpp"
#include "gsync/grad/bucket_synchronizer.hpp"
#include "gsync/grad/synchronizer_options.hpp"
