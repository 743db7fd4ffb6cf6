#pragma once
/// \file
/// `gsync::grid`: the data x pipeline x tensor layout of 3D-parallel training, carved out of one
/// communicator with three splits.
///
/// Ranks are laid out Megatron-style, tensor innermost: rank = (stage * data + replica) * tensor +
/// shard. A tensor group is `tensor` consecutive ranks (on one host when the launcher fills
/// hosts in rank order and `tensor` divides the ranks per host: the per-layer allgathers and
/// reduce-scatters stay on the fast links); a data group holds the ranks of one stage and shard
/// across replicas (the gradient allreduce); a pipeline group holds the stages of one replica
/// and shard (send/recv of activations).
///
/// \code
///   // 8 ranks, data 2 x pipeline 2 x tensor 2:
///   //   stage 0:  replica 0: [0 1]   replica 1: [2 3]      tensor groups: [0 1] [2 3] [4 5] [6 7]
///   //   stage 1:  replica 0: [4 5]   replica 1: [6 7]      data groups:   [0 2] [1 3] [4 6] [5 7]
///   //                                                      pipeline:      [0 4] [1 5] [2 6] [3 7]
///   auto g = gsync::make_grid(world, /*data=*/2, /*pipeline=*/2, /*tensor=*/2);
///   gsync::allgather(g.tensor, ...);                // every layer
///   gsync::send(g.pipeline, ..., g.stage + 1, tag); // activations to the next stage
///   gsync::allreduce(g.data, grads, gsync::op::avg{});  // every step
/// \endcode

#include <string>

#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/split.hpp"

namespace gsync {

/// One rank's three groups of a data x pipeline x tensor layout and its coordinates in it.
/// \tparam X the communicator's transport (a `splittable_transport`).
template <transport_policy X>
struct grid {
  communicator<X> data;      ///< the ranks holding the same stage and shard: gradient allreduce (rank = replica)
  communicator<X> pipeline;  ///< the stages of this replica and shard: send/recv between stages (rank = stage)
  communicator<X> tensor;    ///< the shards of this replica and stage: per-layer collectives (rank = shard)
  int replica = 0;           ///< index along the data dimension, 0..data size-1
  int stage = 0;             ///< pipeline stage, 0..pipeline size-1
  int shard = 0;             ///< index along the tensor dimension, 0..tensor size-1
};

/// Splits `world` (collective over it) into data x pipeline x tensor groups of the given sizes,
/// whose product must be `world.size()`; see the file comment for the layout. Each group is a
/// sub-communicator (`communicator::split`) sharing `world`'s connections.
template <transport_policy X>
  requires splittable_transport<X>
grid<X> make_grid(communicator<X>& world, int data, int pipeline, int tensor) {
  if (data < 1 || pipeline < 1 || tensor < 1 || static_cast<long long>(data) * pipeline * tensor != world.size())
    throw error(errc::invalid_argument, "make_grid: data " + std::to_string(data) + " x pipeline " + std::to_string(pipeline) +
                                            " x tensor " + std::to_string(tensor) + " must equal the communicator's " +
                                            std::to_string(world.size()) + " ranks");
  const int r = world.rank();
  const int shard = r % tensor, replica = (r / tensor) % data, stage = r / (tensor * data);
  // Colors name the group, keys order it; the three splits run in the same order on every rank.
  auto t = world.split(stage * data + replica, shard);
  auto d = world.split(stage * tensor + shard, replica);
  auto p = world.split(replica * tensor + shard, stage);
  return grid<X>{std::move(d), std::move(p), std::move(t), replica, stage, shard};
}

}  // namespace gsync
