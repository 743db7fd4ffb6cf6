#pragma once
/// \file
/// The pieces of a gradient synchronizer's state that do not depend on where buckets live
/// (grad/bucket_engine.hpp runs them for the host and the device synchronizer): the registered
/// tensor, a bucket's state, the wire type of a bucket, the check that every rank registered the
/// same tensors and settings, the per-step marks, and waiting for the buckets' collectives.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/stats.hpp"
#include "gsync/grad/synchronizer_options.hpp"

namespace gsync::grad::detail {

/// A registered gradient: where it lives (the caller's memory, or a view inside its bucket).
struct registered_tensor {
  tensor_ref ref;     ///< memory, count, element type
  std::string name;   ///< the name given at registration
  bool is_view = false;  ///< lives inside its bucket (add_view)
};

/// One bucket of a step. Its memory belongs to the bucket space (grad/bucket_space.hpp), which
/// frees it when it is destroyed; host and device pointers alike.
struct bucket_state {
  dtype grad_type = dtype::float32;
  dtype wire_type = dtype::float32;
  std::byte* storage = nullptr;  ///< gradient-typed bucket (views, or the communicated buffer when no cast)
  std::byte* wire = nullptr;     ///< wire-typed bucket when the wire type differs
  std::size_t pending = 0;       ///< tensors of this bucket not yet marked in this step
  bool launched = false;         ///< issued in this step
  request req;                   ///< its reduction, once launched
  std::uint64_t bytes_sent = 0;  ///< reported by the reducer; read after `req` finished
  /// The buffer the reducer reduces in place.
  std::byte* comm_buffer() const noexcept { return wire ? wire : storage; }
};

/// Tensor `i` of `tensors`, or errc::invalid_argument naming `who`::`what` and the range.
template <class V>
auto& registered(V& tensors, std::size_t i, const char* who, const char* what) {
  if (i >= tensors.size())
    throw error(errc::invalid_argument, std::string(who) + "::" + what + ": tensor index " + std::to_string(i) + " out of range (" +
                                            std::to_string(tensors.size()) + " registered)");
  return tensors[i];
}

/// The element type in which a bucket of gradients of type `g` travels.
constexpr dtype wire_type_for(wire_dtype w, dtype g) noexcept {
  switch (w) {
    case wire_dtype::native: return g;
    case wire_dtype::float32: return dtype::float32;
    case wire_dtype::bfloat16: return dtype::bfloat16;
    case wire_dtype::float16: return dtype::float16;
  }
  return g;
}

/// The bucket plan of `tensors` under `opt`.
inline bucket_plan plan_for(const std::vector<registered_tensor>& tensors, const synchronizer_options& opt) {
  std::vector<tensor_spec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) specs.push_back(t.ref.spec());
  return bucket_plan::make(specs, plan_options{opt.bucket_bytes, opt.first_bucket_bytes});
}

/// Checks that every rank of `comm` registered the same tensors (counts, types, views) with the
/// same settings that shape the collectives: a 64-bit fingerprint compared with one allreduce(max)
/// of {h, ~h} (both maxima equal this rank's values only when every rank has the same h).
/// errc::mismatch naming `who` otherwise. Collective.
template <class X>
void check_same_registration(communicator<X>& comm, const std::vector<registered_tensor>& tensors, const synchronizer_options& opt,
                             const char* who) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](std::uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0x100000001b3ull;
  };
  mix(tensors.size());
  for (const auto& t : tensors) mix(t.ref.count), mix(static_cast<std::uint64_t>(t.ref.type)), mix(t.is_view);
  mix(opt.bucket_bytes), mix(opt.first_bucket_bytes), mix(static_cast<std::uint64_t>(opt.wire)), mix(opt.accumulation_steps),
      mix(opt.average);
  std::uint64_t v[2] = {h, ~h};
  allreduce(comm, std::span<std::uint64_t>{v, 2}, op::max{});
  if (v[0] != h || v[1] != ~h)
    throw error(errc::mismatch, std::string(who) + ": ranks registered different gradient tensors or settings (rank " +
                                    std::to_string(comm.rank()) + " has " + std::to_string(tensors.size()) +
                                    " tensors; every rank must add the same sizes and types in the same order with the "
                                    "same bucket, wire and accumulation settings)");
}

/// Starts a step's marks: no tensor ready, every bucket waiting for all of its tensors.
inline void reset_marks(std::vector<bool>& ready, std::size_t tensors, std::vector<bucket_state>& buckets, const bucket_plan& plan) {
  ready.assign(tensors, false);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    buckets[b].pending = plan.bucket(b).tensors.size();
    buckets[b].launched = false;
  }
}

/// Waits for every launched bucket's request, adding the times and bytes to `st`; on a failure
/// still waits for the others (so none references the buckets any more), then rethrows the first
/// error.
inline void wait_buckets(std::vector<bucket_state>& buckets, const bucket_plan& plan, step_stats& st) {
  using clock = std::chrono::steady_clock;
  std::exception_ptr first;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    bucket_state& bs = buckets[b];
    if (!bs.launched) continue;
    const auto t0 = clock::now();
    try {
      bs.req.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    st.exposed_time += clock::now() - t0;
    if (!first && bs.req.valid()) {
      st.comm_time += bs.req.finished_at() - bs.req.started_at();
      st.bytes_on_wire += bs.bytes_sent;
      st.payload_bytes += static_cast<std::uint64_t>(plan.bucket(b).count * size_of(bs.wire_type));
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace gsync::grad::detail
