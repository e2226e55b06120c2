// Reflection and replication padding with ATen's semantics: reflection_pad{1,2,3}d and
// replication_pad{1,2,3}d, and their _backward ops (torch's autograd calls those by name, and
// replication's have no torch._decomp decomposition). Each output position along a padded dim
// reads one input position (reflection mirrors without repeating the edge: -1 -> 1, n -> n - 2;
// replication repeats it: clamp), so the forward is one index_select per padded dim and the
// backward scatter-adds the gradient through the same map (embedding_dense_backward, accumulating
// in double in output order). Both are device-dispatched kernels. Rules: ops/view/pad_rules.cc;
// autograd: ops/view/pad_backward.cc.
#include <algorithm>

#include "kernels/cpu/backward.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"
#include "ops/view/view_op.h"

namespace dtensor::ops {
namespace {

enum class PadMode { kReflection, kReplication };

// Input position read by output position j of a padded dim of n positions whose output starts
// `before` positions ahead of the input (negative: cropped). The checks in padded_shape keep it in
// [0, n): reflection needs |before|, |after| < n, replication n >= 1.
int64_t source(PadMode mode, int64_t j, int64_t before, int64_t n) {
  const int64_t i = j - before;
  if (mode == PadMode::kReplication) return std::clamp<int64_t>(i, 0, n - 1);
  if (i < 0) return -i;
  return i >= n ? 2 * (n - 1) - i : i;
}

// The positions read along a padded dim, as an int64 index tensor on `device`.
Tensor source_index(PadMode mode, int64_t before, int64_t n, int64_t out, Device device) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j) idx[j] = source(mode, j, before, n);
  return Tensor::from_vector(idx, {out}).to(device);
}

const char* mode_name(PadMode mode) { return mode == PadMode::kReflection ? "reflection" : "replication"; }

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
  return out;
}

// The forward on a block whose padded dims are whole (the rules keep them so).
Tensor pad_block(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode) {
  Tensor y = x;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = y.dim() - 1 - static_cast<int64_t>(i);
    const int64_t n = y.size(d), m = n + pad[2 * i] + pad[2 * i + 1];
    y = kernels::index_select(y, d, source_index(mode, pad[2 * i], n, m, y.device()));
  }
  return y.contiguous();
}

// The backward on a block: the padded dims undone in reverse order, each a scatter-add of grad's
// positions into the n positions they read. `self` is the input block's shape.
Tensor unpad_block(const Tensor& grad, const Shape& self, const std::vector<int64_t>& pad, PadMode mode) {
  if (numel(self) == 0) return Tensor::zeros(self, grad.dtype(), grad.device());
  Tensor g = grad;
  for (size_t i = pad.size() / 2; i-- > 0;) {
    const int64_t d = g.dim() - 1 - static_cast<int64_t>(i);
    const int64_t n = self[d], m = g.size(d);
    Shape moved = g.movedim(d, 0).sizes();  // [m, the other dims in order]
    const Tensor rows = g.movedim(d, 0).contiguous().reshape({m, numel(moved) / m});
    const Tensor summed = kernels::embedding_dense_backward(rows, source_index(mode, pad[2 * i], n, m, g.device()), n);
    moved[0] = n;
    g = summed.reshape(moved).movedim(0, d);
  }
  return g.contiguous();
}

void define_pad(Registry& reg, PadMode mode, int k) {
  const std::string name = absl::StrCat(mode_name(mode), "_pad", k, "d");
  // kNothing (define_view_op): the backward reads only self's shape.
  OpDef& fwd = define_view_op(
      reg, name + "(Tensor self, int[] padding) -> Tensor", CostClass::kCopy,
      [mode, k](const OpCall& c) { return std::vector<TensorMeta>{{padded_shape(c, 0, mode, k), c.tensor(0).dtype}}; },
      [mode](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
        return one(pad_block(in[0], c.get_int_list("padding"), mode));
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
        return one(unpad_block(in[0], ctx.out_block(0).first, c.get_int_list("padding"), mode));
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

void define_pads(Registry& reg) {
  for (PadMode mode : {PadMode::kReflection, PadMode::kReplication})
    for (int k = 1; k <= 3; ++k) define_pad(reg, mode, k);
}

}  // namespace

DTENSOR_FAMILY_PART("view", kDefinitions, define_pads);

}  // namespace dtensor::ops
