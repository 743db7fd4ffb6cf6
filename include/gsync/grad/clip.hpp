#pragma once
/// \file
/// Clipping gradients by their global L2 norm, in two forms.
///
/// - Replicated (data parallel): after synchronization every rank holds the same gradients, bitwise
///   (gsync's allreduce combines in one order on every rank). The norm is then computed locally, in
///   double precision and in a fixed order (tensor by tensor, element by element), so every rank gets
///   the same norm and the same clip factor without communicating: `clip_grad_norm(tensors, max_norm)`.
/// - Sharded (tensor parallel, ZeRO): each rank holds a disjoint shard of the gradients. Each rank sums
///   the squares of its shard in double, one allreduce(sum) of that single double gives the global sum of
///   squares on every rank (identical everywhere), and each rank scales its own shard:
///   `clip_grad_norm_sharded(comm, shard, max_norm)`. A tensor replicated on several ranks must be
///   passed by exactly one of them, or it is counted several times.
///
/// Both return the norm *before* clipping. When the norm is Inf or NaN the gradients are left untouched
/// (scaling by 0 or NaN would destroy them; a caller with a loss scaler skips such a step anyway) and the
/// non-finite norm is returned for the caller to act on.
///
/// Clip factor: max_norm / (norm + 1e-6) when norm > max_norm, else nothing is changed.

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "gsync/allreduce.hpp"
#include "gsync/core/error.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/nonfinite.hpp"

namespace gsync::grad {

namespace detail {
template <class F>
void visit_grad_type(dtype t, F&& f) {
  switch (t) {
    case dtype::float32: f(float{}); return;
    case dtype::bfloat16: f(bfloat16{}); return;
    case dtype::float16: f(half{}); return;
    default:
      throw error(errc::invalid_argument, "gradient tensors must be float32, bfloat16 or float16, not " +
                                              std::string(name(t)));
  }
}

template <class T>
double sum_squares(const T* p, std::size_t n) noexcept {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(static_cast<float>(p[i]));
    s += v * v;
  }
  return s;
}
}  // namespace detail

/// Sum of the squares of every element of `tensors`, in double precision, in a fixed order.
/// Throws errc::invalid_argument for element types other than float32/bfloat16/float16.
inline double sum_of_squares(std::span<const tensor_ref> tensors) {
  double s = 0.0;
  for (const tensor_ref& t : tensors)
    detail::visit_grad_type(t.type, [&](auto tag) {
      using T = decltype(tag);
      s += detail::sum_squares(static_cast<const T*>(t.data), t.count);
    });
  return s;
}

/// Global L2 norm of replicated `tensors` (local computation; see the file comment).
inline double global_norm(std::span<const tensor_ref> tensors) { return std::sqrt(sum_of_squares(tensors)); }

/// Multiplies every element of `tensors` by `factor` (rounding back to each tensor's element type).
inline void scale_gradients(std::span<const tensor_ref> tensors, float factor) {
  for (const tensor_ref& t : tensors)
    detail::visit_grad_type(t.type, [&](auto tag) {
      using T = decltype(tag);
      T* p = static_cast<T*>(t.data);
      for (std::size_t i = 0; i < t.count; ++i) p[i] = grad::detail::from_f<T>(static_cast<float>(p[i]) * factor);
    });
}

namespace detail {
inline double apply_clip(std::span<const tensor_ref> tensors, double norm, double max_norm) {
  if (std::isfinite(norm) && norm > max_norm) scale_gradients(tensors, static_cast<float>(max_norm / (norm + 1e-6)));
  return norm;
}
inline void check_max_norm(double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(max_norm))
    throw error(errc::invalid_argument, "clip_grad_norm: max_norm must be a finite value > 0, got " + std::to_string(max_norm));
}
}  // namespace detail

/// Clips replicated gradients (identical on every rank) to a global L2 norm of at most `max_norm`.
/// Returns the norm before clipping. No communication.
inline double clip_grad_norm(std::span<const tensor_ref> tensors, double max_norm) {
  detail::check_max_norm(max_norm);
  return detail::apply_clip(tensors, global_norm(tensors), max_norm);
}

/// Global L2 norm of gradients sharded over the ranks of `comm`: one allreduce(sum) of one double.
/// Collective: every rank of `comm` must call it. \tparam X transport of the communicator.
template <transport_policy X>
double sharded_norm(communicator<X>& comm, std::span<const tensor_ref> shard) {
  double s = sum_of_squares(shard);
  allreduce(comm, std::span<double>{&s, 1}, op::sum{});
  return std::sqrt(s);
}

/// Clips gradients sharded over the ranks of `comm` to a global L2 norm of at most `max_norm`; each
/// rank scales its own shard by the same factor. Returns the global norm before clipping. Collective.
/// \tparam X transport of the communicator.
template <transport_policy X>
double clip_grad_norm_sharded(communicator<X>& comm, std::span<const tensor_ref> shard, double max_norm) {
  detail::check_max_norm(max_norm);
  return detail::apply_clip(shard, sharded_norm(comm, shard), max_norm);
}

}  // namespace gsync::grad
