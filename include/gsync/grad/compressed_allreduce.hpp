#pragma once
/// \file
/// `gsync::grad::compressed_allreduce`: sums (or averages) a float32 gradient buffer over all
/// ranks through a compression policy (compression.hpp), and returns the payload bytes this rank
/// sent on the wire.
///
/// \code
///   gsync::grad::compress::int8 pol;                       // block 256, nearest, error feedback
///   auto st = pol.make_state(grad.size());                 // once per buffer
///   std::size_t sent = gsync::grad::compressed_allreduce(comm, std::span<float>{grad}, pol, st, true);
/// \endcode
///
/// Contract: every rank passes a buffer of the same size and the same policy parameters; on
/// return every rank holds the bitwise identical result = sum (or average) over ranks of the
/// decompressed contributions. Only the synchronous collectives of include/gsync/ (allreduce,
/// allgather) and, for int8, the four calls every transport has (grad/int8_exchange.hpp) are
/// used, so every transport works. The state is updated (residuals, step counter); after an
/// error the communicator is unusable and the state should be discarded.
/// The byte count excludes frame headers and is exact for this rank (tests/test_compression.cpp
/// checks it against a transport that counts what it is handed).
///
/// How data moves, per policy (N ranks, n floats, r this rank):
///   none       ring allreduce of the float32 buffer (gsync::allreduce<algo::ring>). The ring sends
///              every chunk except chunk r+1 in the reduce-scatter and every chunk except chunk
///              r+2 in the allgather: 4 * (2n - |chunk r+1| - |chunk r+2|) bytes, ~ 2(N-1)/N * 4n.
///   fp16/bf16  cast (plus the residual with EF) into the state's 16-bit buffer, ring allreduce
///              (sum) in that type (the library combines half/bf16 in float within each step and
///              rounds once per step), cast back, dividing by N in float32 to average: half of
///              none's bytes.
///   int8       two phases (grad/int8_exchange.hpp). The buffer is cut into N chunks
///              (core/chunking.hpp `split`); chunk j is owned by rank j. (1) Every rank quantizes
///              each chunk blockwise into a wire record (one float32 scale per block, int8
///              values) and sends it to the chunk's owner as soon as it is encoded, so the
///              records travel while the next ones are computed; the owner dequantizes the N
///              records of its chunk and adds them in float32 (own first, then ranks r-1, r-2,
///              ...) as their bytes arrive, and divides by N to average. (2) The owner quantizes
///              that sum again (with its own "server" residual under EF) and sends the record to
///              every rank, which dequantizes the N reduced records into the buffer as they
///              arrive. All records of one call have the same size (`int8_wire_layout`: chunks
///              padded to ceil(n/N) elements and ceil(ceil(n/N)/block) scales; padding is zero
///              and never read back). Bytes: 2(N-1) records ~ 2(N-1)/N * (n + 4n/block), about a
///              quarter of none's.
///   topk       each rank selects k = max(1, ceil(ratio*n)) entries of e = g (+ residual with
///              EF) (grad/topk.hpp) and writes k (uint32 index, float32 value bits) pairs into
///              its block of an N x 2k uint32 array; an in-place allgather (ring) gives every rank
///              all pairs; each rank zeroes the buffer and adds the pairs in rank order, then
///              divides by N to average. With EF the residual keeps e except at the sent indices
///              (non-finite residual entries are reset to zero). Bytes: (N-1) * 8k.
///
/// Non-finite input: none, fp16 and bf16 carry NaN/Inf through the allreduce (fp16 also turns
/// magnitudes above 65504 into Inf). int8 gives a block with a NaN or Inf a NaN scale, so every
/// rank gets NaN in that whole block (grad/quantize.hpp). topk selects NaN/Inf entries before any
/// finite one, so the result holds a non-finite value. Residuals never keep a NaN or an Inf.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "gsync/algo/ring.hpp"
#include "gsync/allgather.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/chunking.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/half.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/grad/compression.hpp"
#include "gsync/grad/int8_exchange.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/quantize.hpp"
#include "gsync/grad/topk.hpp"

