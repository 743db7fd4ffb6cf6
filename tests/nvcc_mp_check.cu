// mp_check.cpp compiled by nvcc (tests/CMakeLists.txt): the header-only library, set-up code
// included, in a CUDA translation unit next to a kernel, as a CUDA user's file has it.
#include "mp_check.cpp"

// Never launched (the test needs no GPU): it proves device code and gsync share the file.
__global__ void gsync_nvcc_check_kernel(float* p) { p[threadIdx.x] *= 2.0f; }
