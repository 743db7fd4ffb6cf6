#pragma once
// How a gsync communicator starts from the c10d store PyTorch hands a process group (the world's,
// or a new_group's PrefixStore): rank 0 serves gsync's own store on a free port and publishes its
// address and a fresh job key through the c10d store; the others read them there. So every group
// gets its own gsync communicator, authenticated, with no MASTER_PORT of gsync's.

#include <cstdlib>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <gsync/bootstrap/auth.hpp>
#include <gsync/bootstrap/host_id.hpp>
#include <gsync/bootstrap/launch_env.hpp>

namespace gsync_torch {

inline std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
inline std::string string_of(const std::vector<std::uint8_t>& v) { return {v.begin(), v.end()}; }

/// The launch of rank `rank` of `size` through `store`. Rank 0 serves gsync's store on loopback
/// when every rank runs on its host (host identities exchanged through `store`), else on its own
/// address (GSYNC_SOCKET_IFNAME's, or the default route's).
inline gsync::bootstrap::launch_info launch_from_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  gsync::bootstrap::launch_info li;
  li.rank = rank;
  li.size = size;
  li.source = "torch.distributed";
  li.master_port = 0;
  if (const char* lr = std::getenv("LOCAL_RANK")) li.local_rank = std::atoi(lr);
  const std::string host = gsync::bootstrap::host_id();
  store->set("gsync/host/" + std::to_string(rank), bytes_of(host));
  bool all_local = true;
  if (rank == 0)
    for (int r = 1; r < size && all_local; ++r) all_local = string_of(store->get("gsync/host/" + std::to_string(r))) == host;
  li.master_addr = all_local ? "127.0.0.1" : "";
  std::string key;
#if defined(GSYNC_HAVE_OPENSSL)
  if (rank == 0) {
    const auto a = gsync::bootstrap::auth::fresh_nonce(), b = gsync::bootstrap::auth::fresh_nonce();
    key.assign(reinterpret_cast<const char*>(a.data()), a.size());
    key.append(reinterpret_cast<const char*>(b.data()), b.size());
    store->set("gsync/key", bytes_of(key));
  } else {
    key = string_of(store->get("gsync/key"));
  }
#endif
  li.job_key = key;
  li.share_store = [store, rank](std::string& s) {
    if (rank == 0) store->set("gsync/store", bytes_of(s));
    else s = string_of(store->get("gsync/store"));
  };
  return li;
}

}  // namespace gsync_torch
