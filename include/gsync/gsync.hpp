#pragma once
/// \file
/// Umbrella header: everything public in gsync.
#include "gsync/allgather.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/alltoall.hpp"
#include "gsync/async.hpp"
#include "gsync/barrier.hpp"
#include "gsync/broadcast.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/core/request.hpp"
#include "gsync/device_span.hpp"
#include "gsync/reduce.hpp"
#include "gsync/reduce_scatter.hpp"
#include "gsync/send_recv.hpp"
