#pragma once
/// \file
/// The allreduce algorithms of device buffers over CUDA IPC (cuda/ipc_schedule.hpp runs them):
/// policies with their models, forceable like the host algorithms
/// (`gsync::allreduce<gsync::algo::one_shot>(comm, device_span, op, stream)`, GSYNC_ALGO=one_shot)
/// and listed in `device_allreduce_registry` (algo/registry.hpp). They run only on device buffers
/// of a communicator whose GPUs formed a CUDA IPC group (dispatch/ipc_setup.hpp); forced elsewhere
/// they fail with invalid_argument saying why (dispatch/ipc_allreduce.hpp).
///
/// The model prices a step of a schedule: one round of control words between the GPUs
/// (`ipc_cost_model::step_us`) per slot-sized chunk, plus the bytes a GPU reads from its peers'
/// memory. Its constants are assumptions for NVLink-connected GPUs (no GPU run has measured them
/// yet); the choice it makes for a message is logged at GSYNC_DEBUG=INFO with both estimates.

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "gsync/algo/ring.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/cost_model.hpp"

namespace gsync::algo {

/// What the device schedules over CUDA IPC cost (assumed, see the file comment).
struct ipc_cost_model {
  double step_us = 5.0;               ///< one round of control words: a write and a wait on every peer's, by stream memory operations
  double read_gbps = 150.0;           ///< bytes per microsecond x 1e-3 a GPU reads from its peers' memory (NVLink class)
  double staging_gbps = 20.0;         ///< a pinned host copy over PCIe, each way (the hierarchical form's level across hosts)
  std::size_t slot_bytes = 8u << 20;  ///< the arena slot (GSYNC_CUDA_IPC_BUFFER): a message moves in chunks of this size

  /// Chunks of `bytes`: every chunk pays its steps.
  constexpr double chunks(std::size_t bytes) const noexcept {
    const std::size_t slot = std::max<std::size_t>(1, slot_bytes);
    return static_cast<double>(std::max<std::size_t>(1, (bytes + slot - 1) / slot));
  }
  /// Microseconds to read `bytes` from peers.
  constexpr double read_us(double bytes) const noexcept { return bytes / (read_gbps * 1e3); }
};

/// One-shot: every GPU reads every peer's chunk and reduces all of it (in rank order, so every
/// rank gets the same bits). One round of control words per chunk; (N-1) s bytes read per GPU.
struct one_shot {
  static constexpr std::string_view name = "one_shot";
  static constexpr std::string_view aliases = "oneshot one-shot";  ///< other names GSYNC_ALGO accepts
  static constexpr bool across_hosts_only = false;                 ///< runs on the GPUs of one host
  /// Estimated time for `bytes` on `n` GPUs.
  static constexpr double device_us(std::size_t bytes, int n, const ipc_cost_model& m) noexcept {
    if (n <= 1) return 0.0;
    return m.chunks(bytes) * m.step_us + m.read_us(static_cast<double>(bytes) * (n - 1));
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view device_why = "one round of control words per chunk; wins while the round costs more than the extra reads";
};

/// Two-shot: every GPU reduces its 1/N slice of the chunk from every peer, then gathers the
/// others' reduced slices. Two rounds per chunk; 2 (N-1)/N s bytes read per GPU.
struct two_shot {
  static constexpr std::string_view name = "two_shot";
  static constexpr std::string_view aliases = "twoshot two-shot";  ///< other names GSYNC_ALGO accepts
  static constexpr bool across_hosts_only = false;                 ///< runs on the GPUs of one host
  /// Estimated time for `bytes` on `n` GPUs.
  static constexpr double device_us(std::size_t bytes, int n, const ipc_cost_model& m) noexcept {
    if (n <= 1) return 0.0;
    return 2 * m.chunks(bytes) * m.step_us + m.read_us(2.0 * static_cast<double>(bytes) * (n - 1) / n);
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view device_why = "reads 2(N-1)/N of the message per GPU against one-shot's N-1";
};

/// The hierarchical device form, for ranks on several hosts with L GPUs each in a CUDA IPC group:
/// reduce-scatter inside each host over CUDA IPC, allreduce of each 1/L part across hosts through
/// host staging, allgather inside the host (small messages: allreduce inside, the whole buffer
/// across; cuda/ipc_hierarchical.hpp `choose_form`).
struct hierarchical_ipc {
  static constexpr std::string_view name = "hierarchical_ipc";
  static constexpr std::string_view aliases = "hier_ipc";  ///< other names GSYNC_ALGO accepts
  static constexpr bool across_hosts_only = true;          ///< needs ranks on several hosts
  /// Estimated time for `bytes` on `hosts` hosts of `local` GPUs: the two levels inside the host
  /// (a round and (L-1)/L s read each), the part's copies to and from pinned memory, and the ring
  /// allreduce of the part across hosts on `network`.
  static constexpr double device_hosts_us(std::size_t bytes, int hosts, int local, const ipc_cost_model& m,
                                          const cost_model& network) noexcept {
    const double s = static_cast<double>(bytes), L = local;
    const double inside = local <= 1 ? 0.0 : 2 * (m.chunks(bytes) * m.step_us + m.read_us(s * (L - 1) / L));
    const double part = s / L;
    const double across = hosts <= 1 ? 0.0
                                     : 2 * part / (m.staging_gbps * 1e3) +
                                           ring::allreduce_us(world_shape(static_cast<std::size_t>(part), hosts), network);
    return inside + across;
  }
  /// Why the automatic choice takes it.
  static constexpr std::string_view device_why =
      "ranks span hosts: CUDA IPC inside each host, only 1/L of the buffer per GPU through host staging across hosts";
};

/// A device allreduce algorithm over CUDA IPC with its model: `device_us(bytes, n, ipc_cost_model)`
/// for one host, or `device_hosts_us(bytes, hosts, local, ipc_cost_model, cost_model)` when
/// `across_hosts_only`; `device_why`, the reason the automatic choice gives.
/// \tparam A an algorithm policy.
template <class A>
concept device_allreduce_algorithm = algorithm<A> && requires { A::device_why; A::across_hosts_only; } &&
                                     (requires(const ipc_cost_model& m) { A::device_us(std::size_t{}, 1, m); } ||
                                      requires(const ipc_cost_model& m, const cost_model& c) {
                                        A::device_hosts_us(std::size_t{}, 1, 1, m, c);
                                      });

}  // namespace gsync::algo
