#pragma once
/// \file
/// `gsync::grad::synchronizer`, the class: tensor registration, bucket build and plan check, packing
/// on mark_ready, buckets issued in plan order through the reducer, waiting and the fused unpack in
/// finish(); and `step_result`, what finish() returns. How one step moves data, the modes and the
/// threading rules: the file comment of grad/synchronizer.hpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/detail/aligned_buffer.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_reducer.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/loss_scaler.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/stats.hpp"
#include "gsync/grad/synchronizer_common.hpp"
#include "gsync/grad/synchronizer_options.hpp"

namespace gsync::grad {

/// What finish() returns.
struct step_result {
  bool synced = false;  ///< false on accumulation steps that did not communicate
  /// True when the optimizer step should be applied: the step synchronized and its gradients are
  /// finite (with a loss scaler: the scaler agreed). The same on every rank.
  bool apply = false;
  std::vector<nonfinite_report> nonfinite;  ///< tensors with non-finite synchronized values (same on all ranks)
  step_stats stats;                         ///< this step's statistics
};

/// Gradient synchronizer (see the file comment of grad/synchronizer.hpp).
/// \tparam X transport of the communicator.
/// \tparam Reducer bucket reducer (`bucket_reducer`), `allreduce_reducer` by default; the compression seam.
template <transport_policy X, class Reducer = allreduce_reducer>
  requires bucket_reducer<Reducer, X>
class synchronizer {
 public:
  using clock = std::chrono::steady_clock;  ///< clock of all timings

  /// A synchronizer over `comm` (which must outlive it and stay in place) with settings `opt`.
  /// Throws errc::invalid_argument for unusable settings.
  explicit synchronizer(communicator<X>& comm, synchronizer_options opt = {}, Reducer reducer = {})
      : comm_(comm), opt_(std::move(opt)), reducer_(std::move(reducer)), step_start_(clock::now()) {
    if (opt_.accumulation_steps == 0) throw error(errc::invalid_argument, "synchronizer: accumulation_steps must be at least 1");
    if (opt_.bucket_bytes == 0 || opt_.first_bucket_bytes == 0)
      throw error(errc::invalid_argument, "synchronizer: bucket_bytes and first_bucket_bytes must be at least 1");
    if (opt_.loss_scaling) {
      if (opt_.on_nonfinite != nonfinite_action::report)
        throw error(errc::invalid_argument,
                    "synchronizer: loss scaling needs on_nonfinite = nonfinite_action::report (an overflow must skip "
                    "the step and back off the scale, not throw)");
      scaler_.emplace(*opt_.loss_scaling);
    }
  }

  synchronizer(const synchronizer&) = delete;
  synchronizer& operator=(const synchronizer&) = delete;

  /// Waits (bounded by the communicator's timeout) for collectives still in flight, so the engine
  /// never writes into freed buckets. Errors are swallowed here; finish() is where they are reported.
  ~synchronizer() { drain(); }

  /// Registers a gradient living in the caller's memory (copy mode); returns its registration index.
  /// Call in forward (parameter) order, identically on every rank, before the first mark_ready/build.
  /// The memory must stay valid while the synchronizer may use it (until the last finish()).
  /// \tparam T float, gsync::bfloat16 or gsync::half.
  template <class T>
  std::size_t add(std::span<T> grad, std::string name) {
    static_assert(is_grad_element_v<T>, "synchronizer::add: gradients must be float, gsync::bfloat16 or gsync::half");
    check_not_built("add");
    tensors_.push_back({make_ref(grad), std::move(name), false});
    return tensors_.size() - 1;
  }

  /// Registers a gradient of `count` elements living inside its bucket (zero-copy mode); returns its
  /// registration index. Its memory is available through `view<T>(index)` after `build()`.
  /// \tparam T float, gsync::bfloat16 or gsync::half.
  template <class T>
  std::size_t add_view(std::size_t count, std::string name) {
    static_assert(is_grad_element_v<T>, "synchronizer::add_view: gradients must be float, gsync::bfloat16 or gsync::half");
    check_not_built("add_view");
    tensors_.push_back({tensor_ref{nullptr, count, dtype_of<T>}, std::move(name), true});
    return tensors_.size() - 1;
  }

