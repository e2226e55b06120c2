// Ops whose output reads its input through a per-dim index map, with ATen's semantics:
//   reflection_pad{1,2,3}d, replication_pad{1,2,3}d: one input position per output position along
//     each padded dim (reflection mirrors without repeating the edge: -1 -> 1, n -> n - 2;
//     replication clamps); negative padding crops;
//   upsample_nearest2d: one position (ATen's nearest_idx);
//   upsample_bilinear2d: two positions with weights (ATen's area_pixel_compute_source_index and
//     guard_index_and_lambda, in float for float inputs as ATen's opmath);
// and their ATen _backward ops, which torch's autograd calls by name (replication's and the
// upsamplings' have no torch._decomp decomposition). The forward reads each mapped dim with
// index_select (a weighted sum for two taps), the backward scatter-adds the gradient through the
// same map (embedding_dense_backward, accumulating in double in output order); both are
// device-dispatched kernels. Mapped dims stay whole: ops/view/index_map_rules.cc; autograd:
// ops/view/index_map_backward.cc.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/backward.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"
#include "ops/view/view_op.h"

namespace dtensor::ops {
namespace {

// ---- The maps. A tap reads input position index[j] for output position j, times weight[j]
// (no weights: 1); an output dim sums its taps.
struct Tap {
  std::vector<int64_t> index;
  std::vector<double> weight;
};
using DimMap = std::vector<Tap>;

// x read along dim d through the taps: sum over taps of weight * index_select(x, d, index).
Tensor read_dim(const Tensor& x, int64_t d, const DimMap& taps) {
  Tensor out;
  for (const Tap& t : taps) {
    const int64_t m = static_cast<int64_t>(t.index.size());
    Tensor y = kernels::index_select(x, d, Tensor::from_vector(t.index, {m}).to(x.device()));
    if (!t.weight.empty()) {
      Shape along(static_cast<size_t>(x.dim()), 1);
      along[d] = m;
      y = kernels::mul(y, Tensor::from_vector(t.weight, along).to(x.dtype()).to(x.device()));
    }
    out = out.defined() ? kernels::add(out, y) : y;
  }
  return out.contiguous();
}

// The gradient of read_dim: g (dim d of the output's length) scatter-added into n positions.
Tensor scatter_dim(const Tensor& g, int64_t d, int64_t n, const DimMap& taps) {
  Shape moved = g.movedim(d, 0).sizes();  // [m, the other dims in order]
  const int64_t m = moved[0];
  Tensor out;
  for (const Tap& t : taps) {
    Tensor w = g;
    if (!t.weight.empty()) {
      Shape along(static_cast<size_t>(g.dim()), 1);
      along[d] = m;
      w = kernels::mul(g, Tensor::from_vector(t.weight, along).to(g.dtype()).to(g.device()));
    }
    const Tensor rows = w.movedim(d, 0).contiguous().reshape({m, m == 0 ? 0 : numel(moved) / m});
    const Tensor summed = kernels::embedding_dense_backward(
        rows, Tensor::from_vector(t.index, {m}).to(g.device()), n);
    out = out.defined() ? kernels::add(out, summed) : summed;
  }
  moved[0] = n;
  return out.reshape(moved).movedim(0, d).contiguous();
}

// The dtype weighted maps compute in: float32 for 16-bit floats (ATen's opmath), so that a
// weighted sum rounds once, at the end, and stays linear in its input as Partial(sum) needs.
DType compute_dtype(DType dt, const std::vector<DimMap>& maps) {
  const bool weighted = std::any_of(maps.begin(), maps.end(), [](const DimMap& m) {
    return std::any_of(m.begin(), m.end(), [](const Tap& t) { return !t.weight.empty(); });
  });
  return weighted && (dt == DType::kBFloat16 || dt == DType::kFloat16) ? DType::kFloat32 : dt;
}

// The forward on a block whose mapped dims are whole (the rules keep them so): maps[i] is the map
// of dim rank - 1 - i (ATen's order: the last dim first).
Tensor read_block(const Tensor& x, const std::vector<DimMap>& maps) {
  Tensor y = x.to(compute_dtype(x.dtype(), maps));
  for (size_t i = 0; i < maps.size(); ++i) y = read_dim(y, y.dim() - 1 - static_cast<int64_t>(i), maps[i]);
  return y.to(x.dtype()).contiguous();
}

// The backward on a block: the mapped dims undone in reverse order. `self` is the input block's
// shape.
Tensor scatter_block(const Tensor& grad, const Shape& self, const std::vector<DimMap>& maps) {
  if (numel(self) == 0) return Tensor::zeros(self, grad.dtype(), grad.device());
  Tensor g = grad.to(compute_dtype(grad.dtype(), maps));
  for (size_t i = maps.size(); i-- > 0;) {
    const int64_t d = g.dim() - 1 - static_cast<int64_t>(i);
    g = scatter_dim(g, d, self[d], maps[i]);
  }
  return g.to(grad.dtype());
}

// ---- Padding.
enum class PadMode { kReflection, kReplication };

const char* mode_name(PadMode mode) { return mode == PadMode::kReflection ? "reflection" : "replication"; }

// Dim of n positions padded by (before, after): output position j reads j - before, reflected or
// clamped into [0, n) (padded_shape's checks keep a reflection in range).
DimMap pad_map(PadMode mode, int64_t before, int64_t after, int64_t n) {
  Tap t;
  for (int64_t j = 0, out = n + before + after; j < out; ++j) {
    int64_t i = j - before;
    if (mode == PadMode::kReplication) i = std::clamp<int64_t>(i, 0, n - 1);
    else if (i < 0) i = -i;
    else if (i >= n) i = 2 * (n - 1) - i;
    t.index.push_back(i);
  }
  return {t};
}

// ATen's checks of self (tensor input t) and padding for a k-d pad, then the output shape:
// padding holds (before, after) pairs from the last dim back; self is (k + 1)-d, or (k + 2)-d with
// a leading batch dim that may be 0, its other dims non-zero; reflection pads less than the dim's
// size on each side; negative values crop, but every output dim keeps at least one position.
Shape padded_shape(const OpCall& c, int t, PadMode mode, int k) {
  const Shape& s = c.tensor(t).shape;
  const std::vector<int64_t> pad = c.get_int_list("padding");
  if (static_cast<int>(pad.size()) != 2 * k)
    fail(c, absl::StrCat("padding has ", pad.size(), " values; accepted: ", 2 * k,
                         " ((before, after) for each of the last ", k, " dims, the last dim first)"));
  const int rank = static_cast<int>(s.size());
  bool ok = rank == k + 1 || rank == k + 2;
  for (int d = rank == k + 2 ? 1 : 0; ok && d < rank; ++d) ok = s[d] != 0;
  if (!ok)
    fail(c, absl::StrCat("self ", shape_str(s), ": accepted: a ", k + 1, "-d or (batch mode) ", k + 2,
                         "-d tensor whose dims are non-zero except the batch dim"));
  Shape out = s;
  for (int i = 0; i < k; ++i) {
    const int d = rank - 1 - i;
    const int64_t before = pad[2 * i], after = pad[2 * i + 1], n = s[d];
    if (mode == PadMode::kReflection && (before >= n || after >= n))
      fail(c, absl::StrCat("padding (", before, ", ", after, ") of dim ", d, " of size ", n,
                           ": reflection accepts padding less than the dim's size"));
    int64_t m = 0;
    if (__builtin_add_overflow(n, before, &m) || __builtin_add_overflow(m, after, &m))
      fail(c, absl::StrCat("padding (", before, ", ", after, ") of dim ", d, " overflows int64"));
    if (m < 1)
      fail(c, absl::StrCat("padding (", before, ", ", after, ") of dim ", d, " of size ", n, " gives ", m,
                           " positions; accepted: at least 1"));
    out[d] = m;
  }
  guard(c, [&] { return numel(out); });  // the element count must fit int64
  return out;
}

// The maps of a pad of the block `s` (its padded dims whole).
std::vector<DimMap> pad_maps(const OpCall& c, PadMode mode, const Shape& s) {
  const std::vector<int64_t> pad = c.get_int_list("padding");
  std::vector<DimMap> maps;
  for (size_t i = 0; i < pad.size() / 2; ++i)
    maps.push_back(pad_map(mode, pad[2 * i], pad[2 * i + 1], s[s.size() - 1 - i]));
  return maps;
}

void define_pad(Registry& reg, PadMode mode, int k) {
  const std::string name = absl::StrCat(mode_name(mode), "_pad", k, "d");
  // kNothing (define_view_op): the backward reads only self's shape.
  OpDef& fwd = define_view_op(
      reg, name + "(Tensor self, int[] padding) -> Tensor", CostClass::kCopy,
      [mode, k](const OpCall& c) { return std::vector<TensorMeta>{{padded_shape(c, 0, mode, k), c.tensor(0).dtype}}; },
      [mode](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
        return one(read_block(in[0], pad_maps(c, mode, in[0].sizes())));
      },
      [k] {
        // One sample per form: batch mode, no batch dim, and cropping (negative padding).
        Shape batch = {2, 3}, plain = {3};
        std::vector<int64_t> pad, crop;
        for (int i = 0; i < k; ++i) {
          batch.push_back(5 - i);
          plain.push_back(4);
          pad.insert(pad.end(), {2, 1});
          crop.insert(crop.end(), {-1, 2});
        }
        return std::vector<Sample>{sample({batch}, {T(0), L(pad)}), sample({plain}, {T(0), L(crop)}),
                                   sample({batch}, {T(0), L(pad)}, {}, {DType::kInt64})};
      });
  fwd.aten.layout_dependent = true;  // empty blocks: ATen refuses a zero non-batch dim
  OpDef& bwd = reg.define(name + "_backward(Tensor grad_output, Tensor self, int[] padding) -> Tensor", "view");
  bwd.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  bwd.no_backward = kNoDoubleBackward;
  bwd.aten.layout_dependent = true;  // as the forward
  bwd.meta = [mode, k](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_shape(c, 0, "grad_output (self padded)", padded_shape(c, 1, mode, k));
    return std::vector<TensorMeta>{{c.tensor(1).shape, c.tensor(0).dtype}};
  };
  // self gives its block's shape only: an empty self block still has a (zero) gradient block.
  bwd.kernel = guarded(
      [mode](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
        const Shape self = ctx.out_block(0).first;
        return one(scatter_block(in[0], self, pad_maps(c, mode, self)));
      },
      {0});
  bwd.samples = [k] {
    Shape self = {2, 3}, grad = {2, 3};
    std::vector<int64_t> pad;
    for (int i = 0; i < k; ++i) {
      self.push_back(5 - i);
      grad.push_back(5 - i + 3);
      pad.insert(pad.end(), {2, 1});
    }
    return std::vector<Sample>{sample({grad, self}, {T(0), T(1), L(pad)})};
  };
}

// ---- Upsampling (2-d: the last two dims of a 4-d [N, C, H, W] tensor).
enum class Upsample { kNearest, kBilinear };

// ATen's compute_scales_value: 1 / scale when a positive scale is given, else in / out, in T.
template <typename T>
T scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}

// ATen's nearest_idx (upsample_nearest2d): identity and exact doubling are special-cased; otherwise
// min(floor(j * scale), in - 1) with the scale in float.
DimMap nearest_map(int64_t in, int64_t out, std::optional<double> scale) {
  Tap t;
  for (int64_t j = 0; j < out; ++j) {
    if (out == in) t.index.push_back(j);
    else if (out == 2 * in) t.index.push_back(j >> 1);
    else
      t.index.push_back(std::min<int64_t>(
          static_cast<int64_t>(std::floor(static_cast<float>(j) * scale_value<float>(scale, in, out))), in - 1));
  }
  return {t};
}

// ATen's linear interpolation weights (upsample_bilinear2d, per dim) in T (its opmath: float for
// float inputs, double for double): source x = scale * j (align_corners) or scale * (j + 0.5) - 0.5
// clamped at 0; taps floor(x) and the next position (the same at the edge), weights 1 - l and l.
template <typename T>
DimMap linear_map(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Tap lo, hi;
  const T ratio = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                : scale_value<T>(scale, in, out);
  for (int64_t j = 0; j < out; ++j) {
    if (out == in) {
      lo.index.push_back(j), hi.index.push_back(j), lo.weight.push_back(1.0), hi.weight.push_back(0.0);
      continue;
    }
    T x = align_corners ? ratio * static_cast<T>(j) : ratio * (static_cast<T>(j) + T(0.5)) - T(0.5);
    if (!align_corners && x < 0) x = 0;
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(x)), in - 1);
    const T l = std::min<T>(std::max<T>(x - static_cast<T>(i0), T(0)), T(1));
    lo.index.push_back(i0);
    hi.index.push_back(i0 + (i0 < in - 1 ? 1 : 0));
    lo.weight.push_back(static_cast<double>(T(1) - l));
    hi.weight.push_back(static_cast<double>(l));
  }
  return {lo, hi};
}

