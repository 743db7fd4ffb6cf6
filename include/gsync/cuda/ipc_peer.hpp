#pragma once
/// \file
/// What each rank tells its peers before they map its device memory (`peer_record`, exchanged by
/// every rank of a communicator at its first device collective) and the decisions drawn from the
/// records: how a rank reaches a peer's arena (`peer_access`: its own pointer when both run in one
/// process, since a process cannot open its own IPC handles; cudaIpcOpenMemHandle across
/// processes) and whether a whole communicator forms one IPC group, with the reason when not.
/// Every rank draws the same decision from the same records. Set-up code, no CUDA call.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "gsync/detail/kernel_id.hpp"
#include "gsync/core/error.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/ipc_api.hpp"

namespace gsync::cuda::ipc {

/// One rank's facts for its peers (trivially copyable: exchanged as bytes).
struct peer_record {
  static constexpr std::uint32_t magic_value = 0x43504947;  ///< "GIPC"
  std::uint32_t magic = magic_value;  ///< identifies the record (a peer of another gsync build differs)
  std::uint32_t version = 1;          ///< layout version
  std::int32_t rank = 0;              ///< rank in the communicator
  std::int32_t pid = 0;               ///< process id
  std::uint64_t pid_ns = 0;           ///< inode of the PID namespace (legacy IPC cannot cross them)
  char machine[64] = {};              ///< kernel identity (boot id): one machine, one set of GPUs
  device_identity device;             ///< the rank's current device
  std::uint64_t slot_bytes = 0;       ///< its arena's slot size
  ipc_handle handle{};                ///< its arena's IPC handle
  std::uint64_t address = 0;          ///< its arena's address (used as is by ranks of its process)
  char page[64] = {};                 ///< name of its counter page (shared memory)
  std::uint8_t enabled = 1;           ///< 0: GSYNC_CUDA_IPC_DISABLE=1 on that rank
  std::uint8_t ready = 0;             ///< 1: arena and page made, kernels installed
  char why_not[150] = {};             ///< when not ready: why

  /// Sets `why_not` (truncated) and clears `ready`.
  void refuse(const std::string& why) noexcept {
    ready = 0;
    const std::size_t n = std::min(why.size(), sizeof why_not - 1);
    std::memcpy(why_not, why.data(), n);
    why_not[n] = '\0';
  }
};
static_assert(std::is_trivially_copyable_v<peer_record>);

/// Copies `s` into a fixed character field, truncating.
template <std::size_t N>
void set_field(char (&f)[N], const std::string& s) noexcept {
  const std::size_t n = std::min(s.size(), N - 1);
  std::memcpy(f, s.data(), n);
  f[n] = '\0';
}

/// A fixed character field as a string (stops at the first NUL or at the end).
template <std::size_t N>
std::string field(const char (&f)[N]) {
  return std::string(f, strnlen(f, N));
}

/// The process facts of this rank's record (pid, PID namespace, machine).
inline void fill_process(peer_record& r) {
  r.pid = static_cast<std::int32_t>(::getpid());
  struct stat st{};
  if (::stat("/proc/self/ns/pid", &st) == 0) r.pid_ns = static_cast<std::uint64_t>(st.st_ino);
  set_field(r.machine, gsync::detail::kernel_id());
}

/// How one rank reaches a peer's arena.
enum class peer_access : std::uint8_t {
  none,          ///< cannot: the group falls back to host staging
  same_process,  ///< the peer runs in this process: its pointer as is
  ipc,           ///< another process: cudaIpcOpenMemHandle of its handle
};

/// A decision with its reason (empty when the access works).
struct access_decision {
  peer_access how = peer_access::none;  ///< the access
  std::string why;                      ///< why none
};

/// How `me` reaches `peer` (both records as exchanged).
inline access_decision decide(const peer_record& me, const peer_record& peer) {
  const std::string p = "rank " + std::to_string(peer.rank);
  if (peer.magic != peer_record::magic_value || peer.version != me.version)
    return {peer_access::none, p + " runs a different gsync build (CUDA IPC record version differs)"};
  if (!me.enabled || !peer.enabled)
    return {peer_access::none, "GSYNC_CUDA_IPC_DISABLE=1 on rank " + std::to_string(me.enabled ? peer.rank : me.rank)};
  if (!me.ready) return {peer_access::none, "rank " + std::to_string(me.rank) + ": " + field(me.why_not)};
  if (!peer.ready) return {peer_access::none, p + ": " + field(peer.why_not)};
  if (field(me.machine) != field(peer.machine)) return {peer_access::none, p + " runs on another machine"};
  if (me.pid_ns != peer.pid_ns)
    return {peer_access::none, p + " runs in another PID namespace (legacy CUDA IPC handles cannot cross PID namespaces)"};
  if (me.pid == peer.pid) return {peer_access::same_process, {}};
  if (me.device.uuid == peer.device.uuid && (me.device.compute_mode == 3 || peer.device.compute_mode == 3))
    return {peer_access::none, p + " shares GPU " + field(me.device.pci_bus) + " in exclusive-process compute mode"};
  return {peer_access::ipc, {}};
}

/// Before `me` (on `device`) uses the arena of `peer`, a rank of the same process, by pointer: on
/// another GPU that needs peer access (else a kernel faults). Throws `errc::cuda` naming both GPUs
/// where they have no peer path. \param who names the peer in messages.
inline void enable_peer_access(runtime_api& api, int device, const peer_record& me, const peer_record& peer, const std::string& who) {
  if (peer.device.uuid == me.device.uuid) return;
  const device_guard on_device(api, device);
  if (!api.enable_peer_access(peer.device.ordinal))
    throw error(errc::cuda, "GPU " + field(me.device.pci_bus) + " cannot access GPU " + field(peer.device.pci_bus) + " of " + who +
                                " directly (cudaDeviceCanAccessPeer: no), which ranks of one process on two GPUs need");
}

/// Whether the ranks of `all` (indexed by rank) form one IPC group: every pair can map each
/// other's arena. Empty when they can, else the first reason found (the same on every rank).
inline std::string group_refusal(std::span<const peer_record> all) {
  if (all.size() > static_cast<std::size_t>(max_ipc_ranks))
    return std::to_string(all.size()) + " ranks (one CUDA IPC group holds at most " + std::to_string(max_ipc_ranks) + ")";
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].rank != static_cast<std::int32_t>(r)) return "CUDA IPC records out of order (rank " + std::to_string(r) + ")";
  for (std::size_t a = 0; a < all.size(); ++a)
    for (std::size_t b = 0; b < all.size(); ++b) {
      if (a == b) {
        if (!all[a].enabled) return "GSYNC_CUDA_IPC_DISABLE=1 on rank " + std::to_string(a);
        if (!all[a].ready) return "rank " + std::to_string(a) + ": " + field(all[a].why_not);
        continue;
      }
      const auto d = decide(all[a], all[b]);
      if (d.how == peer_access::none) return d.why;
    }
  return {};
}

/// The slot size a group uses: the smallest any rank exported (each arena holds at least that).
inline std::size_t group_slot_bytes(std::span<const peer_record> all) noexcept {
  std::uint64_t s = ~std::uint64_t{0};
  for (const auto& r : all) s = std::min(s, r.slot_bytes);
  return all.empty() ? 0 : static_cast<std::size_t>(s);
}

}  // namespace gsync::cuda::ipc
