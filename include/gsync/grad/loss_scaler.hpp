#pragma once
/// \file
/// Dynamic loss scaling for mixed-precision training.
///
/// The loss is multiplied by `scale()` before backward so that small float16 gradients do not flush to
/// zero; the gradients are divided by it again before the optimizer step (the synchronizer fuses that
/// division into its unpack pass). When any gradient overflowed (a non-finite value), the step is skipped
/// and the scale is multiplied by `backoff_factor` (never below `min_scale`); after `growth_interval`
/// consecutive good steps it is multiplied by `growth_factor` (never above `max_scale`).
///
/// Agreement across ranks: the scaler itself never communicates. It must be fed a verdict that is the
/// same on every rank; the synchronizer feeds it the verdict of its fused non-finite check on the
/// *synchronized* gradients, which are bitwise identical on every rank (see nonfinite.hpp for why a
/// non-finite value on any one rank shows up on all of them). Every rank therefore skips the same steps
/// and holds the same scale, with no extra round trip.

#include <cmath>
#include <cstdint>
#include <string>

#include "gsync/core/error.hpp"

namespace gsync::grad {

/// Settings of a dynamic loss scaler.
struct loss_scaler_options {
  float init_scale = 65536.0f;     ///< scale at the start (2^16)
  float growth_factor = 2.0f;      ///< multiplier after `growth_interval` good steps (> 1)
  float backoff_factor = 0.5f;     ///< multiplier after an overflow (in (0, 1))
  std::uint32_t growth_interval = 2000;  ///< consecutive good steps before growing (>= 1)
  float min_scale = 1.0f;          ///< the scale never goes below this (> 0)
  float max_scale = 16777216.0f;   ///< the scale never goes above this (2^24; >= min_scale)
};

/// A dynamic loss scaler (see the file comment). Not thread-safe; one per training loop.
class loss_scaler {
 public:
  /// Creates a scaler; throws errc::invalid_argument for settings that cannot work (and says which).
  explicit loss_scaler(const loss_scaler_options& o = {}) : o_(o), scale_(o.init_scale) {
    auto bad = [](const std::string& what) { throw error(errc::invalid_argument, "loss_scaler: " + what); };
    if (!(o.growth_factor > 1.0f) || !std::isfinite(o.growth_factor)) bad("growth_factor must be a finite value > 1");
    if (!(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f)) bad("backoff_factor must lie in (0, 1)");
    if (o.growth_interval == 0) bad("growth_interval must be at least 1");
    if (!(o.min_scale > 0.0f) || !std::isfinite(o.min_scale)) bad("min_scale must be a finite value > 0");
    if (!(o.max_scale >= o.min_scale) || !std::isfinite(o.max_scale)) bad("max_scale must be finite and >= min_scale");
    if (!(o.init_scale >= o.min_scale && o.init_scale <= o.max_scale))
      bad("init_scale " + std::to_string(o.init_scale) + " lies outside [min_scale, max_scale]");
  }

  /// The factor to multiply the loss by before backward.
  float scale() const noexcept { return scale_; }
  /// 1 / scale(): the factor that brings scaled gradients back to their true value.
  float inv_scale() const noexcept { return 1.0f / scale_; }
  /// Consecutive good steps since the last growth or backoff.
  std::uint32_t good_steps() const noexcept { return good_; }
  /// Steps skipped so far because of an overflow.
  std::uint64_t skipped_steps() const noexcept { return skipped_; }
  /// The settings.
  const loss_scaler_options& options() const noexcept { return o_; }

  /// Records the outcome of one step and adapts the scale. `found_nonfinite` must be the same on every
  /// rank (it is when it comes from the synchronized gradients). Returns true when the optimizer step
  /// should be applied, false when it must be skipped.
  bool update(bool found_nonfinite) noexcept {
    if (found_nonfinite) {
      scale_ = clamp(scale_ * o_.backoff_factor);
      good_ = 0;
      ++skipped_;
      return false;
    }
    if (++good_ >= o_.growth_interval) {
      scale_ = clamp(scale_ * o_.growth_factor);
      good_ = 0;
    }
    return true;
  }

 private:
  float clamp(float s) const noexcept { return s < o_.min_scale ? o_.min_scale : (s > o_.max_scale ? o_.max_scale : s); }

  loss_scaler_options o_;
  float scale_;
  std::uint32_t good_ = 0;
  std::uint64_t skipped_ = 0;
};

}  // namespace gsync::grad
