#pragma once
/// \file
/// `grad::detail::bucket_engine<X, S>`: the gradient synchronizer written once, over a bucket space
/// S (grad/bucket_space.hpp) that says where buckets live and how one moves. The engine holds
/// registration, the bucket build and the cross-rank plan check, the per-step marks, buckets issued
/// in plan order as their last tensor is marked, finish() (wait, unpack, loss scaler, statistics,
/// non-finite verdict) and the drain before teardown; and `step_result`, what finish() returns.
/// `synchronizer` (grad/bucket_synchronizer.hpp) and `device_synchronizer`
/// (grad/device_synchronizer.hpp) are this engine with the public names of each.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gsync/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/bucket_space.hpp"
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

namespace detail {

/// The synchronizer's logic over bucket space S (see the file comment). Its members are protected:
/// each public class names those it offers (`using`), so the two keep their own public surfaces, and
/// derives publicly so that pointers to those members still apply to it. \tparam X transport. \tparam S the space.
template <transport_policy X, class S>
  requires bucket_space<S, X>
class bucket_engine {
 protected:
  using clock = std::chrono::steady_clock;  ///< clock of all timings

  /// An engine over `comm` with settings `opt`, its space made of `space` (before the settings
  /// are checked: a space without its runtime fails first). errc::invalid_argument for unusable settings.
  template <class... A>
  bucket_engine(communicator<X>& comm, synchronizer_options opt, A&&... space)
      : comm_(comm), opt_(std::move(opt)), space_(std::forward<A>(space)...), step_start_(clock::now()) {
    const std::string who = S::style.who;
    if (opt_.accumulation_steps == 0) throw error(errc::invalid_argument, who + ": accumulation_steps must be at least 1");
    if (opt_.bucket_bytes == 0 || opt_.first_bucket_bytes == 0)
      throw error(errc::invalid_argument, who + ": bucket_bytes and first_bucket_bytes must be at least 1");
    if (opt_.loss_scaling) {
      if (opt_.on_nonfinite != nonfinite_action::report)
        throw error(errc::invalid_argument, who + ": loss scaling needs on_nonfinite = nonfinite_action::report" +
                                                (S::style.detailed_errors ? " (an overflow must skip the step and back off the scale, not throw)" : ""));
      scaler_.emplace(*opt_.loss_scaling);
    }
  }
  bucket_engine(const bucket_engine&) = delete;
  bucket_engine& operator=(const bucket_engine&) = delete;

  /// Waits (bounded by the communicator's timeout) for collectives still in flight, so the engine
  /// never writes into freed buckets; errors are swallowed here (finish() reports them). The space
  /// is destroyed after this. Protected: an engine is destroyed as the synchronizer it is part of.
  ~bucket_engine() {
    drain();
    report();
  }

  /// Plans and allocates the buckets and checks that every rank registered the same tensors.
  /// Collective (one small allreduce): every rank calls it, or the first mark_ready/finish does.
  /// View gradients are zero-initialized.
  void build() {
    if (built_) return;
    plan_ = plan_for(tensors_, opt_);
    check_same_registration(comm_, tensors_, opt_, S::style.who);
    buckets_.resize(plan_.bucket_count());
    space_.allocate(comm_.timeout(), tensors_.size(), buckets_.size(), [&] {
      for (std::size_t b = 0; b < buckets_.size(); ++b) place_bucket(b);
    });
    built_ = true;
    begin_marks();
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
    registered_tensor& t = entry(i, "mark_ready");
    if (ready_[i])
      throw error(errc::invalid_argument, std::string(S::style.who) + "::mark_ready: tensor '" + t.name +
                                              (S::style.detailed_errors ? "' (" + std::to_string(i) + ") was already marked ready in this step"
                                                                        : "' was already marked"));
    ready_[i] = true;
    if (!will_sync()) return;
    const tensor_place& pl = plan_.place(i);
    if (pl.bucket == no_bucket) return;
    bucket_state& bs = buckets_[pl.bucket];
    space_.pack(t, pl, bs);
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
      space_.unpack(plan_, buckets_, tensors_, factor, res.nonfinite, comm_.timeout());
      res.stats.unpack_time = clock::now() - t_unpacked0;
      res.stats.synced = true;
      res.stats.buckets = buckets_.size();
      const bool bad = !res.nonfinite.empty();
      res.apply = scaler_ ? scaler_->update(bad) : !bad;
    }
    ++micro_;
    const auto now = clock::now();
    res.stats.step_time = now - step_start_;
    if constexpr (S::style.trace_steps) trace_step(res, now);
    step_start_ = now;
    totals_.add(res.stats);
    begin_marks();
    if (!res.nonfinite.empty() && opt_.on_nonfinite == nonfinite_action::throw_error)
      throw error(errc::non_finite, std::string(S::style.who) + "::finish: " + describe(res.nonfinite));
    return res;
  }

  /// Registers tensor `ref` (a view inside its bucket when `view`; `what` names the call in errors).
  std::size_t add_tensor(tensor_ref ref, std::string name, bool view, const char* what) {
    if (built_)
      throw error(errc::invalid_argument, std::string(S::style.who) + "::" + what +
                                              (S::style.detailed_errors ? ": tensors must be registered before the buckets are built (first "
                                                                          "build, view, tensors, mark_ready or finish)"
                                                                        : ": register tensors before the buckets are built"));
    tensors_.push_back({ref, std::move(name), view});
    return tensors_.size() - 1;
  }

