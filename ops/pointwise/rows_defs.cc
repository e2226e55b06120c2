// The OpDefs of the pointwise rows (ops/pointwise/rows.h), one per row: schema from the name, the
// output dtype from the row's dtype rule, the local kernel of its table, samples in the row's domain
// and of the dtypes it accepts, and the cost class. Rules: ops/pointwise/rows_rules.cc; backward:
// ops/pointwise/rows_backward.cc.
#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"
#include "ops/pointwise/row_params.h"

namespace dtensor::ops {
namespace {

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// Sample dtypes a rule accepts: the float rows see float32, the others int64 too (and bool for the
// integral rows, whose bool results keep the low bit).
std::vector<DType> sample_dtypes(RowDTypes rule) {
  switch (rule) {
    case RowDTypes::kFloat:
    case RowDTypes::kFloatOnly:
      return {DType::kFloat32};
    case RowDTypes::kIntegral:  // uint8 too: shifts and bitwise ops wrap at 8 bits
      return {DType::kInt64, DType::kBool, DType::kUInt8};
    default:
      return {DType::kFloat32, DType::kInt64};
  }
}

// A divisor without zeros: integers 0 become 3; floats are kept away from 0 ([0.25, 2.25]).
Tensor nonzero_input(const TensorMeta& m, uint64_t seed) {
  if (is_floating(m.dtype)) return positive_input(m, seed);
  Tensor r = random_tensor(m.shape, DType::kInt64, seed);
  return kernels::where(kernels::eq(r, Scalar(0)), Scalar(3).to_tensor(), r).to(m.dtype);
}

// Inputs in the row's domain, from random_tensor's [-2, 2].
Tensor domain_input(RowDomain domain, const TensorMeta& m, uint64_t seed) {
  if (domain == RowDomain::kNonzero) return nonzero_input(m, seed);  // integers too
  if (!is_floating(m.dtype)) return random_tensor(m.shape, m.dtype, seed);
  const Tensor r = random_tensor(m.shape, DType::kFloat64, seed);
  switch (domain) {
    case RowDomain::kReal:
      return r.to(m.dtype);
    case RowDomain::kPositive:
      return positive_input(m, seed);
    case RowDomain::kUnit:
      return kernels::mul(r, Scalar(0.45)).to(m.dtype);
    case RowDomain::kAboveOne:
      return kernels::add(kernels::abs(r), Scalar(1.1)).to(m.dtype);
    case RowDomain::kNonzero:
      break;  // above
  }
  return r.to(m.dtype);
}

void define_unary_row(Registry& reg, UnaryRow row, CostClass cls) {
  const UnaryRowInfo& info = row_info(row);
  OpDef& op = reg.define(std::string(info.name) + "(Tensor self) -> Tensor", "pointwise");
  if (*info.onnx) op.onnx = {info.onnx};
  op.cost = cost(cls);
  op.meta = [row](const OpCall& c) {
    return guard(c, [&] {
      return std::vector<TensorMeta>{{c.tensor(0).shape, kernels::row_dtype(row, c.tensor(0).dtype, c.tensor(0).shape)}};
    });
  };
  op.kernel = [row](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
    return one(kernels::pointwise_unary_row(row, in[0]));
  };
  const std::vector<DType> dtypes = sample_dtypes(info.dtypes);
  op.samples = [dtypes] {
    std::vector<Sample> s;
    for (DType d : dtypes) {
      s.push_back(sample({{6, 5}}, {T(0)}, {}, {d}));
      s.push_back(sample({{3, 7, 2}}, {T(0)}, {}, {d}));
    }
    return s;
  };
  const RowDomain domain = info.domain;
  if (domain != RowDomain::kReal)
    op.make_input = [domain](int i, const OpCall& c, uint64_t seed) { return domain_input(domain, c.tensor(i), seed); };
}

void define_binary_row(Registry& reg, BinaryRow row, CostClass cls) {
  const BinaryRowInfo& info = row_info(row);
  // ATen's name of the second argument, which torch.export's import binds by: `other` in every
  // binary row but heaviside (python tests check each schema against ATen's).
  const char* second = std::string_view(info.name) == "heaviside" ? "values" : "other";
  OpDef& op = reg.define(absl::StrCat(info.name, "(Tensor self, Tensor ", second, ") -> Tensor"), "pointwise");
  if (*info.onnx) op.onnx = {info.onnx};
  // ATen's operator forms of the bitwise rows (x | y is __or__.Tensor): bitwise_or -> __or__,
  // bitwise_left_shift -> __lshift__.
  if (const std::string_view n = info.name; n.substr(0, 8) == "bitwise_") {
    std::string_view op_name = n.substr(8);
    if (op_name == "left_shift") op_name = "lshift";
    if (op_name == "right_shift") op_name = "rshift";
    op.aten.aliases = {AtenAlias{"__" + std::string(op_name) + "__.Tensor", ""}};
  }
  op.cost = cost(cls);
  op.meta = [row](const OpCall& c) {
    return guard(c, [&] {
      const TensorMeta &a = c.tensor(0), &b = c.tensor(1);
      return std::vector<TensorMeta>{{kernels::broadcast_shapes(a.shape, b.shape),
                                      kernels::row_dtype(row, a.dtype, a.shape, b.dtype, b.shape)}};
    });
  };
  op.kernel = [row](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
    return one(kernels::pointwise_binary_row(row, in[0], in[1]));
  };
  const std::vector<DType> dtypes = sample_dtypes(info.dtypes);
  op.samples = [dtypes] {
    std::vector<Sample> s;
    for (DType d : dtypes) {
      s.push_back(sample({{6, 5}, {6, 5}}, {T(0), T(1)}, {}, {d, d}));
      s.push_back(sample({{4, 7, 3}, {7, 1}}, {T(0), T(1)}, {}, {d, d}));
      s.push_back(sample({{5}, {3, 5}}, {T(0), T(1)}, {}, {d, d}));
    }
    return s;
  };
  const RowDomain other = info.other;
  if (other != RowDomain::kReal)
    op.make_input = [other](int i, const OpCall& c, uint64_t seed) {
      return i == 0 ? random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed) : domain_input(other, c.tensor(i), seed);
    };
}

}  // namespace

