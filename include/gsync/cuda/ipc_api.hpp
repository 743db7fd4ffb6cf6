#pragma once
/// \file
/// `cuda::ipc_kernels`: the one element pass of the CUDA IPC collectives (cuda/ipc_schedule.hpp):
/// reduce the same range of up to `max_ipc_ranks` device buffers (the ranks' arenas, some mapped
/// from other processes) into one, in rank order, with the element type and the operator named at
/// run time, so that the schedule is plain C++ tested on machines without a GPU.
///
/// The real implementation is `cuda/ipc_kernels.cuh`, installed by every `.cu` file that includes
/// gsync's collectives (dispatch/device_collective.hpp includes it under nvcc); tests install a host
/// stand-in (tests/support/fake_cuda.hpp). Without one installed, device collectives keep to host
/// staging and say so at GSYNC_DEBUG=INFO. A user operator is reduced by a kernel templated on it
/// (`ipc_user_reduction`), which only a file compiled by nvcc has. This header includes no CUDA header.

#include <atomic>
#include <cstddef>
#include <optional>
#include <type_traits>

#include "gsync/core/dtype.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/device_span.hpp"
#include "gsync/detail/hd.hpp"

namespace gsync::cuda {

/// The most ranks one CUDA IPC group holds (sources of one reduction kernel). A host with more
/// ranks keeps its device collectives on host staging.
inline constexpr int max_ipc_ranks = 32;

/// The reduction operators the IPC kernels implement (gsync's built-in ones).
enum class ipc_op : std::uint8_t { sum, prod, min, max, avg };

/// The IPC operator of `Op`, or none (a user functor: see `ipc_user_reduction`).
/// \tparam Op reduction operator.
template <class Op>
constexpr std::optional<ipc_op> ipc_op_of() noexcept {
  if constexpr (std::is_same_v<Op, op::sum>) return ipc_op::sum;
  else if constexpr (std::is_same_v<Op, op::prod>) return ipc_op::prod;
  else if constexpr (std::is_same_v<Op, op::min>) return ipc_op::min;
  else if constexpr (std::is_same_v<Op, op::max>) return ipc_op::max;
  else if constexpr (std::is_same_v<Op, op::avg>) return ipc_op::avg;
  else return std::nullopt;
}

/// Device pointers to the sources of one reduction, in rank order.
struct ipc_sources {
  const void* p[max_ipc_ranks] = {};  ///< first element of each source
  int n = 0;                          ///< number of sources (1..max_ipc_ranks)
};

/// The IPC collectives' element pass.
class ipc_kernels {
 public:
  virtual ~ipc_kernels() = default;
  /// Queues on `s`: dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i] for i < count, combined
  /// in that order (so every rank computing it gets the same bits); 16-bit floats are combined in
  /// float32 and rounded once. `avg` divides the sum by `src.n` as `op::avg::finalize` does. `dst`
  /// may equal one of the sources. Reads nothing, and writes nothing, when `*cancel` (a word of
  /// mapped host memory, read through `runtime_api::device_view`) is not 0 as the kernel starts:
  /// after a failure, a stream let go past its waits must not touch a dead peer's memory.
  virtual void reduce(const ipc_sources& src, void* dst, std::size_t count, dtype t, ipc_op op, cuda_stream s,
                      const std::uint64_t* cancel) = 0;
  /// Queues on `s` a copy of `bytes` bytes from `src` (a peer's arena) to `dst`, skipped, as
  /// `reduce`, when `*cancel` is not 0 as it starts.
  virtual void copy(void* dst, const void* src, std::size_t bytes, cuda_stream s, const std::uint64_t* cancel) = 0;
};

namespace detail {
inline std::atomic<ipc_kernels*>& ipc_kernels_slot() noexcept {
  static std::atomic<ipc_kernels*> slot{nullptr};
  return slot;
}
}  // namespace detail

inline namespace GSYNC_TU_NS {  // what this file can reduce (detail/hd.hpp)

/// How the IPC reduction of elements `T` under a user operator `Op` is queued: a specialization
/// with `static void queue(const void* op, const ipc_sources& src, void* dst, std::size_t count,
/// bool finalize, cuda_stream s, const std::uint64_t* cancel)`, which queues on `s` what
/// `ipc_kernels::reduce` does, with `*static_cast<const Op*>(op)`, applying `Op::finalize` (if it
/// has one) only when `finalize`. None by default: such collectives then run on host staging.
/// cuda/ipc_kernels.cuh, included by a .cu file (nvcc) with gsync's collectives, provides it for
/// every operator: the kernel is instantiated in that file, the operator inlined into it.
/// 	param T element type. 	param Op the user's operator (callable in device code: GSYNC_HD).
template <class T, class Op>
struct ipc_user_reduction {};

/// True when the IPC reduction of `T` under user operator `Op` can be queued here.
template <class T, class Op>
concept has_ipc_user_reduction = requires(const void* op, const ipc_sources& src, void* dst, std::size_t n, cuda_stream s,
                                          const std::uint64_t* cancel) {
  ipc_user_reduction<T, Op>::queue(op, src, dst, n, true, s, cancel);
};

}  // namespace GSYNC_TU_NS

/// One IPC reduction's element pass as the schedules (cuda/ipc_schedule.hpp) queue it,
/// non-templated: the installed kernels for a built-in operator (`builtin`), or the user's
/// operator compiled into the calling .cu file (`user`). Refers to what it was made from, which
/// must outlive it (one collective's enqueueing).
class ipc_reduction {
 public:
  /// A built-in operator: element type and operator named at run time.
  struct builtin_args {
    ipc_kernels* kernels = nullptr;  ///< the installed kernels
    dtype type = dtype::float32;     ///< element type
    ipc_op op = ipc_op::sum;         ///< operator
  };
  /// The built-in reduction `a` (kept by reference).
  static ipc_reduction builtin(const builtin_args& a) noexcept { return ipc_reduction(&queue_builtin, &a, static_cast<std::uint8_t>(a.op)); }
  /// The reduction of `T` under user operator `op` (kept by reference).
  template <class T, class Op>
    requires has_ipc_user_reduction<T, Op>
  static ipc_reduction user(const Op& op) noexcept {
    return ipc_reduction(&ipc_user_reduction<T, Op>::queue, &op, user_code);
  }
  /// Queues dst = the reduction of `src` over `count` elements on `s`, finalized (avg's division,
  /// a user operator's `finalize`) only when `finalize`; nothing is read or written once `*cancel`
  /// is set (see `ipc_kernels::reduce`).
  void operator()(const ipc_sources& src, void* dst, std::size_t count, bool finalize, cuda_stream s, const std::uint64_t* cancel) const {
    fn_(ctx_, src, dst, count, finalize && finalizes_, s, cancel);
  }
  /// This reduction, never finalized (a level that only combines: the hierarchical allreduce
  /// finalizes once, across hosts).
  ipc_reduction unfinalized() const noexcept {
    ipc_reduction r = *this;
    r.finalizes_ = false;
    return r;
  }
  /// The operator's code in the steps' signatures: the ipc_op, or `user_code` for every user operator.
  std::uint8_t code() const noexcept { return code_; }
  static constexpr std::uint8_t user_code = 255;  ///< code of every user operator (they cannot be told apart)

