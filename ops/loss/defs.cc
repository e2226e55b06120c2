// nll_loss and cross_entropy with torch semantics (kernels/cpu/loss.h); reduction is a string here
// ('mean', 'sum', 'none') rather than ATen's enum int.
#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

MetaFn loss_meta() {
  return [](const OpCall& c) {
    const Shape& x = c.tensor(0).shape;
    const Shape& t = c.tensor(1).shape;
    if (!is_floating(c.tensor(0).dtype)) fail(c, "input must be floating point");
    if (c.tensor(1).dtype != DType::kInt64 && c.tensor(1).dtype != DType::kInt32)
      fail(c, "target must hold class indices (int64 or int32)");
    bool ok = (x.size() == 2 && t.size() == 1 && t[0] == x[0]) || (x.size() == 1 && t.empty());
    if (!ok) fail(c, "accepted: input [N, C] with target [N], or input [C] with target []");
    std::string red = c.get_str("reduction");
    if (red != "mean" && red != "sum" && red != "none")
      fail(c, "reduction must be 'mean', 'sum' or 'none'");
    Shape out = red == "none" && x.size() == 2 ? Shape{x[0]} : Shape{};
    return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
  };
}

// Targets are class indices below C; class weights are positive.
Tensor loss_input(int i, const OpCall& c, uint64_t seed) {
  if (i == 1) return index_input(c.tensor(1), c.tensor(0).shape.back(), seed);
  if (i == 2) return positive_input(c.tensor(2), seed);
  return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
}

std::optional<Tensor> weight(const std::vector<Tensor>& in, const OpCall& c) {
  if (!c.has("weight")) return std::nullopt;
  return in[c.tensor_index("weight")];
}

std::vector<Sample> loss_samples() {
  std::vector<Sample> out;
  for (const char* red : {"mean", "sum", "none"}) {
    out.push_back(sample({{7, 5}, {7}}, {T(0), T(1)}, {{"reduction", V(std::string(red))}},
                         {DType::kFloat32, DType::kInt64}));
  }
  out.push_back(sample({{6, 4}, {6}, {4}}, {T(0), T(1), T(2)}, {{"reduction", V(std::string("sum"))}},
                       {DType::kFloat32, DType::kInt64, DType::kFloat32}));
  return out;
}

}  // namespace

void define_loss_ops(Registry& reg) {
  {
    OpDef& op = reg.define(
        "nll_loss(Tensor self, Tensor target, Tensor? weight=None, str reduction='mean', int ignore_index=-100) -> Tensor",
        "loss");
    op.cost = cost(CostClass::kLoss);
    op.meta = loss_meta();
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{kernels::nll_loss(in[0], in[1], weight(in, c), c.get_str("reduction"),
                                                   c.get_int("ignore_index"))};
    };
    op.samples = [] { return loss_samples(); };
    op.make_input = loss_input;
  }
  {
    OpDef& op = reg.define(
        "cross_entropy(Tensor self, Tensor target, Tensor? weight=None, str reduction='mean', int ignore_index=-100, float label_smoothing=0.0) -> Tensor",
        "loss");
    op.cost = cost(CostClass::kLoss);
    op.aten.not_aten =
        "F.cross_entropy's ATen op is cross_entropy_loss (CompositeImplicit: dispatch sees log_softmax and "
        "nll_loss_forward, which the bridge runs)";
    op.meta = loss_meta();
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{kernels::cross_entropy(in[0], in[1], weight(in, c), c.get_str("reduction"),
                                                        c.get_int("ignore_index"),
                                                        c.get_double("label_smoothing"))};
    };
    op.samples = [] { return loss_samples(); };
    op.make_input = loss_input;
  }
}

DTENSOR_FAMILY_PART("loss", kDefinitions, define_loss_ops);

}  // namespace dtensor::ops
