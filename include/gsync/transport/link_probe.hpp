#pragma once
/// \file
/// Start-up probe of the links between hosts: times the flat ring once, so that automatic
/// algorithm selection (algo/select.hpp) costs the schedules with the network the job really
/// runs on instead of an assumed one (core/links.hpp). The TCP transport runs it at the end of
/// its setup when the ranks span several hosts, unless GSYNC_NET_PROBE=0 or both
/// GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US are given.
///
/// How the bytes move: the ranks form the flat ring in rank order, the ring the ring allreduce
/// uses (its hops between hosts are its slowest). In one pass every rank sends a message to its
/// right neighbour and receives one from its left, `steps` times in a row, posting each send as
/// soon as the previous receive has completed, so that the steps go around the ring in lockstep as
/// the ring allreduce's do. Every timed pass starts after an untimed pass of N 8-byte steps, after
/// which every rank is known to have entered: without it a rank that left the previous pass early
/// timed the wait for the late ones too (benchmarks/results/from_code_comments.md). A pass is timed
/// from its first receive to its last, which also leaves out the first burst an idle link lets
/// through above its rate (a switch buffer, a token bucket); the 64 KiB pass skips two steps, which
/// spend the credit the links saved during the untimed pass.
/// Passes of 8 B, 1 MiB and 64 KiB steps run three times each, and each rank
/// keeps the fastest pass of each size: on a busy host a wake-up is now and then late by
/// milliseconds, which a mean over a few steps cannot absorb; and a median of single steps is no
/// better, since a rank that was late then finds its next messages waiting (step times on the
/// shaped cluster of benchmarks/netcluster.sh: benchmarks/results/from_code_comments.md).
/// When every host runs the same number L > 1 of ranks, a fourth kind of pass times 8-byte steps
/// around each host's own ring (local rank i to i+1, through shared memory), three times,
/// fastest kept: the cost of one message inside a host, which the hierarchical schedule pays
/// 2(L-1) times per call. On a host with a core per rank that is a few microseconds; on one that
/// runs more ranks than cores it is a scheduler wake-up, hundreds of microseconds, and decides
/// whether the hierarchical schedule is worth it for small messages.
/// The ranks then agree on the slowest rank's numbers, and on whether any of them shares its
/// cores (`cores_shared`), by passing the running maximum around the ring (N - 1 hops of 40
/// bytes), so every rank derives the same estimate from the same numbers and makes the same
/// choices. Where cores are shared, the 8-byte step over N ranks is also the time the machine
/// takes per message (`link_estimate::shared_msg_us`).
///
/// The fit (`fit_links`): beta is the slope between the 64 KiB and 1 MiB steps, or between the
/// 8 B and 1 MiB steps where that is slower, alpha the 64 KiB step less its bytes, kept between
/// half of the 8-byte step and the whole of it. The intercept is the per-message cost the mid-size
/// schedules pay, where the crossovers between them fall, and it can be below the 8-byte step: on
/// 4 fake hosts at 1 Gbit/s halving-doubling, with twice recursive doubling's messages, is about as
/// fast at 16 KiB. But it is the small difference of two large numbers, and a 64 KiB step's receiver
/// wakes while its bytes still arrive: unfloored, the intercept came out far below the 8-byte step
/// and made halving-doubling the choice at 8 KiB on 4 and 8 fake hosts, where it ran slower than
/// Open MPI (and than recursive doubling on 4 hosts; benchmarks/results/from_code_comments.md). The
/// floor of half an 8-byte step keeps the latency-bound schedules there.
///
/// Cost: about 70 + 13 N hops and 11 MiB through each rank's link (about 100 ms on 1 Gbit/s links).
/// The messages carry `probe_tag` and sequence number 0: no operation number of the user's is
/// consumed, and a rank that does not probe while its peers do (ranks given different settings)
/// fails with errc::mismatch naming both sides' calls rather than mixing the bytes up.

#include <algorithm>
#include <chrono>
#include <cstring>

#include "gsync/core/concepts.hpp"
#include "gsync/core/links.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/detail/aligned_buffer.hpp"

