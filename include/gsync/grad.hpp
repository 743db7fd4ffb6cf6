#pragma once
/// \file
/// Umbrella header of the gradient layer (namespace `gsync::grad`): everything a data-parallel training
/// loop needs on top of the collectives.
///   grad/bucket_plan.hpp   which tensor goes to which fused bucket (pure arithmetic)
///   grad/nonfinite.hpp     the fused element passes (wire cast, unpack + scale + non-finite count)
///   grad/loss_scaler.hpp   dynamic loss scaling
///   grad/clip.hpp          clipping by global norm, replicated and sharded
///   grad/stats.hpp         per-step statistics (bytes, communication time, exposed time, ratio)
///   grad/synchronizer.hpp  the DDP-style synchronizer (bucketing, overlap, accumulation, wire types)
#include "gsync/grad/bucket_plan.hpp"
#include "gsync/grad/clip.hpp"
#include "gsync/grad/loss_scaler.hpp"
#include "gsync/grad/nonfinite.hpp"
#include "gsync/grad/stats.hpp"
#include "gsync/grad/synchronizer.hpp"
