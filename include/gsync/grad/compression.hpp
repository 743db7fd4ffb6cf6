#pragma once
/// \file
/// Gradient compression policies and the `compression_policy` concept.
///
/// A compression policy says how a float32 gradient buffer is encoded for the wire while it is
/// summed over ranks; `gsync::grad::compressed_allreduce` (compressed_allreduce.hpp) runs it.
/// Policies are small value types holding parameters only. Everything that lives across steps
/// (error-feedback residuals, scratch, the step counter of stochastic rounding) is in the
/// policy's `state`, one per tensor or fused bucket, made by `policy.make_state(count)`.
///
///   compress::none   float32 as is (exact ring allreduce)                    4 B/elem
///   compress::fp16   IEEE binary16, rounded to nearest even, optional EF      2 B/elem
///   compress::bf16   bfloat16, rounded to nearest even, optional EF           2 B/elem
///   compress::int8   blockwise int8 (one float scale per `block` elements),   ~1 B/elem
///                    nearest or stochastic rounding, EF on by default
///   compress::topk   the ceil(ratio*n) largest |values| as (uint32 index,     8 B/kept elem
///                    float value) pairs, EF on by default
///
/// Error feedback (EF): the part of a rank's contribution that did not reach the wire, the
/// residual r = e - D(Q(e)) with e = g + r_previous, is kept in the state and added to the next
/// step's gradient, so nothing is lost, only delayed. A state is bound to one buffer size (and,
/// from its first use, to one world size); use a fresh state for another buffer.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gsync/core/error.hpp"
#include "gsync/core/half.hpp"
#include "gsync/grad/quantize.hpp"
#include "gsync/grad/topk.hpp"

namespace gsync::grad {

/// A gradient compression policy `P`:
///   - `P::name`: a short name for logs and benchmarks;
///   - `P::state`: what persists between steps for one buffer (residuals, scratch); movable;
///   - `p.make_state(count)`: a fresh state (zero residuals) for buffers of `count` floats; it
///     throws `errc::invalid_argument` when the policy's parameters are unusable;
///   - `state.count()`: the buffer size the state was made for.
/// How a policy moves data is given by an overload `run_compressed(comm, grad, policy, state,
/// average)`, found by argument-dependent lookup (the built-in ones are in
/// compressed_allreduce.hpp); a user policy supplies its own overload in its namespace.
/// \tparam P the policy type.
template <class P>
concept compression_policy = std::copy_constructible<P> && std::movable<typename P::state> &&
    requires(const P& p, std::size_t n, const typename P::state& s) {
      { P::name } -> std::convertible_to<std::string_view>;
      { p.make_state(n) } -> std::same_as<typename P::state>;
      { s.count() } -> std::same_as<std::size_t>;
    };

namespace compress {

/// No compression: float32 on the wire, summed exactly as `gsync::allreduce` with the ring.
struct none {
  static constexpr std::string_view name = "none";  ///< policy name
  /// Nothing persists; only the size is remembered.
  struct state {
    std::size_t n = 0;  ///< buffer size
    /// Buffer size this state serves.
    std::size_t count() const noexcept { return n; }
  };
  /// A state for buffers of `count` floats.
  state make_state(std::size_t count) const { return state{count}; }
};

/// State of the 16-bit float policies: residuals (with error feedback) and the wire buffer.
/// \tparam T the 16-bit element type on the wire (gsync::half or gsync::bfloat16).
template <class T>
struct float16_state {
  std::size_t n = 0;          ///< buffer size
  std::vector<float> residual;  ///< error-feedback residual per element (empty without EF)
  std::vector<T> wire;          ///< the buffer cast to T, reduced in place
  /// Buffer size this state serves.
  std::size_t count() const noexcept { return n; }
};

/// IEEE binary16 on the wire. Values above 65504 in magnitude, in the input or in a partial sum,
/// become Inf (a non-finite result, as for any overflow); values below 2^-24 become 0 (kept by
/// the residual with error feedback).
struct fp16 {
  static constexpr std::string_view name = "fp16";  ///< policy name
  bool error_feedback = false;  ///< keep the rounding error per element and add it next step
  using state = float16_state<gsync::half>;  ///< residuals and wire buffer
  /// A state for buffers of `count` floats.
  state make_state(std::size_t count) const {
    state s;
    s.n = count;
    if (error_feedback) s.residual.assign(count, 0.0f);
    s.wire.resize(count);
    return s;
  }
};

/// bfloat16 on the wire (float32's range, 8 significant bits).
struct bf16 {
  static constexpr std::string_view name = "bf16";  ///< policy name
  bool error_feedback = false;  ///< keep the rounding error per element and add it next step
  using state = float16_state<gsync::bfloat16>;  ///< residuals and wire buffer
  /// A state for buffers of `count` floats.
  state make_state(std::size_t count) const {
    state s;
    s.n = count;
    if (error_feedback) s.residual.assign(count, 0.0f);
    s.wire.resize(count);
    return s;
  }
};

/// Blockwise int8 with one float32 scale per `block` elements, two-phase exchange (every rank
/// sends chunk j quantized to its owner j, the owner sums the N contributions in float32 and
/// sends its re-quantized sum to every rank; see grad/int8_exchange.hpp). With error feedback both quantizations keep residuals: a rank's
/// own per element ("worker side") and, for the chunk it owns, the owner's ("server side").
struct int8 {
  static constexpr std::string_view name = "int8";  ///< policy name
  std::size_t block = 256;               ///< elements per scale (1 .. 2^24)
  rounding round = rounding::nearest;    ///< nearest or stochastic
  bool error_feedback = true;            ///< keep residuals and add them next step
  std::uint64_t seed = 0;                ///< stochastic rounding: draws depend on (seed, rank, step)