namespace gsync::grad {

/// Payload bytes rank `rank` sends in a ring allreduce (algo/ring.hpp) of `n` elements of
/// `elem_bytes` bytes over `world` ranks: every chunk but r+1 (reduce-scatter) and every chunk
/// but r+2 (allgather).
[[nodiscard]] constexpr std::size_t ring_allreduce_bytes(std::size_t n, int world, int rank, std::size_t elem_bytes) noexcept {
  if (world <= 1 || n == 0) return 0;
  const auto w = static_cast<std::size_t>(world);
  const std::size_t a = split(n, w, static_cast<std::size_t>(wrap(rank + 1, world))).count;
  const std::size_t b = split(n, w, static_cast<std::size_t>(wrap(rank + 2, world))).count;
  return elem_bytes * (2 * n - a - b);
}

namespace detail {

/// `d` if finite, else 0 (no branch).
inline float finite_or_zero(float d) noexcept { return (d - d) == 0.0f ? d : 0.0f; }

/// Shared checks of every policy's schedule.
inline void check_state(std::string_view policy, std::size_t state_count, std::size_t grad_count) {
  if (state_count != grad_count)
    throw error(errc::invalid_argument, "compressed_allreduce(" + std::string(policy) + "): the state was made for " +
                                            std::to_string(state_count) + " elements but the buffer has " +
                                            std::to_string(grad_count) + " (use one state per buffer)");
}

/// fp16 / bf16 schedule. \tparam T the 16-bit wire type. \tparam X the transport.
template <class T, transport_policy X>
std::size_t run_float16(communicator<X>& comm, std::span<float> g, bool ef, compress::float16_state<T>& st, bool average) {
  const std::size_t n = g.size();
  st.wire.resize(n);
  T* w = st.wire.data();
  const float* gp = g.data();
  if (ef) {
    // Blocks: corrected values, narrowed and widened again in bulk (F16C for half, AVX2 for
    // bfloat16, where available); the same bits as element by element.
    st.residual.resize(n, 0.0f);
    float* r = st.residual.data();
    constexpr std::size_t B = 256;
    alignas(32) float e[B], back[B];
    for (std::size_t i = 0; i < n; i += B) {
      const std::size_t m = std::min(B, n - i);
      for (std::size_t k = 0; k < m; ++k) e[k] = gp[i + k] + r[i + k];
      gsync::grad::cast_into(e, w + i, m);
      gsync::grad::cast_into(w + i, back, m);
      for (std::size_t k = 0; k < m; ++k) r[i + k] = finite_or_zero(e[k] - back[k]);
    }
  } else {
    gsync::grad::cast_into(gp, w, n);
  }
  gsync::allreduce<algo::ring>(comm, std::span<T>{w, n}, op::sum{});
  float* out = g.data();
  gsync::grad::cast_into(static_cast<const T*>(w), out, n);
  if (average) {  // divided in float32 after casting back (cheaper than op::avg's 16-bit finalize)
    const float fn = static_cast<float>(comm.size());
    for (std::size_t i = 0; i < n; ++i) out[i] /= fn;
  }
  return ring_allreduce_bytes(n, comm.size(), comm.rank(), sizeof(T));
}

}  // namespace detail

namespace compress {

/// Schedule of `compress::none`: exact float32 ring allreduce. \tparam X the transport.
template <transport_policy X>
std::size_t run_compressed(communicator<X>& comm, std::span<float> g, const none&, none::state& st, bool average) {
  detail::check_state(none::name, st.count(), g.size());
  if (average) gsync::allreduce<algo::ring>(comm, g, op::avg{});
  else gsync::allreduce<algo::ring>(comm, g, op::sum{});
  return ring_allreduce_bytes(g.size(), comm.size(), comm.rank(), sizeof(float));
}

/// Schedule of `compress::fp16`. \tparam X the transport.
template <transport_policy X>
std::size_t run_compressed(communicator<X>& comm, std::span<float> g, const fp16& p, fp16::state& st, bool average) {
  detail::check_state(fp16::name, st.count(), g.size());
  return detail::run_float16<gsync::half>(comm, g, p.error_feedback, st, average);
}

/// Schedule of `compress::bf16`. \tparam X the transport.
template <transport_policy X>
std::size_t run_compressed(communicator<X>& comm, std::span<float> g, const bf16& p, bf16::state& st, bool average) {
  detail::check_state(bf16::name, st.count(), g.size());
  return detail::run_float16<gsync::bfloat16>(comm, g, p.error_feedback, st, average);
}

/// Schedule of `compress::int8` (two phases: quantized chunks to their owners, re-quantized sums
/// from the owners; grad/int8_exchange.hpp).
/// \tparam X the transport.
template <transport_policy X>
std::size_t run_compressed(communicator<X>& comm, std::span<float> g, const int8& p, int8::state& st, bool average) {
  detail::check_state(int8::name, st.count(), g.size());
  p.validate();
  const std::size_t n = g.size();
  const int N = comm.size();
  if (st.world == 0) st.world = N;
  if (st.world != N)
    throw error(errc::invalid_argument, "compressed_allreduce(int8): the state was first used with " + std::to_string(st.world) +
                                            " ranks, now with " + std::to_string(N) + " (use one state per communicator)");
  if (n == 0) return 0;
  const std::size_t sent = int8_exchange(comm, g, p, st, average);
  ++st.step;
  return sent;
}

/// Schedule of `compress::topk` (allgather of (index, value) pairs, local scatter-add).
/// \tparam X the transport.
template <transport_policy X>
std::size_t run_compressed(communicator<X>& comm, std::span<float> g, const topk& p, topk::state& st, bool average) {
  detail::check_state(topk::name, st.count(), g.size());
  const std::size_t n = g.size();
  p.validate(n);
  if (n == 0) return 0;
  const std::size_t k = topk_count(n, p.ratio);
  const auto uN = static_cast<std::size_t>(comm.size()), ur = static_cast<std::size_t>(comm.rank());
  float* e = g.data();
  if (p.error_feedback) {
    st.residual.resize(n, 0.0f);
    e = st.residual.data();
    const float* gp = g.data();
    for (std::size_t i = 0; i < n; ++i) e[i] += gp[i];
  }
  st.index.resize(k);
  select_topk(std::span<const float>{e, n}, k, st.keys, st.cand, st.index.data());
  st.pairs.resize(uN * 2 * k);
  std::uint32_t* mine = st.pairs.data() + ur * 2 * k;
  for (std::size_t t = 0; t < k; ++t) {
    const std::uint32_t i = st.index[t];
    mine[2 * t] = i;
    mine[2 * t + 1] = std::bit_cast<std::uint32_t>(e[i]);
  }
  if (p.error_feedback) {
    for (std::size_t t = 0; t < k; ++t) e[st.index[t]] = 0.0f;  // sent: nothing left
    for (std::size_t i = 0; i < n; ++i) e[i] = detail::finite_or_zero(e[i]);
  }
  gsync::allgather(comm, std::span<const std::uint32_t>{mine, 2 * k}, std::span<std::uint32_t>{st.pairs});
  float* out = g.data();
  std::fill(out, out + n, 0.0f);
  const std::uint32_t* all = st.pairs.data();
  for (std::size_t t = 0; t < uN * k; ++t) {
    const std::uint32_t i = all[2 * t];
    if (i >= n)
      throw error(errc::mismatch, "compressed_allreduce(topk): rank " + std::to_string(t / k) + " sent index " + std::to_string(i) +
                                      " for a buffer of " + std::to_string(n) + " elements (do all ranks pass the same size?)");
    out[i] += std::bit_cast<float>(all[2 * t + 1]);
  }
  if (average) {
    const float fn = static_cast<float>(uN);
    for (std::size_t i = 0; i < n; ++i) out[i] = out[i] / fn;
  }
  return (uN - 1) * 2 * k * sizeof(std::uint32_t);
}

}  // namespace compress

/// Sums (`average` false) or averages (`average` true) the float32 buffer `grad` over all ranks
/// through compression policy `policy`, in place; every rank ends with the bitwise identical
/// result. `st` is this buffer's state (`policy.make_state(grad.size())`), updated by the call.
/// Returns the payload bytes this rank sent (frame headers excluded).
/// Throws `errc::invalid_argument` for a state made for another size (or, int8, another world
/// size) or unusable policy parameters, and whatever the collectives throw (timeout, peer_lost,
/// mismatch when ranks disagree on the size).
/// \tparam X the communicator's transport. \tparam P a compression policy with a `run_compressed`
/// overload (built-in: compress::none, fp16, bf16, int8, topk).
template <transport_policy X, compression_policy P>
  requires requires(communicator<X>& c, std::span<float> g, const P& p, typename P::state& s, bool a) {
    { run_compressed(c, g, p, s, a) } -> std::same_as<std::size_t>;
  }
std::size_t compressed_allreduce(communicator<X>& comm, std::span<float> grad, const P& policy, typename P::state& st,
                                 bool average = true) {
  return run_compressed(comm, grad, policy, st, average);
}

}  // namespace gsync::grad
