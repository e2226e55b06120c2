// Factories: ops with no tensor input (arange, empty, empty_strided, full, rand, randn, randperm,
// scalar_tensor: ops/factory/), made directly laid out over a mesh. There is no input to take the
// mesh or a layout from, so the caller names both; the engine runs no propagation: it takes the
// strategy of the op's rules whose outputs are the placements asked for, and each rank's kernel
// computes only its block (LocalContext::out_block: its shape and global offset), with no
// communication. Uneven shards follow torch.chunk (blocks of ceil(n / k), the last ones smaller or
// empty).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dispatch/dispatch.h"

namespace dtensor {

// The strategy of factory call `call` (no tensor inputs) whose every output is laid out as
// `placements` (one per mesh dim of the call; a negative Shard dim counts from the end of the
// output's dims): among the op's rules expanded to the call's mesh (rows with outputs only, plus
// the all-Replicate row the engine adds to every op), the one whose outputs are `placements`.
// `out_meta` is op.meta(call). Throws dtensor::Error naming the call (op, size, dtype, mesh), the
// placements asked and those the op accepts when none matches: a Partial (every rank makes the
// whole value, which the reduction would count once per rank), a Shard of a dim the output lacks,
// a weighted Shard, or a Shard the op cannot compute blockwise (randperm-like ops list what they
// take); also when `placements` has the wrong number of entries.
Strategy factory_strategy(const OpCall& call, const std::vector<TensorMeta>& out_meta, Placements placements);

// Calls factory op `name` (an ATen name; a bare name picks the overload whose schema takes the
// arguments, as call_op) with plain-value arguments (ints, floats, bools, a dtype by name such as
// "float64", int lists for sizes), its outputs laid out over `mesh` as `placements` (see
// factory_strategy). Every rank of the mesh calls it with the same arguments; ranks outside the
// mesh get empty blocks. Returns the outputs with global shapes and dtypes from the op's meta
// (e.g. full([5, 3], 2.5) is float32 [5, 3]; arange(0, 10, 3) int64 [4]). Throws dtensor::Error for
// an unknown op, an op that takes tensor inputs (use call_op), arguments the schema or the op's
// meta rejects (negative sizes, an element count past int64, arange's zero or wrong-signed step,
// an unsupported dtype: each naming the call) and placements the op does not accept.
std::vector<DTensor> call_factory(const std::string& name, const std::vector<IValue>& args,
                                  const std::vector<std::pair<std::string, IValue>>& kwargs, const MeshPtr& mesh,
                                  const Placements& placements);

// The bound call of factory op `name` on a mesh of shape `mesh_shape` (call_factory's binding step;
// the same errors for the op and its arguments).
OpCall bind_factory(const std::string& name, const std::vector<IValue>& args,
                    const std::vector<std::pair<std::string, IValue>>& kwargs, const Shape& mesh_shape);

}  // namespace dtensor