  /// Plans and allocates the buckets and checks that every rank registered the same tensors.
  /// Collective (one small allreduce): every rank calls it, or the first mark_ready/finish does.
  /// View gradients are zero-initialized.
  void build() {
    if (built_) return;
    plan_ = detail::plan_for(tensors_, opt_);
    detail::check_same_registration(comm_, tensors_, opt_, "synchronizer");
    buckets_.resize(plan_.bucket_count());
    for (std::size_t b = 0; b < plan_.bucket_count(); ++b) {
      const bucket_layout& bl = plan_.bucket(b);
      bucket_state& bs = buckets_[b];
      bs.grad_type = bl.type;
      bs.wire_type = detail::wire_type_for(opt_.wire, bl.type);
      bool has_view = false;
      for (std::size_t i : bl.tensors) has_view = has_view || tensors_[i].is_view;
      if (bs.wire_type == bs.grad_type || has_view) {
        bs.storage = gsync::detail::make_aligned_bytes(std::max<std::size_t>(1, bl.bytes()));
        std::memset(bs.storage.get(), 0, bl.bytes());
      }
      if (bs.wire_type != bs.grad_type) bs.wire = gsync::detail::make_aligned_bytes(std::max<std::size_t>(1, bl.count * size_of(bs.wire_type)));
      for (std::size_t i : bl.tensors)
        if (tensors_[i].is_view) tensors_[i].ref.data = bs.storage.get() + plan_.place(i).offset * size_of(bl.type);
    }
    built_ = true;
    begin_marks();
  }

  /// The bucket memory of view gradient `i` (registered with `add_view<T>`). Builds if needed
  /// (collective). \tparam T the element type it was registered with.
  template <class T>
  std::span<T> view(std::size_t i) {
    build();
    const tensor_entry& t = entry(i, "view");
    if (!t.is_view) throw error(errc::invalid_argument, "synchronizer::view: tensor '" + t.name + "' was registered with add(), not add_view()");
    if (t.ref.type != dtype_of<T>)
      throw error(errc::invalid_argument, "synchronizer::view: tensor '" + t.name + "' holds " + std::string(name(t.ref.type)) +
                                              ", asked for " + std::string(name(dtype_of<T>)));
    return {static_cast<T*>(t.ref.data), t.ref.count};
  }

  /// Where every registered gradient lives now (caller memory or bucket views), in registration order:
  /// hand this to `clip_grad_norm` after finish(). Builds if needed (collective).
  std::vector<tensor_ref> tensors() {
    build();
    std::vector<tensor_ref> v;
    v.reserve(tensors_.size());
    for (const auto& t : tensors_) v.push_back(t.ref);
    return v;
  }

  /// Name of tensor `i`.
  const std::string& tensor_name(std::size_t i) const { return entry(i, "tensor_name").name; }
  /// Number of registered tensors.
  std::size_t tensor_count() const noexcept { return tensors_.size(); }
  /// The bucket plan (valid after build()).
  const bucket_plan& plan() const noexcept { return plan_; }
  /// True when the current step will communicate (the k-th of every accumulation_steps steps).
  bool will_sync() const noexcept { return (micro_ + 1) % opt_.accumulation_steps == 0; }
  /// The factor to multiply the loss by before backward (1 without loss scaling).
  float loss_scale() const noexcept { return scaler_ ? scaler_->scale() : 1.0f; }
  /// The loss scaler, or null without loss scaling.
  const loss_scaler* scaler() const noexcept { return scaler_ ? &*scaler_ : nullptr; }
  /// Totals over all finished steps.
  const running_stats& totals() const noexcept { return totals_; }
  /// The settings.
  const synchronizer_options& options() const noexcept { return opt_; }

  /// True once bucket `b` of the current step has been issued to the progress engine.
  bool bucket_launched(std::size_t b) const { return bucket_at(b).launched; }
  /// True once bucket `b` of the current step has been issued and its collective has finished
  /// (non-blocking; throws the collective's error if it failed).
  bool bucket_finished(std::size_t b) {
    bucket_state& bs = bucket_at(b);
    return bs.launched && bs.req.test();
  }

  /// Marks the start of a step for the step-time statistic (by default a step starts when the previous
  /// finish() returned, or at construction).
  void begin_step() { step_start_ = clock::now(); }