const char* upsample_name(Upsample u) { return u == Upsample::kNearest ? "upsample_nearest2d" : "upsample_bilinear2d"; }

// ATen's checks (upsample_2d_common_check): output_size has 2 values > 0, the input is 4-d with
// non-zero sizes but for the batch; returns the output shape [N, C, OH, OW].
Shape upsampled_shape(const OpCall& c, const Shape& input) {
  const std::vector<int64_t> out = c.get_int_list("output_size");
  if (out.size() != 2)
    fail(c, absl::StrCat("output_size has ", out.size(), " values; accepted: 2 (height, width)"));
  bool ok = input.size() == 4;
  for (size_t d = 1; ok && d < 4; ++d) ok = input[d] > 0;
  if (!ok || out[0] <= 0 || out[1] <= 0)
    fail(c, absl::StrCat("input ", shape_str(input), " to output size [", out[0], ", ", out[1],
                         "]: accepted: a 4-d [N, C, H, W] input with C, H, W > 0 and output sizes > 0"));
  const Shape shape = {input[0], input[1], out[0], out[1]};
  guard(c, [&] { return numel(shape); });  // the element count must fit int64
  return shape;
}

// The maps of the last two dims (width first), input sizes (h, w), for the call's arguments and
// the data's dtype (bilinear computes its weights in float for a float input).
std::vector<DimMap> upsample_maps(const OpCall& c, Upsample u, int64_t h, int64_t w, DType dtype) {
  const std::vector<int64_t> out = c.get_int_list("output_size");
  auto scale = [&](const char* arg) {
    return c.has(arg) ? std::optional<double>(c.get_double(arg)) : std::nullopt;
  };
  const std::optional<double> sh = scale("scales_h"), sw = scale("scales_w");
  if (u == Upsample::kNearest) return {nearest_map(w, out[1], sw), nearest_map(h, out[0], sh)};
  const bool corners = c.get_bool("align_corners");
  if (dtype == DType::kFloat64)
    return {linear_map<double>(w, out[1], corners, sw), linear_map<double>(h, out[0], corners, sh)};
  return {linear_map<float>(w, out[1], corners, sw), linear_map<float>(h, out[0], corners, sh)};
}

