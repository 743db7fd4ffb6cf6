#pragma once
/// \file
/// Forwarding header: the gradient kernels moved to <gsync/grad/device_kernels.cuh>, under the
/// gradient layer they serve; this older path keeps programs that include it building.
#include "gsync/grad/device_kernels.cuh"
