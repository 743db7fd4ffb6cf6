#pragma once
/// \file
/// Bucket planning for gradient synchronization: pure arithmetic that decides which gradient tensor
/// goes into which fused bucket, at which element offset. No memory, no communication; tested alone
/// (tests/test_grad.cpp, "bucket_plan" cases).
///
/// How tensors are laid out:
/// - Tensors are visited in *reverse* registration order. Models register parameters from the input
///   to the output, and backward produces gradients from the output to the input, so the tensors
///   visited first are the ones whose gradients are ready first.
/// - A bucket holds tensors of one element type (a fused buffer is reduced as one array). Each element
///   type has one *open* bucket; a visited tensor is appended to the open bucket of its type while the
///   bucket stays within its byte cap. A tensor that would push the bucket past the cap closes it and
///   starts a new one. A tensor larger than the cap on its own gets a bucket to itself (tensors are
///   never split: a bucket is complete exactly when all its tensors are).
/// - The first bucket of each element type has a smaller cap (`first_bucket_bytes`, 1 MiB by default,
///   as PyTorch DDP does), so that the first allreduce can start early in backward; later buckets use
///   `bucket_bytes` (25 MiB by default).
/// - Buckets are numbered in the order they were opened, i.e. by the position of their first tensor in
///   the reverse registration order. The synchronizer launches buckets strictly in this order (a bucket
///   that becomes complete early waits for its predecessors), so every rank issues the same sequence
///   of collectives whatever order its tensors became ready in.
/// - Empty tensors (zero elements) are not placed in any bucket (`bucket == no_bucket`): there is
///   nothing to reduce, and a zero-element bucket would still cost a collective.
/// - Tensors are packed back to back (offsets in elements, no padding), so the wire carries exactly
///   the gradient bytes.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "gsync/core/dtype.hpp"
#include "gsync/core/error.hpp"

namespace gsync::grad {

/// A gradient tensor as the planner sees it: an element count and an element type.
struct tensor_spec {
  std::size_t count = 0;         ///< number of elements (0 allowed)
  dtype type = dtype::float32;   ///< element type
};

/// A gradient tensor in host memory, type-erased: what clipping and norm functions take, and what a
/// synchronizer hands out for its registered tensors. Elements are float32, bfloat16 or float16.
struct tensor_ref {
  void* data = nullptr;          ///< first element (may be null when count == 0)
  std::size_t count = 0;         ///< number of elements
  dtype type = dtype::float32;   ///< element type
  /// The planner's view of this tensor.
  tensor_spec spec() const noexcept { return {count, type}; }
};

/// A `tensor_ref` to the elements of `s`.
/// \tparam T float, gsync::bfloat16 or gsync::half.
template <class T>
tensor_ref make_ref(std::span<T> s) noexcept {
  return {static_cast<void*>(s.data()), s.size(), dtype_of<T>};
}

/// Caps that shape a bucket plan.
struct plan_options {
  std::size_t bucket_bytes = std::size_t{25} << 20;       ///< cap of every bucket but the first of a type
  std::size_t first_bucket_bytes = std::size_t{1} << 20;  ///< cap of the first bucket of each element type
};

/// Marks a tensor that belongs to no bucket (it has no elements).
inline constexpr std::size_t no_bucket = std::numeric_limits<std::size_t>::max();

/// Where one tensor lives in the plan.
struct tensor_place {
  std::size_t bucket = no_bucket;  ///< bucket index, or `no_bucket` for an empty tensor
  std::size_t offset = 0;          ///< first element inside the bucket
  std::size_t count = 0;           ///< number of elements
};

/// One fused bucket: a contiguous array of `count` elements of type `type`, made of `tensors`
/// (registration indices, in the order they are packed, i.e. reverse registration order).
struct bucket_layout {
  dtype type = dtype::float32;          ///< element type of every tensor in the bucket
  std::size_t count = 0;                ///< elements in the bucket
  std::vector<std::size_t> tensors;     ///< registration indices, in packing order
  /// Size of the bucket in bytes (in its own element type).
  std::size_t bytes() const noexcept { return count * size_of(type); }
};

/// The result of planning: one `tensor_place` per registered tensor and the list of buckets.
class bucket_plan {
 public:
  bucket_plan() = default;

  /// Plans the buckets for `tensors` (in registration order) with the caps in `opt`.
  /// Throws errc::invalid_argument when a cap is zero.
  static bucket_plan make(std::span<const tensor_spec> tensors, const plan_options& opt = {}) {
    if (opt.bucket_bytes == 0 || opt.first_bucket_bytes == 0)
      throw error(errc::invalid_argument, "bucket_plan: bucket_bytes and first_bucket_bytes must be at least 1 byte (got " +
                                              std::to_string(opt.bucket_bytes) + " and " +
                                              std::to_string(opt.first_bucket_bytes) + ")");
    bucket_plan p;
    p.places_.resize(tensors.size());
    // Open bucket per element type (index into buckets_), and whether that type has closed a bucket yet.
    constexpr std::size_t n_types = 12;
    std::size_t open[n_types];
    bool had_first[n_types] = {};
    for (auto& o : open) o = no_bucket;
    for (std::size_t k = tensors.size(); k-- > 0;) {
      const tensor_spec& t = tensors[k];
      if (t.count == 0) {
        p.places_[k] = {no_bucket, 0, 0};
        continue;
      }
      const auto ti = static_cast<std::size_t>(t.type);
      const std::size_t esize = size_of(t.type);
      const std::size_t bytes = t.count * esize;
      std::size_t b = open[ti];
      if (b != no_bucket) {
        const std::size_t cap = p.first_of_type_[b] ? opt.first_bucket_bytes : opt.bucket_bytes;
        if (p.buckets_[b].bytes() + bytes > cap) b = no_bucket;  // does not fit: close the open bucket
      }
      if (b == no_bucket) {
        b = p.buckets_.size();
        p.buckets_.push_back({t.type, 0, {}});
        p.first_of_type_.push_back(!had_first[ti]);
        had_first[ti] = true;
        open[ti] = b;
      }
      bucket_layout& bl = p.buckets_[b];
      p.places_[k] = {b, bl.count, t.count};
      bl.count += t.count;
      bl.tensors.push_back(k);  // an oversized tensor leaves its bucket past the cap: the next one closes it
    }
    return p;
  }

  /// Number of tensors planned.
  std::size_t tensor_count() const noexcept { return places_.size(); }
  /// Number of buckets.
  std::size_t bucket_count() const noexcept { return buckets_.size(); }
  /// Place of tensor `i` (registration index).
  const tensor_place& place(std::size_t i) const { return places_.at(i); }
  /// Bucket `b`.
  const bucket_layout& bucket(std::size_t b) const { return buckets_.at(b); }
  /// All buckets, in launch order.
  std::span<const bucket_layout> buckets() const noexcept { return buckets_; }
  /// True when bucket `b` was planned with the first-bucket cap.
  bool is_first_of_type(std::size_t b) const { return first_of_type_.at(b); }
  /// Total bytes over all buckets (each in its own element type).
  std::size_t total_bytes() const noexcept {
    std::size_t s = 0;
    for (const auto& b : buckets_) s += b.bytes();
    return s;
  }

 private:
  std::vector<tensor_place> places_;
  std::vector<bucket_layout> buckets_;
  std::vector<bool> first_of_type_;
};

}  // namespace gsync::grad