  /// The bucket memory of view gradient `i`, checked to hold `type`. Builds if needed (collective).
  tensor_ref view_ref(std::size_t i, dtype type) {
    build();
    const registered_tensor& t = entry(i, "view");
    const std::string at = std::string(S::style.who) + "::view: tensor '" + t.name + "'";
    if (!t.is_view) throw error(errc::invalid_argument, at + (S::style.detailed_errors ? " was registered with add(), not add_view()" : " was registered with add()"));
    if (t.ref.type != type)
      throw error(errc::invalid_argument, at + " holds " + std::string(name(t.ref.type)) +
                                              (S::style.detailed_errors ? ", asked for " + std::string(name(type)) : std::string()));
    return t.ref;
  }

  S& space() noexcept { return space_; }                                              ///< the bucket space
  const S& space() const noexcept { return space_; }                                  ///< the bucket space
  const std::vector<registered_tensor>& registered_tensors() const noexcept { return tensors_; }  ///< registration order
  communicator<X>& comm() const noexcept { return comm_; }                            ///< the communicator

 private:
  const registered_tensor& entry(std::size_t i, const char* what) const { return detail::registered(tensors_, i, S::style.who, what); }
  registered_tensor& entry(std::size_t i, const char* what) { return detail::registered(tensors_, i, S::style.who, what); }
  const bucket_state& bucket_at(std::size_t b) const {
    if (!built_ || b >= buckets_.size())
      throw error(errc::invalid_argument, std::string(S::style.who) + ": bucket " + std::to_string(b) + " does not exist (" +
                                              std::to_string(buckets_.size()) + " buckets)");
    return buckets_[b];
  }
  bucket_state& bucket_at(std::size_t b) { return const_cast<bucket_state&>(std::as_const(*this).bucket_at(b)); }

  // Bucket b's types and memory from the space; views point into it.
  void place_bucket(std::size_t b) {
    const bucket_layout& bl = plan_.bucket(b);
    bucket_state& bs = buckets_[b];
    bs.grad_type = bl.type;
    bs.wire_type = wire_type_for(opt_.wire, bl.type);
    bool has_view = false;
    for (std::size_t i : bl.tensors) has_view = has_view || tensors_[i].is_view;
    if (bs.wire_type == bs.grad_type || has_view) bs.storage = space_.zeroed(bl.bytes());
    if (bs.wire_type != bs.grad_type) bs.wire = space_.buffer(bl.count * size_of(bs.wire_type));
    for (std::size_t i : bl.tensors)
      if (tensors_[i].is_view) tensors_[i].ref.data = bs.storage + plan_.place(i).offset * size_of(bl.type);
  }

  // Resets per-step marks and pending counts.
  void begin_marks() {
    reset_marks(ready_, tensors_.size(), buckets_, plan_);
    next_launch_ = 0;
  }

  // Issues, in plan order, every bucket whose tensors are all marked and whose predecessors are issued.
  void launch_ready() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      const std::size_t b = next_launch_++;
      bucket_state& bs = buckets_[b];
      bs.bytes_sent = 0;
      visit_grad_type(bs.wire_type, [&](auto w) {
        using W = decltype(w);
        bs.req = space_.launch(comm_, b, reinterpret_cast<W*>(bs.comm_buffer()), plan_.bucket(b).count, opt_.average, &bs.bytes_sent);
      });
      bs.launched = true;
    }
  }

  // Waits for every launched bucket (wait_buckets); on a failure the marks restart.
  void wait_all(step_stats& st) {
    try {
      wait_buckets(buckets_, plan_, st);
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
    space_.drain(built_, comm_.timeout());
  }

  // One span per (micro-)step on the GSYNC_TRACE timeline.
  void trace_step(const step_result& res, clock::time_point now) {
    if (trace_writer* w = comm_.trace()) {
      try {
        w->complete(res.synced ? "step" : "micro-step", "gsync.grad", step_start_, now,
                    "{\"step\":" + std::to_string(micro_) + ",\"synced\":" + (res.synced ? "true" : "false") +
                        ",\"wire_bytes\":" + std::to_string(res.stats.bytes_on_wire) + "}");
      } catch (...) {
      }
    }
  }

  // At GSYNC_DEBUG=INFO, the run's two efficiency figures, once, as the synchronizer goes.
  void report() const noexcept {
    try {
      if (totals_.synced_steps() == 0 || !comm_.log().enabled(log_level::info)) return;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "%s: %llu steps, mean %.3f ms; communication exposed %.1f%% of step time (%.1f%% of its %.3f s hidden "
                    "behind computation); speedup over one worker %.2f of %d (weak scaling, from the exposed share)",
                    std::string(S::style.who).c_str(), static_cast<unsigned long long>(totals_.steps()), totals_.mean_step_ms(),
                    100.0 * totals_.comm_ratio(), 100.0 * totals_.overlap(), totals_.comm_time().count(), totals_.speedup(comm_.size()),
                    comm_.size());
      comm_.log().info(buf);
    } catch (...) {
      // a report never turns a teardown into an error
    }
  }

  communicator<X>& comm_;
  synchronizer_options opt_;
  S space_;  // made before the settings are checked, destroyed after the drain
  std::optional<loss_scaler> scaler_;
  std::vector<registered_tensor> tensors_;
  bucket_plan plan_;
  std::vector<bucket_state> buckets_;
  std::vector<bool> ready_;
  std::size_t next_launch_ = 0;
  std::uint64_t micro_ = 0;
  bool built_ = false;
  clock::time_point step_start_;
  running_stats totals_;
};

}  // namespace detail
}  // namespace gsync::grad
