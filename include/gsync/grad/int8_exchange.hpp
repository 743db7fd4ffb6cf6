#pragma once
/// \file
/// The int8 compressed allreduce (`compress::int8`, grad/compression.hpp): its wire layout, the
/// block encoder and decoders, and the two-phase exchange, scheduled so that the quantization
/// work runs while the records travel.
///
/// How chunks move (N ranks, n floats, this rank r, indices mod N). The buffer is cut into N
/// chunks (core/chunking.hpp `split`); rank j owns chunk j. A chunk travels as one record
/// (`int8_wire_layout`: the block scales, then the int8 values).
///   Phase 1, to the owners. For k = 1 .. N-1, rank r quantizes chunk r+k (with error feedback:
///     e = g + residual, the residual keeps e - D(q)) into its record and queues it for rank r+k
///     at once, so each record is on the wire while the next one is computed; between blocks the
///     schedule pushes queued sends forward (`send_progress_transport`). Then it quantizes its
///     own chunk r, dequantizes that record into the float32 accumulator, and receives the
///     records of chunk r from ranks r-1, r-2, ..., r-(N-1) in that order, adding each one into
///     the accumulator piece by piece as its bytes arrive (no copy of the record).
///   Phase 2, from the owners. Rank r divides the accumulator by N (average), adds its owner
///     residual (error feedback) and quantizes it into one record, which it queues for ranks
///     r+1, ..., r+N-1; it dequantizes that record into chunk r of the buffer, then receives the
///     records of ranks r-1, r-2, ... and dequantizes each into its chunk as it arrives.
/// Every rank decodes the same N reduced records, so every rank ends with the same bits, and the
/// order of each sum is fixed (own contribution, then r-1, r-2, ...), so a run repeats bit for bit.
/// Bytes per rank: N-1 records in each phase, 2(N-1) records ~ 2(N-1)/N * (n + 4n/block) bytes,
/// a quarter of a float32 ring's. Computation not hidden behind transfers: the first record's
/// quantization and the owner's re-quantization, about 2/N of the elements' work.
///
/// All messages belong to one numbered operation (tag `detail::tag_compressed_allreduce`, the
/// fingerprint of float32 x n with sum or avg and algorithm "int8"), so ranks that disagree on
/// the size, the operator or the block size get `errc::mismatch`, and every wait ends at the
/// communicator's deadline.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "gsync/communicator.hpp"
#include "gsync/core/chunking.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/fingerprint.hpp"
#include "gsync/dispatch/collective.hpp"
#include "gsync/grad/compression.hpp"
#include "gsync/grad/quantize.hpp"

namespace gsync::grad {

/// Wire layout of the int8 policy for one call: chunk j of the buffer is `split(n, world, j)`;
/// every chunk travels as one record of `record` bytes: `blocks` float32 scales (unused ones
/// zero) followed by `chunk_max` int8 values (the chunk's, then zeros), padded with zeros to a
/// multiple of 4 bytes.
struct int8_wire_layout {
  std::size_t n;          ///< buffer elements
  std::size_t world;      ///< ranks (= chunks)
  std::size_t block;      ///< elements per scale
  std::size_t chunk_max;  ///< ceil(n / world): the longest chunk
  std::size_t blocks;     ///< scales per record: ceil(chunk_max / block)
  std::size_t record;     ///< bytes per record

