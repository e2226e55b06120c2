// embedding(weight[V, D], indices[...]) -> [..., D]. When this rank's weight block holds only some
// rows (row-wise sharding), it looks up the rows it has and gives zeros for the others: the pieces
// sum to the full lookup (a masked Partial).
#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {

void define_embedding_ops(Registry& reg) {
  OpDef& op = reg.define(
      "embedding(Tensor weight, Tensor indices, int padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
      "embedding");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a vocabulary shard looks up the ids in its range only
  op.meta = [](const OpCall& c) {
    const Shape& w = c.tensor(0).shape;
    DType it = c.tensor(1).dtype;
    if (w.size() != 2) fail(c, "weight must be 2-d [num_embeddings, embedding_dim]");
    if (it != DType::kInt64 && it != DType::kInt32) fail(c, "indices must be int64 or int32");
    Shape out = c.tensor(1).shape;
    out.push_back(w[1]);
    return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    auto [shape, offset] = ctx.in_block(c, 0);
    if (shape[0] == c.tensor(0).shape[0]) return std::vector<Tensor>{kernels::embedding(in[0], in[1])};
    return std::vector<Tensor>{kernels::embedding_masked(in[0], in[1], offset[0], offset[0] + shape[0])};
  };
  op.samples = [] {
    return std::vector<Sample>{sample({{11, 6}, {4, 5}}, {T(0), T(1)}, {}, {DType::kFloat32, DType::kInt64}),
                               sample({{7, 5}, {9}}, {T(0), T(1)}, {}, {DType::kFloat32, DType::kInt32})};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 1) return index_input(c.tensor(1), c.tensor(0).shape[0], seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

DTENSOR_FAMILY_PART("embedding", kDefinitions, define_embedding_ops);

}  // namespace dtensor::ops
