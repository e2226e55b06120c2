// softmax, log_softmax, layer_norm, native_layer_norm, rms_norm: local kernels on blocks whole along the
// normalized dims.
#include <algorithm>

#include "ops/common/defs.h"
#include "ops/family.h"
#include "ops/norm/group_norm_args.h"

namespace dtensor::ops {
namespace {

void check_float(const OpCall& c) {
  if (!is_floating(c.tensor(0).dtype))
    fail(c, "accepted dtypes: float32, float64, bfloat16, float16");
}

MetaFn norm_meta() {
  return [](const OpCall& c) {
    check_float(c);
    const Shape ns = normalized_shape_arg(c, 0);
    for (const char* w : {"weight", "bias"}) {
      int t = c.has(w) ? c.tensor_index(w) : -1;
      if (t >= 0 && c.tensor(t).shape != ns) fail(c, absl::StrCat(w, " must have shape ", shape_str(ns)));
    }
    return std::vector<TensorMeta>{c.tensor(0)};
  };
}

std::optional<Tensor> opt(const std::vector<Tensor>& in, const OpCall& c, const char* name) {
  if (!c.has(name)) return std::nullopt;
  return in[c.tensor_index(name)];
}

// The row statistics native_layer_norm and native_group_norm return, in double over `dims` of xd
// (`count` elements a row): mean, x - mean and 1 / sqrt(biased var + eps).
struct RowStats {
  Tensor mean, centered, rstd;
};

RowStats row_stats(const Tensor& xd, const std::vector<int64_t>& dims, double count, double eps) {
  RowStats s;
  s.mean = kernels::div(kernels::sum(xd, dims, true), count);
  s.centered = kernels::sub(xd, s.mean);
  const Tensor var = kernels::div(kernels::sum(kernels::mul(s.centered, s.centered), dims, true), count);
  s.rstd = kernels::pow(kernels::add(var, eps), -0.5);
  return s;
}

}  // namespace

void check_group_norm_args(const OpCall& c, int x_index) {
  const Shape& x = c.tensor(x_index).shape;
  const int64_t n = c.get_int("N"), ch = c.get_int("C"), hw = c.get_int("HxW"), g = c.get_int("group");
  int64_t rows = 0;
  if (x.size() < 2 || x[0] != n || x[1] != ch || __builtin_mul_overflow(n, ch, &rows) ||
      __builtin_mul_overflow(rows, hw, &rows) || rows != numel(x))
    fail(c, absl::StrCat("input ", shape_str(x), " with N=", n, ", C=", ch, ", HxW=", hw,
                         "; accepted: input [N, C, ...] whose trailing dims hold HxW elements"));
  if (g <= 0 || ch % g != 0)
    fail(c, absl::StrCat("group ", g, " for C=", ch, "; accepted: a positive group dividing C"));
}

Shape normalized_shape_arg(const OpCall& c, int input) {
  const Shape& x = c.tensor(input).shape;
  const std::vector<int64_t> ns = c.get_int_list("normalized_shape");
  bool ok = !ns.empty() && ns.size() <= x.size();
  for (size_t i = 0; ok && i < ns.size(); ++i) ok = ns[i] == x[x.size() - ns.size() + i];
  if (!ok)
    fail(c, absl::StrCat("normalized_shape [", absl::StrJoin(ns, ", "),
                         "] must be non-empty and equal the trailing dims of the input ", shape_str(x)));
  return Shape(ns.begin(), ns.end());
}

void define_norm_ops(Registry& reg) {
  for (const char* name : {"softmax", "log_softmax"}) {
    bool log = std::string(name) == "log_softmax";
    // dtype: the input is cast to it first (ATen's softmax.int), so an int64 input may take one.
    OpDef& op = reg.define(std::string(name) + "(Tensor self, int dim, ScalarType? dtype=None) -> Tensor", "norm");
    op.cost = cost(CostClass::kNormalization, Keeps::kOutput);
    // ATen's _softmax(self, dim, half_to_float): the flag is always False on CPU tensors.
    op.aten.aliases = {{std::string("_") + name, "keep:2"}};
    op.meta = [](const OpCall& c) {
      TensorMeta out = c.tensor(0);
      if (c.has("dtype")) out.dtype = guard(c, [&] { return dtype_from_name(c.get_str("dtype")); });
      if (!is_floating(out.dtype)) fail(c, "accepted dtypes: float32, float64, bfloat16, float16");
      guard(c, [&] { return wrap_dim(c.get_int("dim"), static_cast<int64_t>(c.tensor(0).shape.size()), "dim"); });
      return std::vector<TensorMeta>{out};
    };
    op.kernel = [log](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
      const Tensor cast = in[0].to(ctx.out_meta[0].dtype);
      // A 0-d tensor is softmaxed as the 1-element vector it holds (torch's dim 0 or -1).
      const Tensor x = cast.dim() == 0 ? cast.reshape({1}) : cast;
      Tensor y = log ? kernels::log_softmax(x, c.get_int("dim")) : kernels::softmax(x, c.get_int("dim"));
      return std::vector<Tensor>{in[0].dim() == 0 ? y.reshape({}) : y};
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5}}, {T(0), I(1)}), sample({{5, 3, 7}}, {T(0), I(0)}),
                                 sample({{4, 6}}, {T(0), I(1), V(std::string("float64"))})};
    };
  }
  {
    OpDef& op = reg.define(
        "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
        "norm");
    op.cost = cost(CostClass::kNormalization);
    op.meta = norm_meta();
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      std::vector<int64_t> ns = c.get_int_list("normalized_shape");
      return std::vector<Tensor>{kernels::layer_norm(in[0], Shape(ns.begin(), ns.end()), opt(in, c, "weight"),
                                                     opt(in, c, "bias"), c.get_double("eps"))};
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5, 4}, {4}, {4}}, {T(0), L({4}), T(1), T(2)}),
                                 sample({{7, 3, 4}}, {T(0), L({3, 4})})};
    };
  }
  {
    // ATen's native_layer_norm (what dispatch sees for nn.LayerNorm): layer_norm's output with the
    // mean and 1 / sqrt(biased var + eps) of each row, [leading dims, 1 per normalized dim], in
    // the input's dtype (as ATen's CPU kernel returns them). Its backward is ATen's
    // native_layer_norm_backward (ops/norm/backward_defs.cc) over them.
    OpDef& op = reg.define(
        "native_layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> "
        "(Tensor out, Tensor mean, Tensor rstd)",
        "norm");
    op.cost = cost(CostClass::kNormalization, Keeps::kInputsAndOutput);
    op.meta = [](const OpCall& c) {
      std::vector<TensorMeta> m = norm_meta()(c);
      Shape stats = c.tensor(0).shape;
      const size_t n = c.get_int_list("normalized_shape").size();
      std::fill(stats.end() - static_cast<int64_t>(n), stats.end(), 1);
      m.push_back({stats, c.tensor(0).dtype});
      m.push_back({stats, c.tensor(0).dtype});
      return m;
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      const std::vector<int64_t> ns = c.get_int_list("normalized_shape");
      const double eps = c.get_double("eps");
      const Tensor& x = in[0];
      std::vector<int64_t> dims;
      for (int64_t d = x.dim() - static_cast<int64_t>(ns.size()); d < x.dim(); ++d) dims.push_back(d);
      const double count = static_cast<double>(numel(Shape(ns.begin(), ns.end())));
      const RowStats s = row_stats(x.to(DType::kFloat64), dims, count, eps);
      return std::vector<Tensor>{
          kernels::layer_norm(x, Shape(ns.begin(), ns.end()), opt(in, c, "weight"), opt(in, c, "bias"), eps),
          s.mean.to(x.dtype()), s.rstd.to(x.dtype())};
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5, 4}, {4}, {4}}, {T(0), L({4}), T(1), T(2), V(1e-5)}),
                                 sample({{7, 3, 4}}, {T(0), L({3, 4}), V(IValue()), V(IValue()), V(1e-3)})};
    };
  }
  {
    // ATen's native_group_norm (nn.GroupNorm): input [N, C, *] normalized over each (sample, group
    // of C / group channels) with weight and bias per channel; returns the output, and the mean and
    // rstd [N, group] in the input's dtype. N, C and HxW restate input's shape (checked); the kernel
    // reads a block's own N (the rules shard N only), so the bridge runs it rather than ATen on a
    // block with the global N. Its backward op is ATen's native_group_norm_backward
    // (ops/norm/backward_defs.cc); the C++ autograd formula is ops/norm/backward.cc's.
    OpDef& op = reg.define(
        "native_group_norm(Tensor input, Tensor? weight, Tensor? bias, int N, int C, int HxW, int group, float eps) -> "
        "(Tensor out, Tensor mean, Tensor rstd)",
        "norm");
    op.cost = cost(CostClass::kNormalization, Keeps::kInputsAndOutput);
    op.aten.layout_dependent = true;  // N is the global batch: a block has its own
    op.meta = [](const OpCall& c) {
      check_float(c);
      check_group_norm_args(c, 0);
      const int64_t n = c.get_int("N"), ch = c.get_int("C"), g = c.get_int("group");
      for (const char* w : {"weight", "bias"}) {
        const int t = c.has(w) ? c.tensor_index(w) : -1;
        if (t >= 0 && c.tensor(t).shape != Shape{ch}) fail(c, absl::StrCat(w, " must have shape [", ch, "]"));
      }
      return std::vector<TensorMeta>{c.tensor(0), {{n, g}, c.tensor(0).dtype}, {{n, g}, c.tensor(0).dtype}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      const Tensor& x = in[0];
      const int64_t n = x.size(0), ch = x.size(1), g = c.get_int("group");
      const int64_t k = n * ch == 0 ? 0 : x.numel() / n / g;  // elements per (sample, group)
      const RowStats s = row_stats(x.to(DType::kFloat64).reshape({n, g, k}), {2}, static_cast<double>(k),
                                   c.get_double("eps"));
      Tensor y = kernels::mul(s.centered, s.rstd).reshape({n, ch, k * g / std::max<int64_t>(ch, 1)});
      for (const char* name : {"weight", "bias"}) {
        const std::optional<Tensor> p = opt(in, c, name);
        if (!p) continue;
        const Tensor col = p->to(DType::kFloat64).reshape({ch, 1});
        y = std::string(name) == "weight" ? kernels::mul(y, col) : kernels::add(y, col);
      }
      return std::vector<Tensor>{y.reshape(x.sizes()).to(x.dtype()), s.mean.reshape({n, g}).to(x.dtype()),
                                 s.rstd.reshape({n, g}).to(x.dtype())};
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{4, 6, 3, 2}, {6}, {6}}, {T(0), T(1), T(2), I(4), I(6), I(6), I(3), V(1e-5)}),
          sample({{5, 4, 7}}, {T(0), V(IValue()), V(IValue()), I(5), I(4), I(7), I(2), V(1e-3)})};
    };
  }
  {
    OpDef& op = reg.define(
        "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor", "norm");
    op.cost = cost(CostClass::kNormalization);
    op.meta = norm_meta();
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      std::vector<int64_t> ns = c.get_int_list("normalized_shape");
      std::optional<double> eps;
      if (c.has("eps")) eps = c.get_double("eps");
      return std::vector<Tensor>{kernels::rms_norm(in[0], Shape(ns.begin(), ns.end()), opt(in, c, "weight"), eps)};
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5, 4}, {4}}, {T(0), L({4}), T(1)}),
                                 sample({{5, 6}}, {T(0), L({6})})};
    };
  }
}

DTENSOR_FAMILY_PART("norm", kDefinitions, define_norm_ops);

}  // namespace dtensor::ops