  /// Layout of `n` elements over `world` ranks with `block` elements per scale (all >= 1 but n).
  constexpr int8_wire_layout(std::size_t n_, int world_, std::size_t block_) noexcept
      : n(n_), world(static_cast<std::size_t>(world_)), block(block_), chunk_max(ceil_div(n_, world)),
        blocks(ceil_div(chunk_max, block)), record(4 * blocks + ceil_div(chunk_max, 4) * 4) {}
  /// Chunk `j` of the buffer.
  constexpr range chunk(std::size_t j) const noexcept { return split(n, world, j); }
  /// Payload bytes one rank sends per call: N-1 records to the owners, N-1 copies of its own sum.
  constexpr std::size_t bytes_per_rank() const noexcept { return 2 * (world - 1) * record; }
};

namespace detail {

/// A callable that does nothing (no transport progress to make).
struct no_tick {
  void operator()() const noexcept {}
};

/// Blocks quantized between two calls of an encoder's `tick` (about 32 Ki elements).
inline std::size_t int8_tick_blocks(std::size_t block) noexcept { return std::max<std::size_t>(1, (std::size_t{1} << 15) / block); }

/// Encodes `count` floats into the record `rec` (layout `L`), block by block: for the block at
/// element `off` of length `len`, `values(off, len)` returns where its values are (it may compute
/// them there first, e.g. e = g + r into the residual buffer, while the block is in cache). With
/// `residual`, that memory is an error-feedback buffer and receives e - D(q). `tick()` is called
/// every `int8_tick_blocks` blocks.
/// \tparam Values a callable `float*(std::size_t off, std::size_t len)`. \tparam Tick `void()`.
template <class Values, class Tick = no_tick>
void int8_encode(std::size_t count, const int8_wire_layout& L, rounding mode, counter_rng rng, std::uint64_t first,
                 bool residual, std::uint8_t* rec, Values&& values, Tick&& tick = {}) {
  auto* q = reinterpret_cast<std::int8_t*>(rec + 4 * L.blocks);
  const std::size_t every = int8_tick_blocks(L.block);
  std::size_t b = 0;
  for (std::size_t off = 0; off < count; off += L.block) {
    const std::size_t len = std::min(L.block, count - off);
    float* x = values(off, len);
    const block_scale s = scale_of(x, len);
    quantize_block(x, len, s, q + off, mode, rng, first + off);
    if (residual) update_residual(x, q + off, len, s);
    std::memcpy(rec + 4 * b, &s.scale, 4);
    if (++b % every == 0) tick();
  }
  std::memset(rec + 4 * b, 0, 4 * (L.blocks - b));             // unused scales
  std::memset(q + count, 0, L.record - 4 * L.blocks - count);  // padding values
}

/// Dequantizes the `count` values of record `rec` into `out`.
/// \tparam add true: out += values; false: out = values.
template <bool add>
void int8_decode(const std::uint8_t* rec, std::size_t count, const int8_wire_layout& L, float* out) {
  const auto* q = reinterpret_cast<const std::int8_t*>(rec + 4 * L.blocks);
  std::size_t b = 0;
  for (std::size_t off = 0; off < count; off += L.block, ++b) {
    const std::size_t len = std::min(L.block, count - off);
    float scale;
    std::memcpy(&scale, rec + 4 * b, 4);
    if constexpr (add) dequantize_add_block(q + off, len, scale, out + off);
    else dequantize_block(q + off, len, scale, out + off);
  }
}

/// Dequantizes one incoming record as its bytes arrive, in order, in pieces of any size: the
/// scales are kept in `scales` (L.blocks floats), every value is written (or added) to `out` as
/// soon as its byte is there; padding is skipped.
struct int8_record_decoder {
  const int8_wire_layout& L;  ///< the call's layout
  std::size_t count;          ///< values of this chunk
  float* out;                 ///< the chunk's floats
  float* scales;              ///< room for L.blocks scales
  std::size_t pos = 0;        ///< record bytes consumed so far

