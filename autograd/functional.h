// The recorded DTensor ops as C++ functions (PyTorch's torch.* / F.* spellings). Each is autograd's
// call() on the op of the same ATen name: collective over the inputs' mesh, differentiable.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"

namespace dtensor::F {

DTensor add(const DTensor& a, const DTensor& b, double alpha = 1.0);
DTensor sub(const DTensor& a, const DTensor& b, double alpha = 1.0);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
DTensor add(const DTensor& a, double b);
DTensor mul(const DTensor& a, double b);
DTensor div(const DTensor& a, double b);
DTensor neg(const DTensor& a);
DTensor exp(const DTensor& a);
DTensor log(const DTensor& a);
DTensor sqrt(const DTensor& a);
DTensor rsqrt(const DTensor& a);
DTensor tanh(const DTensor& a);
DTensor sigmoid(const DTensor& a);
DTensor relu(const DTensor& a);
DTensor gelu(const DTensor& a, const std::string& approximate = "none");
DTensor silu(const DTensor& a);
DTensor pow(const DTensor& a, double exponent);
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b);
DTensor masked_fill(const DTensor& a, const DTensor& mask, double value);
DTensor to(const DTensor& a, DType dtype);

DTensor mm(const DTensor& a, const DTensor& b);
DTensor bmm(const DTensor& a, const DTensor& b);
DTensor matmul(const DTensor& a, const DTensor& b);
DTensor linear(const DTensor& x, const DTensor& w, const std::optional<DTensor>& bias = std::nullopt);

// dims empty: all dims.
DTensor sum(const DTensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
DTensor mean(const DTensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
DTensor amax(const DTensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);

DTensor softmax(const DTensor& a, int64_t dim);
DTensor log_softmax(const DTensor& a, int64_t dim);
DTensor layer_norm(const DTensor& x, std::vector<int64_t> normalized_shape,
                   const std::optional<DTensor>& weight = std::nullopt,
                   const std::optional<DTensor>& bias = std::nullopt, double eps = 1e-5);
DTensor rms_norm(const DTensor& x, std::vector<int64_t> normalized_shape,
                 const std::optional<DTensor>& weight = std::nullopt, std::optional<double> eps = std::nullopt);
DTensor embedding(const DTensor& weight, const DTensor& indices);
DTensor cross_entropy(const DTensor& logits, const DTensor& target, const std::string& reduction = "mean");
DTensor scaled_dot_product_attention(const DTensor& q, const DTensor& k, const DTensor& v, bool is_causal);

DTensor view(const DTensor& a, std::vector<int64_t> shape);
DTensor reshape(const DTensor& a, std::vector<int64_t> shape);
DTensor transpose(const DTensor& a, int64_t d0, int64_t d1);
DTensor permute(const DTensor& a, std::vector<int64_t> dims);
DTensor unsqueeze(const DTensor& a, int64_t dim);
DTensor expand(const DTensor& a, std::vector<int64_t> shape);

}  // namespace dtensor::F
