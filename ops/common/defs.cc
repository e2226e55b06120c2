#include "ops/common/defs.h"

#include "dtensor/partial_split.h"
#include "ops/family.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include <mutex>

namespace dtensor::ops {

Sample sample(std::vector<Shape> shapes, std::vector<ArgValue> positional,
              std::vector<std::pair<std::string, ArgValue>> keyword, std::vector<DType> dtypes) {
  Sample s;
  for (size_t i = 0; i < shapes.size(); ++i)
    s.tensors.push_back({shapes[i], i < dtypes.size() ? dtypes[i] : DType::kFloat32});
  s.positional = std::move(positional);
  s.keyword = std::move(keyword);
  return s;
}

ArgValue T(int index) { return TensorRef{index}; }
ArgValue V(IValue value) { return value; }
ArgValue I(int64_t v) { return IValue(v); }
ArgValue L(std::vector<int64_t> v) { return IValue(std::move(v)); }

Tensor positive_input(const TensorMeta& m, uint64_t seed) {
  Tensor r = random_tensor(m.shape, DType::kFloat64, seed);
  return kernels::add(kernels::abs(r), Scalar(0.25)).to(m.dtype);
}

Tensor index_input(const TensorMeta& m, int64_t upper, uint64_t seed) {
  Tensor r = random_tensor(m.shape, DType::kFloat64, seed);  // in [-2, 2]
  Tensor t = Tensor::empty(m.shape, DType::kInt64);
  auto v = r.to_vector<double>();
  int64_t* p = t.data<int64_t>();
  for (size_t i = 0; i < v.size(); ++i)
    p[i] = static_cast<int64_t>((v[i] + 2.0) * 64.0 * 7919.0) % std::max<int64_t>(upper, 1);
  return t.to(m.dtype);
}

Tensor coarse_input(const TensorMeta& m, uint64_t seed, bool nans) {
  auto v = random_tensor(m.shape, DType::kFloat64, seed).to_vector<double>();
  auto u = random_tensor(m.shape, DType::kFloat64, seed ^ 0x5bd1e995).to_vector<double>();
  Tensor t = Tensor::empty(m.shape, DType::kFloat64);
  double* p = t.data<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    p[i] = std::round(v[i] * 2.0) / 2.0;
    if (nans && is_floating(m.dtype) && u[i] > 1.75) p[i] = std::nan("");
  }
  return t.to(m.dtype);
}

std::function<Tensor(int, const OpCall&, uint64_t)> positive_inputs(std::vector<int> positive) {
  return [positive](int i, const OpCall& c, uint64_t seed) {
    for (int p : positive)
      if (p == i) return positive_input(c.tensor(i), seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

OpCost cost(CostClass cls, Keeps keeps) {
  OpCost c;
  c.cls = cls;
  c.saves_inputs = keeps == Keeps::kInputs || keeps == Keeps::kInputsAndOutput;
  c.saves_output = keeps == Keeps::kOutput || keeps == Keeps::kInputsAndOutput;
  return c;
}

OpCost contraction_cost(int factor, const char* bias) {
  OpCost c = cost(CostClass::kContraction);
  c.flops = [factor, bias](const OpCall& call, const std::vector<TensorMeta>& out) {
    const double on = out.empty() ? 0.0 : static_cast<double>(numel(out[0].shape));
    const Shape& f = call.tensor(factor).shape;
    const double k = f.empty() ? 1.0 : static_cast<double>(f.back());
    return 2 * on * k + (bias && call.tensor_index(bias) >= 0 ? on : 0.0);
  };
  return c;
}

void refuse_complex_unless_declared(OpDef& op) {
  if (op.complex || !op.meta) return;
  op.meta = [inner = std::move(op.meta)](const OpCall& c) {
    auto refuse = [&](const char* what, DType t) {
      fail(c, absl::StrCat("this op takes no complex tensors (", what, " is ", dtype_name(t),
                           "); accepted dtypes: real and bool (ops taking complex declare OpDef::complex)"));
    };
    for (int t = 0; t < c.num_tensors(); ++t)
      if (is_complex(c.tensor(t).dtype)) refuse(absl::StrCat("tensor input ", t).c_str(), c.tensor(t).dtype);
    std::vector<TensorMeta> out = inner(c);
    for (size_t i = 0; i < out.size(); ++i)
      if (is_complex(out[i].dtype)) refuse(absl::StrCat("output ", i).c_str(), out[i].dtype);
    return out;
  };
}

void define_all_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    Registry& r = Registry::get();
    run_family_parts(FamilyPart::kDefinitions, r);
    run_family_parts(FamilyPart::kSteps, r);
    for (const std::string& name : r.names()) refuse_complex_unless_declared(r.mutable_find(name));
  });
}

void fail(const OpCall& c, const std::string& what) { DT_FAIL(c.str(), ": ", what); }

}  // namespace dtensor::ops
