#pragma once
/// \file
/// Umbrella header: everything public in gsync.
#include "gsync/allreduce.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/ops.hpp"