 private:
  using queue_fn = void (*)(const void*, const ipc_sources&, void*, std::size_t, bool, cuda_stream, const std::uint64_t*);
  ipc_reduction(queue_fn f, const void* ctx, std::uint8_t code) noexcept : fn_(f), ctx_(ctx), code_(code) {}
  static void queue_builtin(const void* ctx, const ipc_sources& src, void* dst, std::size_t n, bool finalize, cuda_stream s,
                            const std::uint64_t* cancel) {
    const auto& a = *static_cast<const builtin_args*>(ctx);
    a.kernels->reduce(src, dst, n, a.type, !finalize && a.op == ipc_op::avg ? ipc_op::sum : a.op, s, cancel);
  }
  queue_fn fn_;
  const void* ctx_;
  std::uint8_t code_;
  bool finalizes_ = true;
};

/// Installs `k` as the IPC kernels of later device collectives; returns the previous ones.
inline ipc_kernels* set_ipc_kernels(ipc_kernels* k) noexcept { return detail::ipc_kernels_slot().exchange(k); }

/// The installed IPC kernels, or null (device collectives then use host staging).
inline ipc_kernels* installed_ipc_kernels() noexcept { return detail::ipc_kernels_slot().load(std::memory_order_acquire); }

}  // namespace gsync::cuda
