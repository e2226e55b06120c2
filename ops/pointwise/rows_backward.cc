// Backward of the pointwise rows (ops/pointwise/rows.h): each row's grad column, an expression over
// the DTensors g (output gradient), x / a, b (inputs) and y (output), compiled here with the
// arithmetic below. Binary gradients are summed back over broadcast dims (torch's sum_to_size).
// Rows whose grad is no_grad (bool or integer results) return no gradient, as the comparisons.
#include <cmath>
#include <numbers>

#include "autograd/backward_util.h"
#include "ops/pointwise/row_params.h"
#include "ops/pointwise/rows.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace rowmath {

// The vocabulary of the grad column.
using std::exp;
using std::sqrt;
inline constexpr double kPi = std::numbers::pi;
inline constexpr double kLn2 = std::numbers::ln2;
inline constexpr double kLn10 = std::numbers::ln10;
inline constexpr std::nullopt_t no_grad = std::nullopt;

inline DTensor operator-(const DTensor& a) { return F::neg(a); }
inline DTensor operator+(const DTensor& a, const DTensor& b) { return F::add(a, b); }
inline DTensor operator-(const DTensor& a, const DTensor& b) { return F::sub(a, b); }
inline DTensor operator*(const DTensor& a, const DTensor& b) { return F::mul(a, b); }
inline DTensor operator/(const DTensor& a, const DTensor& b) { return F::div(a, b); }
inline DTensor operator+(const DTensor& a, double b) { return F::add(a, b); }
inline DTensor operator-(const DTensor& a, double b) { return F::add(a, -b); }
inline DTensor operator*(const DTensor& a, double b) { return F::mul(a, b); }
inline DTensor operator/(const DTensor& a, double b) { return F::div(a, b); }
inline DTensor operator+(double a, const DTensor& b) { return F::add(b, a); }
inline DTensor operator-(double a, const DTensor& b) { return F::add(F::neg(b), a); }
inline DTensor operator*(double a, const DTensor& b) { return F::mul(b, a); }
inline DTensor sqrt(const DTensor& a) { return F::sqrt(a); }
inline DTensor exp(const DTensor& a) { return F::exp(a); }
inline DTensor log(const DTensor& a) { return F::log(a); }
using std::log;
// g where the bool `mask` holds, 0 elsewhere.
inline DTensor keep(const DTensor& g, const DTensor& mask) { return F::where(mask, g, F::mul(g, 0.0)); }
inline DTensor ones_like(const DTensor& a) { return full_like(a, 1.0); }
template <typename... A>
DTensor op(const std::string& name, const A&... a) {
  return call_op1(name, {a...});
}
// Comparisons of a DTensor with a number (a replicated 0-d float64 tensor: torch's promotion
// compares a float32 x in float32, as its kernels compare with the scalar), bool results.
inline DTensor number_like(const DTensor& x, double v) {
  return distribute_tensor(Tensor::full({}, v, DType::kFloat64, x.local_tensor().device()), x.mesh(),
                           Placements(x.placements().size(), Replicate()));
}
inline DTensor gt(const DTensor& x, double v) { return op("gt", x, number_like(x, v)); }
inline DTensor ge(const DTensor& x, double v) { return op("ge", x, number_like(x, v)); }
inline DTensor lt(const DTensor& x, double v) { return op("lt", x, number_like(x, v)); }
inline DTensor le(const DTensor& x, double v) { return op("le", x, number_like(x, v)); }
inline DTensor both(const DTensor& a, const DTensor& b) { return op("logical_and", a, b); }
inline DTensor either(const DTensor& a, const DTensor& b) { return op("logical_or", a, b); }
inline DTensor where(const DTensor& mask, const DTensor& a, const DTensor& b) { return F::where(mask, a, b); }

}  // namespace rowmath

namespace {

Grads unary_grad(std::optional<DTensor> g) { return Grads{std::move(g)}; }

Grads binary_grads(const BackwardCtx& c, std::optional<DTensor> ga, std::optional<DTensor> gb) {
  if (ga) ga = sum_to(*ga, c.inputs[0].shape());
  if (gb) gb = sum_to(*gb, c.inputs[1].shape());
  return Grads{std::move(ga), std::move(gb)};
}

}  // namespace

void register_pointwise_row_backward(Registry&) {
  using namespace rowmath;  // NOLINT: the grad column's vocabulary
#define DT_UNARY_GRAD(name, onnx, dtypes, cost, domain, order, f, grad_x)             \
  def(#name, [](const BackwardCtx& c) {                                         \
    [[maybe_unused]] const DTensor g = c.grad(0);                               \
    [[maybe_unused]] const DTensor& x = c.inputs[0];                            \
    [[maybe_unused]] const DTensor& y = c.outputs[0];                           \
    return unary_grad(grad_x);                                                  \
  });
  DT_POINTWISE_UNARY_ROWS(DT_UNARY_GRAD)
#undef DT_UNARY_GRAD
#define DT_BINARY_GRAD(name, onnx, dtypes, cost, other, f, grad_a, grad_b)          \
  def(#name, [](const BackwardCtx& c) {                                         \
    [[maybe_unused]] const DTensor g = c.grad(0);                               \
    [[maybe_unused]] const DTensor& a = c.inputs[0];                            \
    [[maybe_unused]] const DTensor& b = c.inputs[1];                            \
    [[maybe_unused]] const DTensor& y = c.outputs[0];                           \
    return binary_grads(c, grad_a, grad_b);                                     \
  });
  DT_POINTWISE_BINARY_ROWS(DT_BINARY_GRAD)
#undef DT_BINARY_GRAD
  // The rows with parameters: p0, p1, p2 as the kernel gets them (None: NaN).
#define DT_PARAM_GRAD(name, params, dtypes, cost, order, sample, valid, f, grad_x) \
  def(#name, [](const BackwardCtx& c) {                                            \
    [[maybe_unused]] const DTensor g = c.grad(0);                                  \
    [[maybe_unused]] const DTensor& x = c.inputs[0];                               \
    [[maybe_unused]] const DTensor& y = c.outputs[0];                              \
    const RowParams pv = ops::row_params(c.call);                                     \
    [[maybe_unused]] const double p0 = pv.p[0], p1 = pv.p[1], p2 = pv.p[2]; \
    return unary_grad(grad_x);                                                     \
  });
  DT_POINTWISE_PARAM_ROWS(DT_PARAM_GRAD)
#undef DT_PARAM_GRAD
}

DTENSOR_FAMILY_PART("pointwise", kBackward, register_pointwise_row_backward);

}  // namespace dtensor::bw