  /// Consumes the next `piece` of the record. \tparam add true: out += values; false: out = values.
  template <bool add>
  void consume(std::span<const std::byte> piece) noexcept {
    const std::byte* p = piece.data();
    std::size_t len = piece.size();
    const std::size_t scale_bytes = 4 * L.blocks;
    if (pos < scale_bytes) {
      const std::size_t k = std::min(len, scale_bytes - pos);
      std::memcpy(reinterpret_cast<std::byte*>(scales) + pos, p, k);
      pos += k;
      p += k;
      len -= k;
    }
    if (len == 0) return;
    const std::size_t first = pos - scale_bytes;  // index of the piece's first value
    const std::size_t end = std::min(count, first + len);
    const auto* q = reinterpret_cast<const std::int8_t*>(p);
    for (std::size_t at = first; at < end;) {
      const std::size_t b = at / L.block;
      const std::size_t stop = std::min(end, (b + 1) * L.block);
      if constexpr (add) dequantize_add_block(q + (at - first), stop - at, scales[b], out + at);
      else dequantize_block(q + (at - first), stop - at, scales[b], out + at);
      at = stop;
    }
    pos += len;
  }
};

/// The fingerprint of an int8 compressed allreduce of `n` floats.
inline fingerprint int8_fingerprint(std::size_t n, bool average) noexcept {
  fingerprint f = make_fingerprint<float>(n, op_code(average ? "avg" : "sum"));
  f.algo = algo_code("int8");
  return f;
}

/// Phase 2's encoding on the owner: `acc` (the owned chunk `own`, summed) divided by the world size
/// when averaging, plus the owner residual with error feedback, quantized into record `out`.
/// \tparam Tick `void()`.
template <class Tick>
void int8_owner_encode(const int8_wire_layout& L, range own, float* acc, const compress::int8& p, compress::int8::state& st,
                       std::uint64_t step, int rank, bool average, std::uint8_t* out, Tick&& tick) {
  const bool ef = p.error_feedback;
  if (ef) st.server_residual.resize(own.count, 0.0f);
  const float fn = static_cast<float>(L.world);
  const counter_rng server = counter_rng::make(p.seed, rank, step, 1);
  int8_encode(own.count, L, p.round, server, own.offset, ef, out,
              [&](std::size_t off, std::size_t len) {
                float* a = acc + off;
                if (average)
                  for (std::size_t i = 0; i < len; ++i) a[i] = a[i] / fn;
                if (!ef) return a;
                float* e = st.server_residual.data() + off;
                for (std::size_t i = 0; i < len; ++i) e[i] += a[i];
                return e;
              },
              tick);
}

/// Runs the exchange (numbered `tk`) of `n` floats at `g` on `comm` (see the file comment).
/// \tparam X the transport.
template <transport_policy X>
void int8_exchange_run(communicator<X>& comm, op_ticket tk, float* g, std::size_t n, const compress::int8& p,
                       compress::int8::state& st, bool average) {
  const int N = comm.size(), r = comm.rank();
  const auto uN = static_cast<std::size_t>(N), ur = static_cast<std::size_t>(r);
  const message_id id{gsync::detail::tag_compressed_allreduce, tk.seq, int8_fingerprint(n, average)};
  gsync::detail::op_scope scope(comm, "compressed_allreduce", tk, id);
  X& x = comm.transport();
  const deadline dl = comm.make_deadline();
  auto tick = [&x] {
    if constexpr (send_progress_transport<X>) x.progress_sends();
    else (void)x;
  };
  const int8_wire_layout L(n, N, p.block);
  const bool ef = p.error_feedback;
  st.send.resize(uN * L.record);
  st.scales.resize(L.blocks);
  if (ef) st.residual.resize(n, 0.0f);
  auto rec = [&](std::size_t j) { return st.send.data() + j * L.record; };
  auto to = [&](int k) { return (r + k) % N; };
  auto from = [&](int k) { return (r - k + N) % N; };

  // Phase 1: every chunk, quantized, to its owner; the owner sums them.
  const counter_rng worker = counter_rng::make(p.seed, r, st.step, 0);
  auto encode_worker = [&](std::size_t j) {
    const range ch = L.chunk(j);
    float* gp = g + ch.offset;
    float* rp = ef ? st.residual.data() + ch.offset : nullptr;
    int8_encode(ch.count, L, p.round, worker, ch.offset, ef, rec(j),
                [&](std::size_t off, std::size_t len) {
                  if (rp == nullptr) return gp + off;  // read only
                  float* e = rp + off;
                  for (std::size_t i = 0; i < len; ++i) e[i] += gp[off + i];
                  return e;
                },
                tick);
  };
  for (int k = 1; k < N; ++k) {
    const int j = to(k);
    encode_worker(static_cast<std::size_t>(j));
    x.post_send(j, id, reinterpret_cast<const std::byte*>(rec(static_cast<std::size_t>(j))), L.record);
  }
  encode_worker(ur);
  const range own = L.chunk(ur);
  st.acc.resize(own.count);
  float* acc = st.acc.data();
  int8_decode<false>(rec(ur), own.count, L, acc);
  for (int k = 1; k < N; ++k) {
    int8_record_decoder d{L, own.count, acc, st.scales.data()};
    x.recv_stream(from(k), id, L.record, 4, [&d](std::span<const std::byte> piece) { d.consume<true>(piece); }, dl);
  }

  // Phase 2: the owner's re-quantized sum to every rank.
  std::uint8_t* mine = rec(ur);  // never sent in phase 1
  int8_owner_encode(L, own, acc, p, st, st.step, r, average, mine, tick);
  for (int k = 1; k < N; ++k) x.post_send(to(k), id, reinterpret_cast<const std::byte*>(mine), L.record);
  int8_decode<false>(mine, own.count, L, g + own.offset);
  for (int k = 1; k < N; ++k) {
    const int j = from(k);
    const range ch = L.chunk(static_cast<std::size_t>(j));
    int8_record_decoder d{L, ch.count, g + ch.offset, st.scales.data()};
    x.recv_stream(j, id, L.record, 4, [&d](std::span<const std::byte> piece) { d.consume<false>(piece); }, dl);
  }
  x.flush_sends(dl);
}

/// The exchange (numbered `tk`) of records already encoded elsewhere (on a GPU: the device
/// synchronizer's int8 reducer, grad/device_reducers.hpp): `sent` holds this rank's N records
/// (record j = its chunk j, quantized with the worker stream of `step`), `reduced` receives the N
/// reduced records (record j = owner j's re-quantized sum), to be decoded by the caller. Phase 1
/// and the owner's work are `int8_exchange_run`'s; phase 2 receives each record whole.
/// \tparam X the transport.
template <transport_policy X>
void int8_records_run(communicator<X>& comm, op_ticket tk, const std::uint8_t* sent, std::uint8_t* reduced, std::size_t n,
                      const compress::int8& p, compress::int8::state& st, std::uint64_t step, bool average) {
  const int N = comm.size(), r = comm.rank();
  const auto ur = static_cast<std::size_t>(r);
  const message_id id{gsync::detail::tag_compressed_allreduce, tk.seq, int8_fingerprint(n, average)};
  gsync::detail::op_scope scope(comm, "compressed_allreduce", tk, id);
  X& x = comm.transport();
  const deadline dl = comm.make_deadline();
  auto tick = [&x] {
    if constexpr (send_progress_transport<X>) x.progress_sends();
    else (void)x;
  };
  const int8_wire_layout L(n, N, p.block);
  st.scales.resize(L.blocks);
  auto to = [&](int k) { return (r + k) % N; };
  auto from = [&](int k) { return (r - k + N) % N; };
  auto bytes = [&](const std::uint8_t* base, int j) { return reinterpret_cast<const std::byte*>(base + static_cast<std::size_t>(j) * L.record); };

  for (int k = 1; k < N; ++k) x.post_send(to(k), id, bytes(sent, to(k)), L.record);
  const range own = L.chunk(ur);
  st.acc.resize(own.count);
  float* acc = st.acc.data();
  int8_decode<false>(sent + ur * L.record, own.count, L, acc);
  for (int k = 1; k < N; ++k) {
    int8_record_decoder d{L, own.count, acc, st.scales.data()};
    x.recv_stream(from(k), id, L.record, 4, [&d](std::span<const std::byte> piece) { d.consume<true>(piece); }, dl);
  }
  std::uint8_t* mine = reduced + ur * L.record;
  int8_owner_encode(L, own, acc, p, st, step, r, average, mine, tick);
  for (int k = 1; k < N; ++k) x.post_send(to(k), id, bytes(reduced, r), L.record);
  for (int k = 1; k < N; ++k) {
    const int j = from(k);
    x.recv(j, id, reinterpret_cast<std::byte*>(reduced + static_cast<std::size_t>(j) * L.record), L.record, dl);
  }
  x.flush_sends(dl);
}

}  // namespace detail

/// The int8 compressed allreduce of `g` over `comm` (policy `p`, state `st`, see the file
/// comment): numbered as one operation, run inline or behind the communicator's pending
/// asynchronous work. Returns the payload bytes this rank sent.
/// \tparam X the transport.
template <transport_policy X>
std::size_t int8_exchange(communicator<X>& comm, std::span<float> g, const compress::int8& p, compress::int8::state& st,
                          bool average) {
  const std::size_t n = g.size();
  if (n == 0) return 0;
  const int8_wire_layout L(n, comm.size(), p.block);
  float* gp = g.data();
  gsync::detail::launch(comm, "compressed_allreduce",
                        [=, &p, &st](communicator<X>& c, op_ticket tk) { detail::int8_exchange_run(c, tk, gp, n, p, st, average); });
  return L.bytes_per_rank();
}

}  // namespace gsync::grad