RowParams row_params(const OpCall& c) {
  RowParams p;
  const std::vector<ArgDef>& args = c.op().schema.args;
  for (size_t k = 1; k < args.size() && k <= 3; ++k) {
    const IValue& v = c.value(args[k].name);
    double& out = p.p[k - 1];
    if (is_none(v)) {
      out = std::nan("");
    } else if (const auto* i = std::get_if<int64_t>(&v)) {
      out = static_cast<double>(*i);
    } else {
      out = c.get_double(args[k].name);
      p.floating[k - 1] = true;
      DT_CHECK(!(args[k].optional && std::isnan(out)), c.name(), ": ", args[k].name,
               "=nan is not supported (dtensor passes None as NaN to the kernel; give None or a number)");
    }
  }
  return p;
}

namespace {

void define_param_row(Registry& reg, ParamRow row, CostClass cls, std::vector<double> sample_values) {
  const ParamRowInfo& info = row_info(row);
  OpDef& op = reg.define(absl::StrCat(info.name, "(Tensor self, ", info.params, ") -> Tensor"), "pointwise");
  op.cost = cost(cls);
  op.meta = [row](const OpCall& c) {
    return guard(c, [&] {
      return std::vector<TensorMeta>{
          {c.tensor(0).shape, kernels::row_dtype(row, c.tensor(0).dtype, c.tensor(0).shape, row_params(c))}};
    });
  };
  op.kernel = [row](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return one(kernels::pointwise_param_row(row, in[0], row_params(c)));
  };
  std::vector<std::string> names;
  for (size_t k = 1; k < op.schema.args.size(); ++k) names.push_back(op.schema.args[k].name);
  DT_CHECK(sample_values.size() == names.size(), "internal: row ", info.name, " has ", sample_values.size(),
           " sample values for ", names.size(), " parameters");
  const std::vector<DType> dtypes = sample_dtypes(info.dtypes);
  op.samples = [dtypes, names, sample_values] {
    std::vector<std::pair<std::string, ArgValue>> given;
    for (size_t k = 0; k < names.size(); ++k) given.emplace_back(names[k], V(sample_values[k]));
    // The first parameter alone (the others at their defaults: None for clamp's max).
    const std::vector<std::pair<std::string, ArgValue>> first(given.begin(), given.begin() + 1);
    std::vector<Sample> s;
    for (DType d : dtypes) {
      s.push_back(sample({{6, 5}}, {T(0)}, given, {d}));
      s.push_back(sample({{3, 7, 2}}, {T(0)}, first, {d}));
    }
    return s;
  };
}

}  // namespace

void define_pointwise_rows(Registry& reg) {
#define DT_UNARY_DEF(name, onnx, dtypes, cost, domain, order, f, grad) \
  define_unary_row(reg, UnaryRow::name, CostClass::k##cost);
  DT_POINTWISE_UNARY_ROWS(DT_UNARY_DEF)
#undef DT_UNARY_DEF
#define DT_BINARY_DEF(name, onnx, dtypes, cost, other, f, grad_a, grad_b) \
  define_binary_row(reg, BinaryRow::name, CostClass::k##cost);
  DT_POINTWISE_BINARY_ROWS(DT_BINARY_DEF)
#undef DT_BINARY_DEF
#define DT_ROW_VALUES(...) std::vector<double>{__VA_ARGS__}
#define DT_PARAM_DEF(name, params, dtypes, cost, order, sample, valid, f, grad) \
  define_param_row(reg, ParamRow::name, CostClass::k##cost, DT_ROW_VALUES sample);
  DT_POINTWISE_PARAM_ROWS(DT_PARAM_DEF)
#undef DT_PARAM_DEF
#undef DT_ROW_VALUES
}

DTENSOR_FAMILY_PART("pointwise", kDefinitions, define_pointwise_rows);

}  // namespace dtensor::ops
