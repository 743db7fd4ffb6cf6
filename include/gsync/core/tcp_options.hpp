#pragma once
/// \file
/// Forwarding header: `transport::tcp_options` is `transport::host_options`, core/host_options.hpp.
#include "gsync/core/host_options.hpp"
