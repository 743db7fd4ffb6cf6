#pragma once
/// \file
/// Forwarding header: `transport::tcp_options` is `transport::host_options`, defined in
/// core/host_options.hpp, under `config` (every setting is read in one place, core/config.ipp).
#include "gsync/core/host_options.hpp"