  /// Declares gradient `i` final for this step. Packs it into its bucket and, if it completes the bucket
  /// (and every earlier bucket has been issued), issues the bucket's collective. After this call the
  /// tensor must not change until finish() returns. Marking a tensor twice in a step is an error.
  void mark_ready(std::size_t i) {
    build();
    tensor_entry& t = entry(i, "mark_ready");
    if (ready_[i]) throw error(errc::invalid_argument, "synchronizer::mark_ready: tensor '" + t.name + "' (" + std::to_string(i) +
                                                          ") was already marked ready in this step");
    ready_[i] = true;
    if (!will_sync()) return;
    const tensor_place& pl = plan_.place(i);
    if (pl.bucket == no_bucket) return;
    bucket_state& bs = buckets_[pl.bucket];
    pack(t, pl, bs);
    if (--bs.pending == 0) launch_ready();
  }

  /// Ends the step: marks the tensors not marked yet (their current contents are synchronized), waits
  /// for every bucket, unpacks (cast back, 1/accumulation and 1/loss-scale factors, non-finite check),
  /// updates the loss scaler, and returns the verdict and statistics. On an accumulation step that does
  /// not synchronize it only closes the step. Throws the collectives' errors (after every in-flight
  /// collective has stopped using the buckets), and errc::non_finite on non-finite gradients when
  /// on_nonfinite is throw_error (on every rank alike; the communicator stays usable).
  step_result finish() {
    build();
    step_result res;
    res.synced = will_sync();
    if (res.synced) {
      for (std::size_t i = tensors_.size(); i-- > 0;)
        if (!ready_[i]) mark_ready(i);
      launch_ready();
      wait_all(res.stats);
      const auto t_unpacked0 = clock::now();
      const float factor = (opt_.average_accumulation ? 1.0f / static_cast<float>(opt_.accumulation_steps) : 1.0f) *
                           (scaler_ ? scaler_->inv_scale() : 1.0f);
      for (std::size_t b = 0; b < buckets_.size(); ++b) unpack_bucket(b, factor, res.nonfinite);
      res.stats.unpack_time = clock::now() - t_unpacked0;
      res.stats.synced = true;
      res.stats.buckets = buckets_.size();
      const bool bad = !res.nonfinite.empty();
      if (scaler_) res.apply = scaler_->update(bad);
      else res.apply = !bad;
    }
    ++micro_;
    const auto now = clock::now();
    res.stats.step_time = now - step_start_;
    if (trace_writer* w = comm_.trace()) {  // one span per (micro-)step on the GSYNC_TRACE timeline
      try {
        w->complete(res.synced ? "step" : "micro-step", "gsync.grad", step_start_, now,
                    "{\"step\":" + std::to_string(micro_) + ",\"synced\":" + (res.synced ? "true" : "false") +
                        ",\"wire_bytes\":" + std::to_string(res.stats.bytes_on_wire) + "}");
      } catch (...) {
      }
    }
    step_start_ = now;
    totals_.add(res.stats);
    begin_marks();
    if (!res.nonfinite.empty() && opt_.on_nonfinite == nonfinite_action::throw_error)
      throw error(errc::non_finite, "synchronizer::finish: " + describe(res.nonfinite));
    return res;
  }

 private:
  using tensor_entry = detail::registered_tensor;
  struct bucket_state {
    dtype grad_type = dtype::float32;
    dtype wire_type = dtype::float32;
    gsync::detail::aligned_bytes storage;  // gradient-typed bucket (views, or the wire buffer when no cast)
    gsync::detail::aligned_bytes wire;     // wire-typed bucket when the wire type differs
    std::size_t pending = 0;               // tensors of this bucket not yet marked in this step
    bool launched = false;
    request req;
    std::uint64_t bytes_sent = 0;
    std::byte* comm_buffer() const noexcept { return wire ? wire.get() : storage.get(); }
  };

  const tensor_entry& entry(std::size_t i, const char* what) const { return detail::registered(tensors_, i, "synchronizer", what); }
  tensor_entry& entry(std::size_t i, const char* what) { return detail::registered(tensors_, i, "synchronizer", what); }
  const bucket_state& bucket_at(std::size_t b) const {
    if (!built_ || b >= buckets_.size())
      throw error(errc::invalid_argument, "synchronizer: bucket " + std::to_string(b) + " does not exist (" +
                                              std::to_string(buckets_.size()) + " buckets)");
    return buckets_[b];
  }
  bucket_state& bucket_at(std::size_t b) { return const_cast<bucket_state&>(std::as_const(*this).bucket_at(b)); }

