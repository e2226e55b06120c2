// Building a rank's local block of a known global tensor under given placements, with Partial values
// split adversarially among ranks (uneven parts of both signs for sum/avg; for max/min one rank holds
// the value and the others smaller/larger ones). Used by `dtensor explain --run`, the ground-truth
// validator and the redistribution property tests, so that a wrong Partial rule cannot pass by luck.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/placement.h"

namespace dtensor {

// The local block at mesh coordinate `coord` of `global` laid out by `placements` (normalized) over
// a mesh of `mesh_shape`. Reducing the blocks over the Partial mesh dims gives back `global`: exactly
// for max/min and for integers, within float rounding for sum/avg of floats. Deterministic in `seed`.
// Integer avg and bool sum/avg keep the value on every rank / on coordinate 0 (splits would round).
Tensor adversarial_local_block(const Tensor& global, const Placements& placements,
                               const Shape& mesh_shape, const std::vector<int64_t>& coord,
                               uint64_t seed);

// Deterministic random global data: floats in [-2, 2] on a 1/64 grid (1/4 for bfloat16 and float16,
// so that adversarial Partial parts stay exact), integers in [-5, 5], bools at random.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed);

}  // namespace dtensor
