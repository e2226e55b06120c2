// Running one strategy of an op on every coordinate of a mesh in one thread, and assembling the
// global outputs from the local blocks: the ground-truth validator's execution model. Shard dims
// tile, Partial dims combine with their op, Replicate dims must agree (checked).
#pragma once

#include <string>
#include <vector>

#include "ops/registry.h"

namespace dtensor::testing {

// Sample `s` of `op` bound on `mesh` with every tensor replicated.
OpCall bind_on(const OpDef& op, const Sample& s, const Shape& mesh);

// Global inputs for `call`: each tensor from the op's make_input (valid values) or random_tensor,
// seeded by `seed` and its index.
std::vector<Tensor> make_globals(const OpCall& call, uint64_t seed);

// The mesh coordinate of rank `flat` (row-major).
std::vector<int64_t> coord_of(int64_t flat, const Shape& mesh);

// What the rank at `coord` runs under `strategy`: its adversarial input blocks
// (dtensor/partial_split.h) and its LocalContext. `strategy` must outlive the context.
struct RankInputs {
  std::vector<Tensor> blocks;
  LocalContext ctx;
};
RankInputs rank_inputs(const OpCall& call, const Strategy& strategy, const std::vector<TensorMeta>& out_meta,
                       const std::vector<Tensor>& globals, const std::vector<int64_t>& coord, uint64_t seed);

// The global tensor that per-coordinate `blocks` (row-major over mesh coordinates) stand for under
// `placements`. Throws dtensor::Error if a block has the wrong shape or replicas disagree. `scale`
// (if given) receives, per element, the sum of |block| over the blocks that combine into it: the
// magnitude that rounding errors of the pieces scale with.
Tensor assemble(const std::vector<Tensor>& blocks, const Placements& placements, const Shape& global,
                DType dtype, const Shape& mesh_shape, Tensor* scale = nullptr);

struct Simulated {
  std::vector<Tensor> outputs;
  std::vector<Tensor> scales;  // float64, per output (see assemble)
};

// Runs `strategy` of `call` with inputs `globals` laid out adversarially (dtensor/partial_split.h) and
// returns the assembled outputs. Throws what the kernel or assembly throws. Strategies with their own
// distributed step are not supported here (they need a process group).
Simulated simulate(const OpCall& call, const Strategy& strategy,
                             const std::vector<TensorMeta>& out_meta, const std::vector<Tensor>& globals,
                             uint64_t seed);

// Compares with the single-device result: exact for integers/bools; for floats
// |got - want| <= tol(dtype) * (|want| + scale + 1), scale from the simulation (rounding of Partial
// pieces grows with their magnitude). Empty string when equal, else a description.
std::string compare(const Simulated& got, const std::vector<Tensor>& want);

}  // namespace dtensor::testing