  void check_not_built(const char* what) const {
    if (built_)
      throw error(errc::invalid_argument, std::string("synchronizer::") + what +
                                              ": tensors must be registered before the buckets are built (first build, view, "
                                              "tensors, mark_ready or finish)");
  }

  // Resets per-step marks and pending counts.
  void begin_marks() {
    detail::reset_marks(ready_, tensors_.size(), buckets_, plan_);
    for (auto& b : buckets_) b.bytes_sent = 0;
    next_launch_ = 0;
  }

  template <class F>
  static void visit2(dtype a, dtype b, F&& f) {
    detail::visit_grad_type(a, [&](auto ta) { detail::visit_grad_type(b, [&](auto tb) { f(ta, tb); }); });
  }

  void pack(const tensor_entry& t, const tensor_place& pl, bucket_state& bs) {
    const bool cast = bs.wire_type != bs.grad_type;
    if (!t.is_view && !cast) {
      std::memcpy(bs.storage.get() + pl.offset * size_of(bs.grad_type), t.ref.data, pl.count * size_of(bs.grad_type));
    } else if (cast) {
      visit2(bs.grad_type, bs.wire_type, [&](auto g, auto w) {
        using G = decltype(g);
        using W = decltype(w);
        cast_into(static_cast<const G*>(t.ref.data), reinterpret_cast<W*>(bs.wire.get()) + pl.offset, pl.count);
      });
    }  // a view with no cast already sits in the communicated buffer
  }

  void launch_ready() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      const std::size_t b = next_launch_++;
      bucket_state& bs = buckets_[b];
      detail::visit_grad_type(bs.wire_type, [&](auto w) {
        using W = decltype(w);
        bucket_job<W> job{b, std::span<W>{reinterpret_cast<W*>(bs.comm_buffer()), plan_.bucket(b).count}, opt_.average,
                          &bs.bytes_sent};
        bs.req = reducer_.start(comm_, job);
      });
      bs.launched = true;
    }
  }

  // Waits for every launched bucket (detail::wait_buckets); on a failure the marks restart.
  void wait_all(step_stats& st) {
    try {
      detail::wait_buckets(buckets_, plan_, st, [&](std::size_t b) { return buckets_[b].bytes_sent; });
    } catch (...) {
      begin_marks();
      throw;
    }
  }

  void drain() noexcept {
    for (auto& bs : buckets_) {
      if (!bs.launched || !bs.req.valid()) continue;
      try {
        bs.req.wait();
      } catch (...) {
      }
    }
  }

  void unpack_bucket(std::size_t b, float factor, std::vector<nonfinite_report>& reports) {
    bucket_state& bs = buckets_[b];
    visit2(bs.wire_type, bs.grad_type, [&](auto w, auto g) {
      using W = decltype(w);
      using G = decltype(g);
      const W* src = reinterpret_cast<const W*>(bs.comm_buffer());
      for (std::size_t i : plan_.bucket(b).tensors) {
        const tensor_place& pl = plan_.place(i);
        G* dst = static_cast<G*>(tensors_[i].ref.data);
        const std::size_t bad = unpack_scan(src + pl.offset, dst, pl.count, factor);
        if (bad != 0) {
          const std::size_t first = first_nonfinite(dst, pl.count);
          reports.push_back({b, i, tensors_[i].name, bad, first, static_cast<float>(dst[first])});
        }
      }
    });
  }

  communicator<X>& comm_;
  synchronizer_options opt_;
  Reducer reducer_;
  std::optional<loss_scaler> scaler_;
  std::vector<tensor_entry> tensors_;
  bucket_plan plan_;
  std::vector<bucket_state> buckets_;
  std::vector<bool> ready_;
  std::size_t next_launch_ = 0;
  std::uint64_t micro_ = 0;
  bool built_ = false;
  clock::time_point step_start_;
  running_stats totals_;
};

}  // namespace gsync::grad
