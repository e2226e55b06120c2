// Classification losses (host side; per-element terms in loss_kernels.cu, then the reduction
// kernels for "sum" / "mean").
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

// The checked pieces shared by the losses (the CPU kernels' checks, in their order).
struct Problem {
  int64_t class_dim = 0, c = 0, m = 0;
  Shape target_shape;  // the input's shape without the class dim
  Compute comp = Compute::kFloat;
  Tensor weight;  // contiguous [C] of the compute type, or undefined
};

Problem prepare(const char* op, const Tensor& input, const std::optional<Tensor>& weight,
                const std::string& reduction) {
  DT_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", op,
           ": unknown reduction '", reduction, "' (accepted: \"mean\", \"sum\", \"none\")");
  check_cuda(op, input);
  DT_CHECK(is_floating(input.dtype()) && input.dim() >= 1, op,
           ": input must be a floating tensor [C], [N, C] or [N, C, d1, ...], got ",
           dtype_name(input.dtype()), " ", shape_str(input.sizes()));
  Problem p;
  p.class_dim = input.dim() == 1 ? 0 : 1;
  p.c = input.size(p.class_dim);
  p.target_shape = input.sizes();
  p.target_shape.erase(p.target_shape.begin() + p.class_dim);
  p.m = numel(p.target_shape);
  p.comp = compute_of(input.dtype());
  if (weight.has_value()) {
    check_same_device(op, input, *weight, "weight");
    DT_CHECK(is_floating(weight->dtype()) && weight->sizes() == Shape{p.c}, op, ": weight ",
             dtype_name(weight->dtype()), " ", shape_str(weight->sizes()), " does not fit input ",
             shape_str(input.sizes()), " (accepted: floating [", p.c, "])");
    p.weight = contiguous(to(*weight, dtype_of(p.comp)));
  }
  return p;
}

void check_class_target(const char* op, const Tensor& input, const Tensor& target,
                        const Problem& p) {
  check_same_device(op, input, target, "target");
  DT_CHECK(target.dtype() == DType::kInt64 || target.dtype() == DType::kInt32, op,
           ": class-index target must be int64 or int32, got ", dtype_name(target.dtype()), " ",
           shape_str(target.sizes()));
  DT_CHECK(target.sizes() == p.target_shape, op, ": target ", shape_str(target.sizes()),
           " does not match the input (accepted: ", shape_str(p.target_shape), ")");
}

// Runs the per-element kernel on log-probabilities `logp` (the input's layout, compute type or
// not), checks the targets and reduces.
Tensor class_loss(const char* op, const Tensor& logp, const Tensor* target, const Tensor* probs,
                  const Problem& p, const std::string& reduction, int64_t ignore_index, bool smooth,
                  double label_smoothing, DType out_dtype) {
  DeviceGuard guard(logp.device().index);
  const Device dev = logp.device();
  const Blocked in = blocked(logp, p.class_dim, p.class_dim);
  ClassLoss cl;
  cl.outer = in.outer;
  cl.classes = p.c;
  cl.inner = in.inner;
  cl.input = in.t.data_ptr();
  cl.input_dtype = in.t.dtype();
  cl.weight = p.weight.defined() ? p.weight.data_ptr() : nullptr;
  cl.ignore_index = ignore_index;
  cl.smooth = smooth;
  cl.label_smoothing = label_smoothing;
  Tensor tgt, q;
  if (target != nullptr) {
    tgt = contiguous(*target);
    cl.target = tgt.data_ptr();
    cl.target_dtype = tgt.dtype();
  } else {
    q = blocked(*probs, p.class_dim, p.class_dim).t;
    cl.probs = q.data_ptr();
    cl.probs_dtype = q.dtype();
  }
  const DType acc = dtype_of(p.comp);
  Tensor losses = Tensor::empty({p.m}, acc, dev);
  Tensor weights;
  if (target != nullptr && reduction == "mean") weights = Tensor::empty({p.m}, acc, dev);
  Tensor record = zeros({2}, DType::kInt64, dev);
  launch_class_loss(cl, p.comp, losses.data_ptr(), weights.defined() ? weights.data_ptr() : nullptr,
                    static_cast<int64_t*>(record.data_ptr()), stream_of(logp));
  check_launch(op);
  if (target != nullptr && p.m > 0) {
    auto [bad, v] = read_error_record(record);
    DT_CHECK(bad == 0, op, ": target ", v, " out of range for ", p.c,
             " classes (accepted: 0 <= target < ", p.c, ", or ignore_index ", ignore_index, ")");
  }
  if (reduction == "none") return to(losses.view(p.target_shape), out_dtype);
  Tensor s = sum(losses, {}, false);
  if (reduction == "sum") return to(s, out_dtype);
  if (target != nullptr) return to(div(s, sum(weights, {}, false), ""), out_dtype);
  return to(div(s, static_cast<double>(p.m), ""), out_dtype);
}

}  // namespace

Tensor nll_loss(const Tensor& logp, const Tensor& target, const std::optional<Tensor>& weight,
                const std::string& reduction, int64_t ignore_index) {
  const char* op = "nll_loss";
  Problem p = prepare(op, logp, weight, reduction);
  check_class_target(op, logp, target, p);
  return class_loss(op, logp, &target, nullptr, p, reduction, ignore_index, false, 0, logp.dtype());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const std::optional<Tensor>& weight, const std::string& reduction,
                     int64_t ignore_index, double label_smoothing) {
  const char* op = "cross_entropy";
  Problem p = prepare(op, logits, weight, reduction);
  DT_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing ",
           label_smoothing, " out of range (accepted: 0 to 1)");
  check_same_device(op, logits, target, "target");
  const bool probs = is_floating(target.dtype());
  if (probs) {
    DT_CHECK(target.sizes() == logits.sizes(), "cross_entropy: probability target ",
             shape_str(target.sizes()), " must have the input's shape ", shape_str(logits.sizes()));
  } else {
    check_class_target(op, logits, target, p);
  }
  DeviceGuard guard(logits.device().index);
  // log_softmax in the compute type (16-bit inputs are not rounded to 16 bits in between).
  const Tensor logp = log_softmax(to(logits, dtype_of(p.comp)), p.class_dim);
  return class_loss(op, logp, probs ? nullptr : &target, probs ? &target : nullptr, p, reduction,
                    ignore_index, true, label_smoothing, logits.dtype());
}

}  // namespace dtensor::kernels::cuda
