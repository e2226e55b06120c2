#include "kernels/cpu/loss.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/norm.h"

namespace dtensor::kernels {
namespace {

// The class scores as contiguous float64 rows [M, C], plus the checked pieces shared by the losses.
struct Problem {
  Tensor rows;  // [M, C] float64
  int64_t m = 0, c = 0;
  std::vector<double> weight;  // [C], all ones when absent
  Shape target_shape;          // the input's shape without the class dim
};

Problem prepare(const char* op, const Tensor& input, const std::optional<Tensor>& weight,
                const std::string& reduction) {
  DT_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", op,
           ": unknown reduction '", reduction, "' (accepted: \"mean\", \"sum\", \"none\")");
  DT_CHECK(is_floating(input.dtype()) && input.dim() >= 1, op,
           ": input must be a floating tensor "
           "[C], [N, C] or [N, C, d1, ...], got ",
           dtype_name(input.dtype()), " ", shape_str(input.sizes()));
  Problem p;
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  p.c = input.size(class_dim);
  p.target_shape = input.sizes();
  p.target_shape.erase(p.target_shape.begin() + class_dim);
  p.m = numel(p.target_shape);
  p.rows = detail::rows_f64(input, class_dim).reshape({p.m, p.c});
  p.weight.assign(p.c, 1.0);
  if (weight.has_value()) {
    DT_CHECK(is_floating(weight->dtype()) && weight->sizes() == Shape{p.c}, op, ": weight ",
             dtype_name(weight->dtype()), " ", shape_str(weight->sizes()), " does not fit input ",
             shape_str(input.sizes()), " (accepted: floating [", p.c, "])");
    p.weight = weight->to_vector<double>();
  }
  return p;
}

// Reduces per-element losses: "none" keeps them (shaped like the target), "sum" adds them up,
// "mean" divides the sum by `denominator`.
Tensor finish(const std::vector<double>& losses, const Problem& p, const std::string& reduction,
              double denominator, DType dtype) {
  if (reduction == "none") {
    return Tensor::from_vector(losses, Shape{static_cast<int64_t>(losses.size())})
        .view(p.target_shape)
        .to(dtype);
  }
  double s = 0;
  for (double v : losses) s += v;
  return Tensor::full({}, reduction == "sum" ? s : s / denominator, dtype);
}

// The class-index target as int64 values, checked against the input and the class count.
std::vector<int64_t> class_targets(const char* op, const Tensor& target, const Problem& p,
                                   int64_t ignore_index) {
  DT_CHECK(target.dtype() == DType::kInt64 || target.dtype() == DType::kInt32, op,
           ": class-index target must be int64 or int32, got ", dtype_name(target.dtype()), " ",
           shape_str(target.sizes()));
  DT_CHECK(target.sizes() == p.target_shape, op, ": target ", shape_str(target.sizes()),
           " does not match the input (accepted: ", shape_str(p.target_shape), ")");
  std::vector<int64_t> t = target.to_vector<int64_t>();
  for (int64_t v : t)
    DT_CHECK(v == ignore_index || (v >= 0 && v < p.c), op, ": target ", v, " out of range for ",
             p.c, " classes (accepted: 0 <= target < ", p.c, ", or ignore_index ", ignore_index,
             ")");
  return t;
}

}  // namespace

Tensor nll_loss(const Tensor& logp, const Tensor& target, const std::optional<Tensor>& weight,
                const std::string& reduction, int64_t ignore_index) {
  DT_KERNEL_ON_DEVICE(nll_loss, logp, target, weight, reduction, ignore_index);
  Problem p = prepare("nll_loss", logp, weight, reduction);
  const std::vector<int64_t> t = class_targets("nll_loss", target, p, ignore_index);
  const double* x = p.rows.data<double>();
  std::vector<double> losses(p.m, 0.0);
  double wsum = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    if (t[i] == ignore_index) continue;
    losses[i] = -p.weight[t[i]] * x[i * p.c + t[i]];
    wsum += p.weight[t[i]];
  }
  return finish(losses, p, reduction, wsum, logp.dtype());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const std::optional<Tensor>& weight, const std::string& reduction,
                     int64_t ignore_index, double label_smoothing) {
  DT_KERNEL_ON_DEVICE(cross_entropy, logits, target, weight, reduction, ignore_index, label_smoothing);
  Problem p = prepare("cross_entropy", logits, weight, reduction);
  DT_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing ",
           label_smoothing, " out of range (accepted: 0 to 1)");
  // log_softmax of each row, in place (on a copy: rows may alias a contiguous float64 input).
  p.rows = p.rows.clone();
  double* x = p.rows.data<double>();
  for (int64_t i = 0; i < p.m; ++i) log_softmax_row(x + i * p.c, x + i * p.c, p.c);
  const double ls = label_smoothing, c = static_cast<double>(p.c);
  std::vector<double> losses(p.m, 0.0);
  if (is_floating(target.dtype())) {  // class probabilities
    DT_CHECK(target.sizes() == logits.sizes(), "cross_entropy: probability target ",
             shape_str(target.sizes()), " must have the input's shape ", shape_str(logits.sizes()));
    const Tensor q = detail::rows_f64(target, logits.dim() == 1 ? 0 : 1);
    const double* qp = q.data<double>();
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.c; ++j)
        losses[i] -= p.weight[j] * ((1 - ls) * qp[i * p.c + j] + ls / c) * x[i * p.c + j];
    return finish(losses, p, reduction, static_cast<double>(p.m), logits.dtype());
  }
  const std::vector<int64_t> t = class_targets("cross_entropy", target, p, ignore_index);
  double wsum = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    if (t[i] == ignore_index) continue;
    double smooth = 0;
    for (int64_t j = 0; j < p.c; ++j) smooth -= p.weight[j] * x[i * p.c + j];
    losses[i] = -(1 - ls) * p.weight[t[i]] * x[i * p.c + t[i]] + ls / c * smooth;
    wsum += p.weight[t[i]];
  }
  return finish(losses, p, reduction, wsum, logits.dtype());
}

}  // namespace dtensor::kernels
