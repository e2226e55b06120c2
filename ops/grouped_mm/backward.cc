// Backward of grouped_mm: each form's gradients are grouped_mm calls of another form with the same
// offs (X^T is the transpose of the last two dims):
//   a[M,K] @ b[G,K,N]: da = grouped_mm(dO, b^T)        (rows),   db = grouped_mm(a^T, dO) (over M)
//   a[M,K] @ b[K,N]:   da = grouped_mm(dO, b^T)        (cols),   db = grouped_mm(a^T, dO) (rows)
//   a[G,M,K] @ b[K,N]: da = grouped_mm(dO, b^T)        (over N), db = grouped_mm(a^T, dO) (cols)
//   a[G,M,K] @ b[G,K,N]: da = dO b^T, db = a^T dO      (batched)
// So in every form da = grouped_mm(dO, b^T, offs) and db = grouped_mm(a^T, dO, offs).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_grouped_mm_backward(Registry&) {
  def("grouped_mm", [](const BackwardCtx& c) {
    const DTensor g = c.grad(0);
    std::optional<DTensor> offs;
    if (c.call.tensor_index("offs") >= 0) offs = c.inputs[c.call.tensor_index("offs")];
    auto t = [](const DTensor& x) { return F::transpose(x, -1, -2); };
    Grads grads{F::grouped_mm(g, t(c.inputs[1]), offs), F::grouped_mm(t(c.inputs[0]), g, offs)};
    if (offs) grads.push_back(std::nullopt);
    return grads;
  });
}

DTENSOR_FAMILY_PART("grouped_mm", kBackward, register_grouped_mm_backward);

}  // namespace dtensor::bw
