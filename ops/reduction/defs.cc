// Reductions over a list of dims (empty or None: all dims). Under a strategy that shards a reduced
// dim, mean divides the local sum by the global count (so P(sum) of the pieces is exact on uneven
// shards) and amax/amin of an empty local block give the op's identity (-inf / +inf).
#include <limits>

#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::vector<int64_t> dims_of(const OpCall& c) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  std::vector<int64_t> dims = c.get_int_list("dim");
  std::vector<bool> seen(std::max<int64_t>(rank, 1), false);  // a 0-d tensor takes dim 0 or -1
  for (int64_t& d : dims) {
    d = guard(c, [&] { return wrap_dim(d, rank, "dim"); });
    if (seen[d]) fail(c, absl::StrCat("dim ", d, " appears more than once in the list of dims"));
    seen[d] = true;
  }
  // A 0-d tensor takes dim 0 or -1 (as torch's does) and reduces to itself: no dims to reduce.
  if (rank == 0) dims.clear();
  return dims;
}

Shape reduced_shape(const Shape& in, const std::vector<int64_t>& dims, bool keep) {
  std::vector<bool> red(in.size(), dims.empty());
  for (int64_t d : dims) red[d] = true;
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!red[d]) out.push_back(in[d]);
    else if (keep) out.push_back(1);
  }
  return out;
}

int64_t reduced_count(const Shape& in, const std::vector<int64_t>& dims) {
  if (dims.empty()) return numel(in);
  int64_t n = 1;
  for (int64_t d : dims) n *= in[d];
  return n;
}

bool keepdim(const OpCall& c) { return c.has("keepdim") && c.get_bool("keepdim"); }

OpDef& define(Registry& reg, const std::string& schema,
            std::function<DType(const OpCall&)> dtype_fn,
            std::function<Tensor(const Tensor&, const OpCall&, const LocalContext&, const std::vector<int64_t>&, bool)> fn,
            bool floating_only, Keeps keeps = Keeps::kInputs) {
  OpDef& op = reg.define(schema, "reduction");
  op.cost = cost(CostClass::kOnePass, keeps);
  op.meta = [dtype_fn, floating_only](const OpCall& c) {
    if (floating_only && !is_floating(c.tensor(0).dtype))
      fail(c, absl::StrCat("dtype ", dtype_name(c.tensor(0).dtype),
                           " is not accepted; accepted: float32, float64, bfloat16, float16"));
    std::vector<int64_t> dims = dims_of(c);
    return std::vector<TensorMeta>{{reduced_shape(c.tensor(0).shape, dims, keepdim(c)), dtype_fn(c)}};
  };
  op.kernel = [fn](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return std::vector<Tensor>{fn(in[0], c, ctx, dims_of(c), keepdim(c))};
  };
  op.samples = [] {
    return std::vector<Sample>{
        sample({{6, 5}}, {T(0)}), sample({{7, 5, 3}}, {T(0), L({1})}),
        sample({{5, 6, 4}}, {T(0), L({0, 2})}, {{"keepdim", V(true)}}),
        sample({{9, 4}}, {T(0), L({-2})})};
  };
  return op;
}

DType same(const OpCall& c) { return c.tensor(0).dtype; }

// amax/amin of a block that has nothing along a reduced dim: the identity of max/min.
Tensor extreme_or(const Tensor& x, const std::vector<int64_t>& dims, bool keep, bool is_max,
                  Tensor (*fn)(const Tensor&, const std::vector<int64_t>&, bool)) {
  if (x.numel() > 0) return fn(x, dims, keep);
  Shape out = reduced_shape(x.sizes(), dims, keep);
  double v = is_floating(x.dtype()) ? std::numeric_limits<double>::infinity()
                                    : static_cast<double>(std::numeric_limits<int32_t>::max());
  return Tensor::full(out, is_max ? -v : v, x.dtype());
}

}  // namespace