namespace gsync::transport {

/// Wire tag of the probe's messages (transport/frame.hpp names it for error messages).
inline constexpr std::uint32_t probe_tag = 8;

/// What the probe measured (on every rank the same numbers).
struct probe_result {
  link_estimate links;        ///< the estimate fitted to the step times
  double small_step_us = 0;   ///< one ring step of 8 bytes, slowest rank
  double mid_step_us = 0;     ///< one ring step of `probe_mid_bytes`, slowest rank
  double big_step_us = 0;     ///< one ring step of `probe_big_bytes`, slowest rank
  double intra_step_us = 0;   ///< one 8-byte step around a host's ring, slowest rank (0: not timed)
};

/// Message sizes of the two bandwidth passes.
inline constexpr std::size_t probe_mid_bytes = std::size_t{64} << 10, probe_big_bytes = std::size_t{1} << 20;

/// The fit (see the file comment) of the slowest rank's step times `small_us`, `mid_us` and
/// `big_us` (steps of 8 B, probe_mid_bytes and probe_big_bytes). beta is the slower of two slopes:
/// 64 KiB to 1 MiB, and 8 B to 1 MiB. The first alone is far too fast when the 64 KiB step comes
/// out slow (a case from before the passes were aligned: benchmarks/results/from_code_comments.md).
/// alpha is the 64 KiB step less its bytes, kept between half of the 8-byte step and the whole of
/// it, and at least 1 us; beta is at least 8e-8 us per byte (100 Tbit/s).
inline link_estimate fit_links(double small_us, double mid_us, double big_us) noexcept {
  const double mid_slope = (big_us - mid_us) / static_cast<double>(probe_big_bytes - probe_mid_bytes);
  const double wide_slope = (big_us - small_us) / static_cast<double>(probe_big_bytes - 8);
  link_estimate l;
  l.beta_us_per_byte = std::max({8e-8, mid_slope, wide_slope});
  const double intercept = mid_us - l.beta_us_per_byte * static_cast<double>(probe_mid_bytes);
  l.alpha_us = std::max(1.0, std::clamp(intercept, small_us / 2, small_us));
  l.measured = true;
  return l;
}

/// Runs the probe on transport endpoint `x` (every rank of the job must call it, after the
/// connections are up); every wait ends by `dl`. `cores_shared`: this rank's machine runs more
/// ranks than it has cores. Errors are the transport's (timeout, peer_lost, mismatch).
/// \tparam X a transport (transport_policy), here the TCP transport during its setup.
template <class X>
probe_result probe_links(X& x, deadline dl, bool cores_shared = false) {
  using clock = std::chrono::steady_clock;
  const int n = x.size(), me = x.rank();
  if (n < 2) return {};
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  constexpr int runs = 3;
  auto out = detail::make_aligned_bytes(probe_big_bytes), in = detail::make_aligned_bytes(probe_big_bytes);
  std::memset(out.get(), 0, probe_big_bytes);
  const message_id id{probe_tag, 0, fingerprint{}};
  // One pass: `steps` ring steps of `bytes` (to `to`, from `from`); returns the mean time of the
  // steps after the first `skip` (timed from the skip-th receive to the last).
  const auto pass_on = [&](int to, int from, std::size_t bytes, int steps, int skip = 1) {
    clock::time_point first{};
    for (int k = 0; k < steps; ++k) {
      x.post_send(to, id, out.get(), bytes);
      x.recv(from, id, in.get(), bytes, dl);
      if (k == skip - 1) first = clock::now();
    }
    const double us = std::chrono::duration<double, std::micro>(clock::now() - first).count();
    x.flush_sends(dl);
    return us / (steps - skip);
  };
  const auto pass = [&](std::size_t bytes, int steps) { return pass_on(right, left, bytes, steps); };
  // Untimed 8-byte steps around the whole ring: a rank's k-th receive comes after the k ranks to
  // its left have entered, so after n steps every rank has, and the next pass starts in step.
  const auto align = [&] { pass_on(right, left, 8, n); };
  // The host's own ring, when hosts run L > 1 ranks each (the same placement on every rank).
  const topology& tp = x.topo();
  const bool intra = tp.hosts() > 1 && tp.uniform() && tp.world() == n && tp.ranks_per_host() > 1;
  int mate_right = -1, mate_left = -1;
  if (intra) {
    const auto& mates = tp.ranks_on(tp.host_of(me));
    const int l = static_cast<int>(mates.size()), i = tp.local_index(me);
    mate_right = mates[static_cast<std::size_t>((i + 1) % l)];
    mate_left = mates[static_cast<std::size_t>((i + l - 1) % l)];
  }
  constexpr double inf = 1e300;
  // 8 B, 64 KiB, 1 MiB, 8 B inside the host: the fastest pass of each; then cores shared (0 or 1).
  double t[5] = {inf, inf, inf, intra ? inf : 0.0, cores_shared ? 1.0 : 0.0};
  for (int i = 0; i < runs; ++i) {
    align();
    t[0] = std::min(t[0], pass(8, 12));
    align();
    t[2] = std::min(t[2], pass(probe_big_bytes, 3));
    align();  // two untimed steps spend the credit the links saved meanwhile
    t[1] = std::min(t[1], pass_on(right, left, probe_mid_bytes, 8, 3));
    if (intra) {
      align();
      t[3] = std::min(t[3], pass_on(mate_right, mate_left, 8, 12));
    }
  }
  // Agree on the slowest rank's numbers: after k hops each rank holds the maximum over itself and
  // the k ranks to its left.
  double got[5];
  for (int k = 0; k < n - 1; ++k) {
    x.post_send(right, id, reinterpret_cast<const std::byte*>(t), sizeof t);
    x.recv(left, id, reinterpret_cast<std::byte*>(got), sizeof got, dl);
    x.flush_sends(dl);  // `t` must not change while queued
    for (int j = 0; j < 5; ++j) t[j] = std::max(t[j], got[j]);
  }
  probe_result r;
  r.small_step_us = t[0];
  r.mid_step_us = t[1];
  r.big_step_us = t[2];
  r.intra_step_us = t[3];
  if (intra) r.links.intra_alpha_us = std::max(1.0, t[3]);
  // Floors keep a noisy run from producing a free network: 100 Tbit/s, 1 us per message.
  const link_estimate fit = fit_links(t[0], t[1], t[2]);
  r.links.beta_us_per_byte = fit.beta_us_per_byte;
  r.links.alpha_us = fit.alpha_us;
  if (t[4] > 0) r.links.shared_msg_us = t[0] / n;
  r.links.measured = true;
  return r;
}

}  // namespace gsync::transport
