#pragma once
/// \file
/// `transport::tcp_options`, the settings of the shared-memory + TCP transport: defined in
/// core/tcp_options.hpp, under `config` (every setting is read in one place, core/config.ipp).
#include "gsync/core/tcp_options.hpp"
