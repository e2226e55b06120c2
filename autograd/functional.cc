#include "autograd/functional.h"

namespace dtensor::F {
namespace {
IValue I(int64_t v) { return IValue(v); }
IValue D(double v) { return IValue(v); }
IValue L(std::vector<int64_t> v) { return IValue(std::move(v)); }
IValue S(std::string v) { return IValue(std::move(v)); }
OpArg opt(const std::optional<DTensor>& t) { return t ? OpArg(*t) : OpArg(IValue{}); }
}  // namespace

DTensor add(const DTensor& a, const DTensor& b, double alpha) { return call1("add", {a, b}, {{"alpha", D(alpha)}}); }
DTensor sub(const DTensor& a, const DTensor& b, double alpha) { return call1("sub", {a, b}, {{"alpha", D(alpha)}}); }
DTensor mul(const DTensor& a, const DTensor& b) { return call1("mul", {a, b}); }
DTensor div(const DTensor& a, const DTensor& b) { return call1("div", {a, b}); }
DTensor add(const DTensor& a, double b) { return call1("add.Scalar", {a, D(b)}); }
DTensor mul(const DTensor& a, double b) { return call1("mul.Scalar", {a, D(b)}); }
DTensor div(const DTensor& a, double b) { return call1("div.Scalar", {a, D(b)}); }
DTensor neg(const DTensor& a) { return call1("neg", {a}); }
DTensor exp(const DTensor& a) { return call1("exp", {a}); }
DTensor log(const DTensor& a) { return call1("log", {a}); }
DTensor sqrt(const DTensor& a) { return call1("sqrt", {a}); }
DTensor rsqrt(const DTensor& a) { return call1("rsqrt", {a}); }
DTensor tanh(const DTensor& a) { return call1("tanh", {a}); }
DTensor sigmoid(const DTensor& a) { return call1("sigmoid", {a}); }
DTensor relu(const DTensor& a) { return call1("relu", {a}); }
DTensor gelu(const DTensor& a, const std::string& approximate) { return call1("gelu", {a}, {{"approximate", S(approximate)}}); }
DTensor silu(const DTensor& a) { return call1("silu", {a}); }
DTensor pow(const DTensor& a, double e) { return call1("pow.Tensor_Scalar", {a, D(e)}); }
DTensor maximum(const DTensor& a, const DTensor& b) { return call1("maximum", {a, b}); }
DTensor where(const DTensor& c, const DTensor& a, const DTensor& b) { return call1("where", {c, a, b}); }
DTensor masked_fill(const DTensor& a, const DTensor& m, double v) { return call1("masked_fill", {a, m, D(v)}); }
DTensor to(const DTensor& a, DType dtype) { return call1("to", {a, S(dtype_name(dtype))}); }

DTensor mm(const DTensor& a, const DTensor& b) { return call1("mm", {a, b}); }
DTensor bmm(const DTensor& a, const DTensor& b) { return call1("bmm", {a, b}); }
DTensor matmul(const DTensor& a, const DTensor& b) { return call1("matmul", {a, b}); }
DTensor linear(const DTensor& x, const DTensor& w, const std::optional<DTensor>& bias) {
  return call1("linear", {x, w, opt(bias)});
}
DTensor grouped_mm(const DTensor& a, const DTensor& b, const std::optional<DTensor>& offs) {
  return call1("grouped_mm", {a, b, opt(offs)});
}

DTensor sum(const DTensor& a, std::vector<int64_t> dims, bool keepdim) {
  return call1("sum", {a, dims.empty() ? IValue{} : L(dims), IValue(keepdim)});
}
DTensor mean(const DTensor& a, std::vector<int64_t> dims, bool keepdim) {
  return call1("mean", {a, dims.empty() ? IValue{} : L(dims), IValue(keepdim)});
}
DTensor amax(const DTensor& a, std::vector<int64_t> dims, bool keepdim) {
  return call1("amax", {a, L(dims), IValue(keepdim)});
}

DTensor softmax(const DTensor& a, int64_t dim) { return call1("softmax", {a, I(dim)}); }
DTensor log_softmax(const DTensor& a, int64_t dim) { return call1("log_softmax", {a, I(dim)}); }
DTensor layer_norm(const DTensor& x, std::vector<int64_t> ns, const std::optional<DTensor>& w,
                   const std::optional<DTensor>& b, double eps) {
  return call1("layer_norm", {x, L(ns), opt(w), opt(b), D(eps)});
}
DTensor rms_norm(const DTensor& x, std::vector<int64_t> ns, const std::optional<DTensor>& w, std::optional<double> eps) {
  return call1("rms_norm", {x, L(ns), opt(w), eps ? D(*eps) : IValue{}});
}
DTensor embedding(const DTensor& w, const DTensor& idx) { return call1("embedding", {w, idx}); }
DTensor cross_entropy(const DTensor& logits, const DTensor& target, const std::string& reduction) {
  return call1("cross_entropy", {logits, target}, {{"reduction", S(reduction)}});
}
DTensor scaled_dot_product_attention(const DTensor& q, const DTensor& k, const DTensor& v, bool is_causal) {
  return call1("scaled_dot_product_attention", {q, k, v}, {{"is_causal", IValue(is_causal)}});
}

DTensor flex_attention(const DTensor& q, const DTensor& k, const DTensor& v, const FlexAttentionOptions& o) {
  std::vector<std::pair<std::string, OpArg>> kw{{"document_ids", opt(o.document_ids)},
                                                {"alibi_slopes", opt(o.alibi_slopes)},
                                                {"block_mask", opt(o.block_mask)},
                                                {"is_causal", IValue(o.is_causal)},
                                                {"window", I(o.window)},
                                                {"prefix_length", I(o.prefix_length)},
                                                {"soft_cap", D(o.soft_cap)},
                                                {"block_size", I(o.block_size)}};
  if (o.scale) kw.emplace_back("scale", D(*o.scale));
  return call1("flex_attention", {q, k, v}, kw);
}

DTensor create_block_mask(const DTensor& document_ids, const FlexAttentionOptions& o) {
  return call1("create_block_mask", {document_ids},
               {{"is_causal", IValue(o.is_causal)},
                {"window", I(o.window)},
                {"prefix_length", I(o.prefix_length)},
                {"block_size", I(o.block_size)}});
}

DTensor view(const DTensor& a, std::vector<int64_t> s) { return call1("view", {a, L(s)}); }
DTensor reshape(const DTensor& a, std::vector<int64_t> s) { return call1("reshape", {a, L(s)}); }
DTensor transpose(const DTensor& a, int64_t d0, int64_t d1) { return call1("transpose", {a, I(d0), I(d1)}); }
DTensor permute(const DTensor& a, std::vector<int64_t> dims) { return call1("permute", {a, L(dims)}); }
DTensor unsqueeze(const DTensor& a, int64_t dim) { return call1("unsqueeze", {a, I(dim)}); }
DTensor expand(const DTensor& a, std::vector<int64_t> s) { return call1("expand", {a, L(s)}); }

}  // namespace dtensor::F