void define_reduction_ops(Registry& reg) {
  define(reg, "sum(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor",
         [](const OpCall& c) {
           DType d = c.tensor(0).dtype;
           return is_floating(d) || is_complex(d) ? d : DType::kInt64;
         },
         [](const Tensor& x, const OpCall&, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
           return kernels::sum(x, dims, keep);
         },
         false, Keeps::kNothing).complex = true;  // complex: the sum of the parts (kernels::sum)
  reg.mutable_find("sum").samples = [base = reg.mutable_find("sum").samples] {
    std::vector<Sample> s = base();
    s.push_back(sample({{4, 3}}, {T(0), L({1})}, {}, {DType::kComplex128}));
    return s;
  };
  // A block divides its sum by the global count (tests/ops:layout_facts_test): the bridge runs it.
  OpDef& mean = define(reg, "mean(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor", same,
         [](const Tensor& x, const OpCall& c, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
           const int64_t global = reduced_count(c.tensor(0).shape, dims);
           if (reduced_count(x.sizes(), dims) == global) return kernels::mean(x, dims, keep);
           // Sharded reduced dim: this block's share of the global mean.
           Tensor s = kernels::sum(x.to(DType::kFloat64), dims, keep);
           return kernels::mul(s, Scalar(1.0 / static_cast<double>(global))).to(x.dtype());
         },
         true, Keeps::kNothing);
  mean.aten.layout_dependent = true;
  define(reg, "amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", same,
         [](const Tensor& x, const OpCall&, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
           return extreme_or(x, dims, keep, true, kernels::amax);
         },
         false);
  define(reg, "amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", same,
         [](const Tensor& x, const OpCall&, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
           return extreme_or(x, dims, keep, false, kernels::amin);
         },
         false);
  // dtype: the input is cast to it first, as ATen's.
  define(reg, "prod(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
         [](const OpCall& c) {
           if (c.has("dtype")) return guard(c, [&] { return dtype_from_name(c.get_str("dtype")); });
           DType d = c.tensor(0).dtype;
           return is_floating(d) ? d : DType::kInt64;
         },
         [](const Tensor& x, const OpCall& c, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
           return kernels::prod(c.has("dtype") ? x.to(dtype_from_name(c.get_str("dtype"))) : x, dims, keep);
         },
         false);
  for (const char* name : {"var", "std"}) {
    bool is_var = std::string(name) == "var";
    OpDef& op = define(reg, std::string(name) + "(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
           same,
           [is_var](const Tensor& x, const OpCall& c, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
             double corr = c.has("correction") ? c.get_double("correction") : 1.0;
             return is_var ? kernels::var(x, dims, corr, keep) : kernels::std(x, dims, corr, keep);
           },
           true);
    // ATen's var.dim/std.dim(self, dim, unbiased, keepdim): unbiased becomes the correction.
    op.aten.aliases = {{std::string(name) + ".dim", "unbiased"}};
  }
  // all/any: bool results (uint8 for a uint8 input, as ATen's, holding 0 or 1); over a sharded dim
  // P(min) / P(max) of the blocks' answers (an empty block answers the identity, true / false).
  // ATen's all.dim/any.dim(self, int dim) bind here.
  const auto result_dtype = [](DType x) { return x == DType::kUInt8 ? DType::kUInt8 : DType::kBool; };
  for (const bool is_all : {true, false}) {
    OpDef& op = define(reg, std::string(is_all ? "all" : "any") + "(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor",
                       [result_dtype](const OpCall& c) { return result_dtype(c.tensor(0).dtype); },
                       [is_all, result_dtype](const Tensor& x, const OpCall&, const LocalContext&,
                                              const std::vector<int64_t>& dims, bool keep) {
                         const DType out = result_dtype(x.dtype());
                         if (x.numel() == 0)
                           return Tensor::full(reduced_shape(x.sizes(), dims, keep), is_all ? 1.0 : 0.0, out);
                         const Tensor nonzero = kernels::ne(x, Tensor::zeros({}, x.dtype())).to(DType::kInt32);
                         return (is_all ? kernels::amin : kernels::amax)(nonzero, dims, keep).to(out);
                       },
                       false, Keeps::kNothing);
    op.no_backward = "a bool result (not differentiable)";
    // Mostly true for all, mostly false for any (a few of the other value), so that a wrong rule
    // shows: x > -1.8 / x > 1.8 on random_tensor's [-2, 2].
    op.make_input = [is_all](int, const OpCall& c, uint64_t seed) {
      const Tensor r = random_tensor(c.tensor(0).shape, DType::kFloat64, seed);
      return kernels::gt(r, Tensor::full({}, is_all ? -1.8 : 1.8, DType::kFloat64)).to(c.tensor(0).dtype);
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{6, 5}}, {T(0)}, {}, {DType::kBool}), sample({{7, 5, 3}}, {T(0), L({1})}, {}, {DType::kBool}),
          sample({{5, 6, 4}}, {T(0), L({0, 2})}, {{"keepdim", V(true)}}, {DType::kFloat32}),
          sample({{9, 4}}, {T(0), L({-2})}, {}, {DType::kInt64})};
    };
  }
  define(reg, "logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
         [](const OpCall& c) { return is_floating(c.tensor(0).dtype) ? c.tensor(0).dtype : DType::kFloat32; },
         [](const Tensor& x, const OpCall&, const LocalContext&, const std::vector<int64_t>& dims, bool keep) {
           return kernels::logsumexp(x, dims, keep);
         },
         false);
  reg.mutable_find("logsumexp").samples = [] {
    return std::vector<Sample>{sample({{6, 5}}, {T(0), L({1})}), sample({{5, 3, 4}}, {T(0), L({0, 2})})};
  };
}

DTENSOR_FAMILY_PART("reduction", kDefinitions, define_reduction_ops);

}  // namespace dtensor::ops
