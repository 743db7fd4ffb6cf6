#pragma once
/// \file
/// libibverbs, loaded at run time (dlopen), as NCCL and MSCCL++ load it: a program built with
/// verbs support starts on a machine without libibverbs and uses TCP there, saying why at INFO,
/// and no program has to link -libverbs. Built only where <infiniband/verbs.h> is found (Debian:
/// libibverbs-dev), for its types; `GSYNC_HAVE_VERBS` (detail/build_mode.hpp) says whether it was.
///
/// Every exported call is looked up at the version node the real library gives it (dlvsym), so one
/// binary runs against rdma-core's library or the test stand-in (tests/support/ibv_emu/) that
/// exports the same nodes. The data-path calls (post_send, post_recv, poll_cq, req_notify_cq) are
/// inline in verbs.h and go through the context's ops: they need no symbol. Calls that verbs.h
/// makes macros over inline wrappers (ibv_query_port, ibv_reg_mr, ibv_get_device_list) are made
/// here the way those wrappers make them, without naming the library's symbols at link time.
/// The library is never unloaded (providers keep state).

#include "gsync/detail/build_mode.hpp"

#if GSYNC_HAVE_VERBS
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

namespace gsync::verbs {

/// The calls of libibverbs gsync uses, resolved from one loaded library.
struct library {
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*query_port_compat)(ibv_context*, std::uint8_t, _compat_ibv_port_attr*) = nullptr;
  int (*query_gid)(ibv_context*, std::uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, std::size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_comp_channel* (*create_comp_channel)(ibv_context*) = nullptr;
  int (*destroy_comp_channel)(ibv_comp_channel*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**) = nullptr;
  void (*ack_cq_events)(ibv_cq*, unsigned) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  int (*get_async_event)(ibv_context*, ibv_async_event*) = nullptr;
  void (*ack_async_event)(ibv_async_event*) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status) = nullptr;
  const char* (*event_type_str)(ibv_event_type) = nullptr;
  int (*fork_init)() = nullptr;
  /// Optional (IBVERBS_1.12; null where the library predates it): device memory registration.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, std::uint64_t, std::size_t, std::uint64_t, int, int) = nullptr;

  /// Port attributes, as verbs.h's ibv_query_port wrapper gets them (the context's extended
  /// query when it has one, else the exported call on a zeroed struct).
  int query_port(ibv_context* ctx, std::uint8_t port, ibv_port_attr* attr) const {
    if (verbs_context* v = verbs_get_ctx_op(ctx, query_port)) return v->query_port(ctx, port, attr, sizeof *attr);
    std::memset(attr, 0, sizeof *attr);
    return query_port_compat(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
  }

  /// The library at `name` (a soname searched as dlopen does, or a path), loaded once per process
  /// and name; null when it cannot be loaded or lacks a call, with the reason in `why`.
  static const library* load(const std::string& name, std::string& why) {
    struct entry {
      library lib;
      bool ok = false;
      std::string why;
    };
    static std::mutex m;
    // A process loads each name once. Never destroyed: links may outlive static destructors, and
    // the libraries stay loaded anyway.
    static auto* tried = new std::map<std::string, entry>;
    std::lock_guard lk(m);
    auto it = tried->find(name);
    if (it == tried->end()) {
      it = tried->emplace(name, entry{}).first;
      it->second.ok = open(name, it->second.lib, it->second.why);
    }
    why = it->second.why;
    return it->second.ok ? &it->second.lib : nullptr;
  }

 private:
  // Fills `*lib` from the library at `name`; false with the reason in `why`.
  static bool open(const std::string& name, library& out, std::string& why) {
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      why = "cannot load " + name + (e ? std::string(": ") + e : std::string());
      return false;
    }
    library* lib = &out;
    std::string missing;
    auto get = [&](auto& fn, const char* sym, const char* version, bool required = true) {
      void* p = ::dlvsym(h, sym, version);
      if (p == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(sym) + "@" + version;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get(lib->get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
    get(lib->free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
    get(lib->get_device_name, "ibv_get_device_name", "IBVERBS_1.1");
    get(lib->open_device, "ibv_open_device", "IBVERBS_1.1");
    get(lib->close_device, "ibv_close_device", "IBVERBS_1.1");
    get(lib->query_device, "ibv_query_device", "IBVERBS_1.1");
    get(lib->query_port_compat, "ibv_query_port", "IBVERBS_1.1");
    get(lib->query_gid, "ibv_query_gid", "IBVERBS_1.1");
    get(lib->alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
    get(lib->dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1");
    get(lib->reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
    get(lib->dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
    get(lib->create_comp_channel, "ibv_create_comp_channel", "IBVERBS_1.0");
    get(lib->destroy_comp_channel, "ibv_destroy_comp_channel", "IBVERBS_1.0");
    get(lib->create_cq, "ibv_create_cq", "IBVERBS_1.1");
    get(lib->destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1");
    get(lib->get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1");
    get(lib->ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1");
    get(lib->create_qp, "ibv_create_qp", "IBVERBS_1.1");
    get(lib->modify_qp, "ibv_modify_qp", "IBVERBS_1.1");
    get(lib->destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1");
    get(lib->get_async_event, "ibv_get_async_event", "IBVERBS_1.1");
    get(lib->ack_async_event, "ibv_ack_async_event", "IBVERBS_1.1");
    get(lib->wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1");
    get(lib->event_type_str, "ibv_event_type_str", "IBVERBS_1.1");
    get(lib->fork_init, "ibv_fork_init", "IBVERBS_1.1");
    get(lib->reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", /*required=*/false);
    if (!missing.empty()) {
      why = name + " lacks " + missing;
      return false;  // the handle stays open: unloading a half-used provider stack is not safe
    }
    why.clear();
    return true;
  }
};

}  // namespace gsync::verbs

#endif  // GSYNC_HAVE_VERBS
