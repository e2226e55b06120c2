// The arguments grid_sampler_2d and its backward share (defs.cc, backward_defs.cc): the modes
// and the check of input (tensor `in`) and grid (`in + 1`), whose errors name the call.
#pragma once

#include <array>
#include <vector>

#include "kernels/cpu/grid_sampler.h"
#include "ops/common/defs.h"

namespace dtensor::ops {

struct Sampling {
  int64_t interpolation, padding;
  bool align_corners;
};

inline Sampling sampling(const OpCall& c) {
  return {c.get_int("interpolation_mode"), c.get_int("padding_mode"), c.get_bool("align_corners")};
}

// The output shape [N, C, Ho, Wo] of sampling input by grid, after kernels::check_grid_sampler_2d.
inline Shape sampled_shape(const OpCall& c, int in) {
  const TensorMeta &x = c.tensor(in), &g = c.tensor(in + 1);
  const Sampling s = sampling(c);
  guard(c, [&] {
    kernels::check_grid_sampler_2d(x.shape, x.dtype, g.shape, g.dtype, s.interpolation, s.padding);
    return 0;
  });
  return {x.shape[0], x.shape[1], g.shape[1], g.shape[2]};
}

// The validator's (interpolation, padding, align_corners) triples: every mode and padding.
inline const std::vector<std::array<int64_t, 3>>& sample_modes() {
  static const std::vector<std::array<int64_t, 3>> m = {{0, 0, 0}, {0, 1, 1}, {0, 2, 0}, {1, 2, 1},
                                                        {1, 0, 0}, {2, 0, 0}, {2, 1, 1}, {2, 2, 0}};
  return m;
}

}  // namespace dtensor::ops
