#include "ops/flops.h"

#include <algorithm>

#include "dtensor/core/error.h"

namespace dtensor {

double forward_flops(const OpCall& c, const std::vector<TensorMeta>& out) {
  const OpDef& op = c.op();
  const double on = out.empty() ? 0.0 : static_cast<double>(numel(out[0].shape));
  const double in0 = c.num_tensors() > 0 ? static_cast<double>(numel(c.tensor(0).shape)) : 0.0;
  switch (op.cost.cls) {
    case CostClass::kView:
    case CostClass::kCopy: return 0;
    case CostClass::kElementwise: return on;
    case CostClass::kTranscendental: return 8 * on;
    case CostClass::kContraction:
      DT_CHECK(op.cost.flops, "op '", op.name(), "' is a contraction without OpCost::flops");
      return op.cost.flops(c, out);
    case CostClass::kNormalization: return 5 * in0;
    case CostClass::kLoss: return 4 * in0;
    case CostClass::kWindow: {
      if (op.schema.index_of("kernel_size") < 0) return in0;
      double k = 1;
      for (int64_t x : c.get_int_list("kernel_size")) k *= static_cast<double>(x);
      return on * k;
    }
    case CostClass::kOnePass: return std::max(on, in0);
    case CostClass::kUnset: break;
  }
  DT_FAIL("op '", op.name(), "' has no cost class; set OpDef::cost where the op is defined ",
          "(docs/ADDING_AN_OP.md)");
}

}  // namespace dtensor
