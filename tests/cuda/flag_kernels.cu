// Every gsync kernel, instantiated for tests/cuda_flags.sh, which compiles this file to PTX with
// and without nvcc's flags that change floating-point code (--use_fast_math, -ftz=true,
// -prec-div=false, --fmad=false) and requires the same PTX: then the kernels give the same bits
// whatever flags the user's .cu files use. Never run.
// Included with the collectives: the CUDA IPC reduce and copy kernels (cuda/ipc_kernels.cuh), the
// gradient kernels (grad/device_kernels.cuh: cast, fused unpack, sums of squares, scaling, int8
// encode and decode).

#include <cstdint>

#include <gsync/gsync.hpp>
#include <gsync/grad/device_kernels.cuh>
#include <gsync/cuda/reduce.cuh>

namespace {

template <class T, class Op>
void both(T* p, cudaStream_t s) {
  gsync::cuda::reduce<true>(p, p, p, 1, Op{}, 3, s);
  gsync::cuda::reduce<false>(p, p, p, 1, Op{}, 3, s);
}

template <class T>
void every_op(void* p, cudaStream_t s) {
  T* t = static_cast<T*>(p);
  both<T, gsync::op::sum>(t, s);
  both<T, gsync::op::prod>(t, s);
  both<T, gsync::op::min>(t, s);
  both<T, gsync::op::max>(t, s);
  both<T, gsync::op::avg>(t, s);
}

}  // namespace

// The staged path's elementwise reduce for every built-in element type and operator.
void gsync_flag_kernels(void* p, cudaStream_t s) {
  every_op<float>(p, s);
  every_op<double>(p, s);
  every_op<gsync::half>(p, s);
  every_op<gsync::bfloat16>(p, s);
  every_op<std::int8_t>(p, s);
  every_op<std::int32_t>(p, s);
  every_op<std::int64_t>(p, s);
  every_op<std::uint8_t>(p, s);
}