void define_upsample(Registry& reg, Upsample u) {
  const std::string name = upsample_name(u);
  const std::string corners = u == Upsample::kBilinear ? "bool align_corners, " : "";
  OpDef& fwd = define_view_op(
      reg,
      name + "(Tensor self, int[2] output_size, " + corners + "float? scales_h=None, float? scales_w=None) -> Tensor",
      CostClass::kCopy,
      [u](const OpCall& c) {
        if (u == Upsample::kBilinear) check_floating(c, 0, "self");
        return std::vector<TensorMeta>{{upsampled_shape(c, c.tensor(0).shape), c.tensor(0).dtype}};
      },
      [u](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
        const Tensor& x = in[0];
        return one(read_block(x, upsample_maps(c, u, x.size(2), x.size(3), x.dtype())));
      },
      [u] {
        const std::vector<std::pair<std::string, ArgValue>> scales = {{"scales_h", V(1.7)}, {"scales_w", V(0.6)}};
        std::vector<ArgValue> up = {T(0), L({7, 11})}, down = {T(0), L({5, 3})}, same = {T(0), L({4, 10})};
        if (u == Upsample::kBilinear) up.push_back(V(false)), down.push_back(V(true)), same.push_back(V(false));
        return std::vector<Sample>{sample({{2, 3, 4, 5}}, up), sample({{2, 3, 4, 5}}, down, scales),
                                   sample({{2, 3, 4, 5}}, same, {}, {DType::kFloat64})};
      });
  fwd.aten.layout_dependent = true;  // empty blocks: ATen refuses zero channels
  OpDef& bwd = reg.define(name + "_backward(Tensor grad_output, int[2] output_size, int[4] input_size, " + corners +
                              "float? scales_h=None, float? scales_w=None) -> Tensor",
                          "view");
  bwd.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  bwd.no_backward = kNoDoubleBackward;
  bwd.aten.layout_dependent = true;  // input_size is global; a block's gradient is its own rows
  bwd.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    const std::vector<int64_t> in = c.get_int_list("input_size");
    if (in.size() != 4)
      fail(c, absl::StrCat("input_size has ", in.size(), " values; accepted: 4 ([N, C, H, W])"));
    const Shape input(in.begin(), in.end());
    check_shape(c, 0, "grad_output (input_size at output_size)", upsampled_shape(c, input));
    return std::vector<TensorMeta>{{input, c.tensor(0).dtype}};
  };
  bwd.kernel = guarded(
      [u](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
        const Shape self = ctx.out_block(0).first;
        return one(scatter_block(in[0], self, upsample_maps(c, u, self[2], self[3], in[0].dtype())));
      },
      {0});
  bwd.samples = [u] {
    std::vector<ArgValue> args = {T(0), L({7, 11}), L({2, 3, 4, 5})};
    if (u == Upsample::kBilinear) args.push_back(V(false));
    return std::vector<Sample>{sample({{2, 3, 7, 11}}, args)};
  };
  // ATen's .vec overloads (output_size or scale_factors, one of them None) are composite: dispatch
  // sees these.
}

void define_index_map_ops(Registry& reg) {
  for (PadMode mode : {PadMode::kReflection, PadMode::kReplication})
    for (int k = 1; k <= 3; ++k) define_pad(reg, mode, k);
  for (Upsample u : {Upsample::kNearest, Upsample::kBilinear}) define_upsample(reg, u);
}

}  // namespace

DTENSOR_FAMILY_PART("view", kDefinitions, define_index_map_ops);

}  // namespace dtensor::ops
