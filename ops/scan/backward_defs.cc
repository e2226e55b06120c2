// Backward ops of the scan family that autograd/ calls by their ATen names: cummaxmin_backward,
// cumprod_backward and logcumsumexp_backward.
// Rules: ops/scan/rules.cc; shared helpers: ops/common/backward_defs.h.
#include "kernels/cpu/scan.h"

#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// Scan backward ops: tensors grad (0), input (1), and indices / output / result (2).

enum class ScanGrad { kCumMaxMin, kCumProd, kLogCumSumExp };

void define_scan_backward(Registry& reg, ScanGrad s) {
  std::string schema;
  switch (s) {
    case ScanGrad::kCumMaxMin:
      schema = "cummaxmin_backward(Tensor grad, Tensor input, Tensor indices, int dim) -> Tensor";
      break;
    case ScanGrad::kCumProd:
      schema = "cumprod_backward(Tensor grad, Tensor input, int dim, Tensor output) -> Tensor";
      break;
    case ScanGrad::kLogCumSumExp:
      schema = "logcumsumexp_backward(Tensor grad, Tensor self, Tensor result, int dim) -> Tensor";
      break;
  }
  OpDef& op = reg.define(schema, "scan");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  if (s == ScanGrad::kLogCumSumExp) op.aten.not_aten = "ATen has a derivative formula, not an op";
  op.no_backward = kNoDoubleBackward;
  op.meta = [s](const OpCall& c) {
    dim_arg(c, std::max<int64_t>(rank_of(c, 1), 1));
    check_floating(c, 0, "grad");
    const Shape& x = c.tensor(1).shape;
    check_shape(c, 0, "grad (the input's shape)", x);
    check_shape(c, 2, s == ScanGrad::kCumMaxMin ? "indices" : "the forward result", x);
    if (s == ScanGrad::kCumMaxMin) check_index(c, 2, "indices");
    else {
      check_floating(c, 1, "input");
      check_floating(c, 2, "the forward result");
    }
    DType dt = is_floating(c.tensor(1).dtype) ? c.tensor(1).dtype : c.tensor(0).dtype;
    return std::vector<TensorMeta>{{x, dt}};
  };
  op.kernel = guarded([s](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const int64_t d = c.get_int("dim");
    const DType dt = ctx.out_meta[0].dtype;
    switch (s) {
      case ScanGrad::kCumMaxMin: return one(kernels::cummaxmin_backward(in[0], in[2], in[1].sizes(), d).to(dt));
      case ScanGrad::kCumProd: return one(kernels::cumprod_backward(in[0], in[1], in[2], d).to(dt));
      case ScanGrad::kLogCumSumExp: return one(kernels::logcumsumexp_backward(in[0], in[1], in[2], d).to(dt));
    }
    return std::vector<Tensor>{};
  });
  op.samples = [s] {
    std::vector<DType> dt{DType::kFloat32, DType::kFloat32, s == ScanGrad::kCumMaxMin ? DType::kInt64 : DType::kFloat32};
    // cumprod_backward and logcumsumexp_backward take dim before / after the third tensor.
    auto args = [s](int64_t dim) {
      if (s == ScanGrad::kCumProd) return std::vector<ArgValue>{T(0), T(1), I(dim), T(2)};
      return std::vector<ArgValue>{T(0), T(1), T(2), I(dim)};
    };
    return std::vector<Sample>{sample({{7, 5}, {7, 5}, {7, 5}}, args(0), {}, dt),
                               sample({{4, 9}, {4, 9}, {4, 9}}, args(1), {}, dt),
                               sample({{3, 5, 4}, {3, 5, 4}, {3, 5, 4}}, args(-2), {}, dt)};
  };
  // input from a fixed seed, and the forward's result (or indices) on it.
  op.make_input = [s](int i, const OpCall& c, uint64_t seed) {
    if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
    const TensorMeta& m = c.tensor(1);
    const int64_t d = c.get_int("dim");
    Tensor x;
    switch (s) {
      case ScanGrad::kCumMaxMin: x = coarse_input(m, kBackwardFixedSeed, true); break;
      case ScanGrad::kCumProd: {  // values near 1 (and one exact zero) keep products accurate
        Tensor r = random_tensor(m.shape, DType::kFloat64, kBackwardFixedSeed);
        x = kernels::add(kernels::mul(r, Scalar(0.25)), Scalar(1.0));
        if (x.numel() > 3) x.contiguous().reshape({-1}).select(0, 3).fill_(0.0);
        x = x.to(m.dtype);
        break;
      }
      case ScanGrad::kLogCumSumExp: x = random_tensor(m.shape, m.dtype, kBackwardFixedSeed); break;
    }
    if (i == 1) return x;
    switch (s) {
      case ScanGrad::kCumMaxMin: return kernels::cummax(x, d).second;
      case ScanGrad::kCumProd: return kernels::cumprod(x, d);
      case ScanGrad::kLogCumSumExp: return kernels::logcumsumexp(x, d);
    }
    return x;
  };
}

}  // namespace

void define_scan_backward_ops(Registry& reg) {
  define_scan_backward(reg, ScanGrad::kCumMaxMin);
  define_scan_backward(reg, ScanGrad::kCumProd);
  define_scan_backward(reg, ScanGrad::kLogCumSumExp);
}

DTENSOR_FAMILY_PART("scan", kDefinitions, define_scan_backward_ops);

}  // namespace dtensor::ops
