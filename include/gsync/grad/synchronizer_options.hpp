#pragma once
/// \file
/// The settings of a gradient synchronizer (grad/synchronizer.hpp): bucket sizes, the element type
/// buckets travel in, gradient accumulation, averaging, the non-finite policy and loss scaling.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "gsync/grad/loss_scaler.hpp"
#include "gsync/grad/nonfinite.hpp"

namespace gsync::grad {

/// Element type in which buckets travel.
enum class wire_dtype {
  native,    ///< the gradients' own type (no cast)
  float32,   ///< float32
  bfloat16,  ///< bfloat16 (8 exponent bits: the range of float32, 8 significant bits)
  float16,   ///< IEEE float16 (values beyond +-65504 become Inf: use with a loss scaler in mind)
};

/// Settings of a synchronizer.
struct synchronizer_options {
  std::size_t bucket_bytes = std::size_t{25} << 20;       ///< cap of a bucket (gradient bytes)
  std::size_t first_bucket_bytes = std::size_t{1} << 20;  ///< cap of the first bucket of each type
  wire_dtype wire = wire_dtype::native;                   ///< element type on the wire
  std::uint32_t accumulation_steps = 1;                   ///< steps per synchronization (>= 1)
  bool average = true;                ///< true: average over ranks (op::avg); false: sum
  bool average_accumulation = true;   ///< divide by accumulation_steps in the unpack pass
  /// What a non-finite synchronized gradient does; must be `report` when `loss_scaling` is set.
  nonfinite_action on_nonfinite = nonfinite_action::throw_error;
  std::optional<loss_scaler_options> loss_scaling;        ///< dynamic loss scaling, off by default
};

}  // namespace gsync::grad