  /// Residuals, scratch and the step counter.
  struct state {
    std::size_t n = 0;                   ///< buffer size
    std::vector<float> residual;         ///< worker-side residual per element (empty without EF)
    std::vector<float> server_residual;  ///< owner-side residual of the owned chunk (sized at first use)
    std::vector<std::uint8_t> send;      ///< N wire records (quantized chunks; the own one re-used for the sum)
    std::vector<float> acc;              ///< the owned chunk, summed in float32
    std::vector<float> scales;           ///< the scales of the record being received
    std::uint64_t step = 0;              ///< calls so far (stochastic rounding stream)
    int world = 0;                       ///< world size of the first call (0: not used yet)
    /// Buffer size this state serves.
    std::size_t count() const noexcept { return n; }
  };
  /// A state for buffers of `count` floats; throws `errc::invalid_argument` for a bad block size.
  state make_state(std::size_t count) const {
    validate();
    state s;
    s.n = count;
    if (error_feedback) s.residual.assign(count, 0.0f);
    return s;
  }
  /// Throws `errc::invalid_argument` unless 1 <= block <= 2^24.
  void validate() const {
    if (block == 0 || block > (std::size_t{1} << 24))
      throw error(errc::invalid_argument, "compress::int8: block size " + std::to_string(block) + " is outside 1..2^24");
  }
};

/// Top-k sparsification: each rank sends its k = max(1, ceil(ratio * n)) largest |values| as
/// (uint32 index, float32 value) pairs; every rank gathers all pairs and adds them up locally.
struct topk {
  static constexpr std::string_view name = "topk";  ///< policy name
  double ratio = 0.01;        ///< fraction of elements sent, in (0, 1]
  bool error_feedback = true; ///< keep the unsent values and add them next step

  /// Residual and scratch.
  struct state {
    std::size_t n = 0;                 ///< buffer size
    std::vector<float> residual;       ///< the values not sent so far (empty without EF)
    std::vector<float> keys;           ///< selection scratch (n floats)
    std::vector<std::uint32_t> cand;   ///< selection scratch (candidate indices)
    std::vector<std::uint32_t> index;  ///< selected indices (k)
    std::vector<std::uint32_t> pairs;  ///< N x k (index, value bits) pairs: this rank's at block r
    /// Buffer size this state serves.
    std::size_t count() const noexcept { return n; }
  };
  /// A state for buffers of `count` floats; throws `errc::invalid_argument` for a ratio outside
  /// (0, 1] or a buffer that 32-bit indices cannot address.
  state make_state(std::size_t count) const {
    validate(count);
    state s;
    s.n = count;
    if (error_feedback) s.residual.assign(count, 0.0f);
    return s;
  }
  /// Throws `errc::invalid_argument` unless the ratio is in (0, 1] and count < 2^32.
  void validate(std::size_t count) const {
    (void)topk_count(1, ratio);  // checks the ratio
    if (count > 0xffffffffull)
      throw error(errc::invalid_argument, "compress::topk: " + std::to_string(count) + " elements do not fit 32-bit indices");
  }
};

}  // namespace compress

static_assert(compression_policy<compress::none>);
static_assert(compression_policy<compress::fp16>);
static_assert(compression_policy<compress::bf16>);
static_assert(compression_policy<compress::int8>);
static_assert(compression_policy<compress::topk>);

}  // namespace gsync::grad
