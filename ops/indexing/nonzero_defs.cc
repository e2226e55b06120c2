// nonzero(self) -> the indices of self's nonzero elements, [n, self.dim()] int64 in row-major order
// (torch's semantics; a 0-d self gives [1, 0] or [0, 0]). n is known only from the data: the op's
// output dim 0 is data-dependent (OpDef::data_dependent), meta gives its upper bound, self's element
// count, which the rules, the cost model and the offline planner see; the engine takes the actual
// count from the kernel or the distributed step (ops/indexing/nonzero_steps.cc). Every dtype,
// complex included. Not differentiable (integer indices).
#include <cmath>
#include <complex>

#include "kernels/cpu/nonzero.h"
#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// Sample values with many zeros: about 2 elements in 3 are zero, and the first third of the
// elements (row-major) all are, so that blocks along the leading dims hold no nonzero at all; a
// [4, 6] self is all zeros. NaN and -0.0 are not produced (the kernel test covers them).
Tensor sparse_input(int, const OpCall& c, uint64_t seed) {
  const TensorMeta& m = c.tensor(0);
  Tensor r = random_tensor(m.shape, DType::kFloat64, seed).contiguous();
  double* p = r.data<double>();
  const int64_t n = r.numel();
  const bool all_zero = m.shape == Shape{4, 6};
  for (int64_t i = 0; i < n; ++i)
    if (all_zero || i < n / 3 || std::abs(p[i]) < 1.3) p[i] = 0.0;
  if (!is_complex(m.dtype)) return r.to(m.dtype);
  // Complex: the value in the real part of even elements and the imaginary part of odd ones.
  Tensor z = Tensor::empty(m.shape, DType::kComplex128);
  auto* q = z.data<std::complex<double>>();
  for (int64_t i = 0; i < n; ++i) q[i] = i % 2 == 0 ? std::complex<double>(p[i], 0) : std::complex<double>(0, p[i]);
  return z.to(m.dtype);
}

void define_nonzero(Registry& reg) {
  OpDef& op = reg.define("nonzero(Tensor self) -> Tensor", "indexing");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.no_backward = "integer indices (not differentiable)";
  op.complex = true;
  op.data_dependent = {{0, 0}};  // the row count
  op.meta = [](const OpCall& c) {
    const Shape& s = c.tensor(0).shape;
    // Dim 0's bound: every element nonzero.
    return std::vector<TensorMeta>{{{numel(s), static_cast<int64_t>(s.size())}, DType::kInt64}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
    return std::vector<Tensor>{kernels::nonzero(in[0])};
  };
  op.make_input = sparse_input;
  op.samples = [] {
    return std::vector<Sample>{
        sample({{6, 5}}, {T(0)}),  // uneven over 4 ranks
        sample({{7, 3, 2}}, {T(0)}, {}, {DType::kInt64}),
        sample({{3}}, {T(0)}, {}, {DType::kBool}),  // a rank of 4 holds an empty block
        sample({{2, 9}}, {T(0)}, {}, {DType::kInt32}),  // dim 0 shorter than most meshes
        sample({{1, 8}}, {T(0)}),  // a leading dim of 1: rank order still row-major
        sample({{4, 6}}, {T(0)}),  // all zeros: [0, 2]
        sample({{5, 4}}, {T(0)}, {}, {DType::kComplex64}),
        sample({Shape{}}, {T(0)}),  // 0-d: [1, 0] or [0, 0]
    };
  };
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kDefinitions, define_nonzero);

}  // namespace dtensor::ops
