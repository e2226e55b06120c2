// Single-mesh-dim rules of grid_sampler_2d and its backward (defs.cc, backward_defs.cc). Each
// output element (n, c, ho, wo) reads input[n, c] at the position grid[n, ho, wo] names, anywhere in
// H x W, so input's H and W stay whole; the batch, the channels and the output positions split.
//   grid_sampler_2d(input, grid): the batch [S(0); S(0), S(0)]; channels [S(1); S(1), R] (grid has
//     no C); output positions [S(2); R, S(1)] and [S(3); R, S(2)]; linear in input, so
//     [P; P, R] for sum and avg (max and min do not pass: the weights mix pixels, and zeros
//     padding adds a 0).
//   grid_sampler_2d_backward(grad_output, input, grid) -> (grad_input, grad_grid): the batch
//     [S(0), S(0); S(0), S(0), S(0)]; channels [S(1), P; S(1), S(1), R] (grad_grid sums over C);
//     output positions [P, S(1); S(2), R, S(1)] and [P, S(2); S(3), R, S(2)] (each rank scatters its
//     positions' gradients into the whole image, the overlaps summed over ranks, where PyTorch
//     DTensor would gather the grid); both linear in grad_output: [P, P; P, R, R]; grad_grid linear
//     in input and grad_input independent of it: [R, P; R, P, R] (sum and avg alike).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_sampler_rules(Registry& reg) {
  reg.mutable_find("grid_sampler_2d").rules = [](const OpCall&, const OutMeta&) {
    RuleList rules{row({Shard(0)}, {Shard(0), Shard(0)}), row({Shard(1)}, {Shard(1), Replicate()}),
                   row({Shard(2)}, {Replicate(), Shard(1)}), row({Shard(3)}, {Replicate(), Shard(2)})};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) rules.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
    return rules;
  };
  reg.mutable_find("grid_sampler_2d_backward").rules = [](const OpCall&, const OutMeta&) {
    const Placement R = Replicate();
    RuleList rules{row({Shard(0), Shard(0)}, {Shard(0), Shard(0), Shard(0)}),
                   row({Shard(1), Partial()}, {Shard(1), Shard(1), R}),
                   row({Partial(), Shard(1)}, {Shard(2), R, Shard(1)}),
                   row({Partial(), Shard(2)}, {Shard(3), R, Shard(2)})};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      rules.push_back(row({Partial(op), Partial(op)}, {Partial(op), R, R}));
      rules.push_back(row({R, Partial(op)}, {R, Partial(op), R}));
    }
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("sampler", kRules, register_sampler_rules);

}  // namespace dtensor::strategies
