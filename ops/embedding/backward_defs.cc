// Backward ops of the embedding family that autograd/ calls by their ATen names:
// embedding_dense_backward.
// Rules: ops/embedding/rules.cc; shared helpers: ops/common/backward_defs.h.
#include "kernels/cpu/backward.h"

#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void define_embedding_dense_backward(Registry& reg) {
  OpDef& op = reg.define(
      "embedding_dense_backward(Tensor grad_output, Tensor indices, int num_weights, int padding_idx=-1) -> Tensor",
      "embedding");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  // ATen's has scale_grad_by_freq after padding_idx (accepted: False).
  op.aten.aliases = {{"embedding_dense_backward", "embedding_backward"}};
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_index(c, 1, "indices");
    const Shape& g = c.tensor(0).shape;
    if (g.empty()) fail(c, "grad_output must be [*indices.shape, D], got a 0-d tensor");
    Shape want = c.tensor(1).shape;
    want.push_back(g.back());
    check_shape(c, 0, "grad_output ([*indices.shape, D])", want);
    const int64_t n = c.get_int("num_weights");
    if (n < 0) fail(c, absl::StrCat("num_weights ", n, " must be >= 0"));
    return std::vector<TensorMeta>{{{n, g.back()}, c.tensor(0).dtype}};
  };
  // Rows [row_start, row_start + rows) of the result: all of them, or this rank's row shard.
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    auto [shape, offset] = ctx.out_block(0);
    return one(kernels::embedding_dense_backward(in[0], in[1], c.get_int("num_weights"),
                                                 c.get_int("padding_idx"), offset[0], shape[0]));
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{4, 5, 6}, {4, 5}}, {T(0), T(1), I(11)}, {}, {DType::kFloat32, DType::kInt64}),
        sample({{9, 5}, {9}}, {T(0), T(1), I(7), I(2)}, {}, {DType::kFloat32, DType::kInt32})};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 1) return index_input(c.tensor(1), c.get_int("num_weights"), seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

}  // namespace

void define_embedding_backward_ops(Registry& reg) {
  define_embedding_dense_backward(reg);
}

DTENSOR_FAMILY_PART("embedding", kDefinitions, define_embedding_backward_ops);

}  // namespace dtensor::ops
