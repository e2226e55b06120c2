// The recorded DTensor ops as C++ functions, spelled as PyTorch's torch.* / torch.nn.functional.*.
// Each is autograd's call() (autograd/autograd.h) on the ATen op named beside it, so every function:
//   - is collective over the inputs' mesh: every rank of the mesh calls it, in the same order;
//   - takes DTensors on one mesh (else Error naming the op and both meshes) and on one device;
//   - has the semantics of the single-device ATen op on the global tensors (shapes, broadcasting,
//     dtype promotion, uneven shards), whatever the input placements: the engine picks the output
//     placements and the redistributions (DESIGN.md section 4); `explain` shows the choice;
//   - records a backward node when grad mode is on and an input requires grad (DESIGN.md section 5);
//   - throws dtensor::Error naming the op, the global shapes and placements and what is accepted for
//     bad arguments (a dim out of range, shapes that do not broadcast or multiply, a dtype the op does
//     not take), and dtensor::CommError when a collective of the call times out or a peer died.
// Dtypes: floating ops take float32, float64, bfloat16 and float16 (cpu kernels compute in a wider
// type and round the result once); integer and bool tensors are accepted where ATen accepts them
// (unary float ops turn them into float32, like torch; embedding and cross_entropy indices: int64).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"

namespace dtensor::F {

// Pointwise (ATen add.Tensor, sub.Tensor, mul.Tensor, div.Tensor): a and b broadcast (ATen rules);
// result dtype promotes as in ATen. a + alpha * b; a - alpha * b.
DTensor add(const DTensor& a, const DTensor& b, double alpha = 1.0);
DTensor sub(const DTensor& a, const DTensor& b, double alpha = 1.0);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
// With a scalar (add.Scalar, mul.Scalar, div.Scalar): a's shape and dtype.
DTensor add(const DTensor& a, double b);
DTensor mul(const DTensor& a, double b);
DTensor div(const DTensor& a, double b);
// Unary, a's shape and dtype. log/sqrt/rsqrt give nan outside their domain, as ATen does.
// gelu: approximate "none" (erf) or "tanh".
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
// pow.Tensor_Scalar: a ** exponent.
DTensor pow(const DTensor& a, double exponent);
// maximum (nan propagates), where (cond: bool, broadcast with a and b), masked_fill (mask: bool,
// broadcast to a's shape).
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b);
DTensor masked_fill(const DTensor& a, const DTensor& mask, double value);
// to.dtype: a cast; same shape and placements.
DTensor to(const DTensor& a, DType dtype);

// Matrix products. mm: [n, k] x [k, m] -> [n, m]. bmm: [b, n, k] x [b, k, m] -> [b, n, m].
// matmul: ATen's matmul (1-d, 2-d and batched operands, batch dims broadcast). linear: x [..., in],
// w [out, in], bias [out] -> [..., out] (x w^T + bias). A shared k sharded on both sides gives a
// Partial(sum) output (reduced later, where the engine finds it cheapest).
DTensor mm(const DTensor& a, const DTensor& b);
DTensor bmm(const DTensor& a, const DTensor& b);
DTensor matmul(const DTensor& a, const DTensor& b);
DTensor linear(const DTensor& x, const DTensor& w, const std::optional<DTensor>& bias = std::nullopt);
// grouped_mm (torch._grouped_mm; forms in kernels/cpu/grouped_mm.h): a[M, K] @ b[G, K, N] with int32
// offs[G] (cumulative row ends) -> [M, N]; also 2-d x 2-d, 3-d x 2-d and 3-d x 3-d (no offs).
DTensor grouped_mm(const DTensor& a, const DTensor& b, const std::optional<DTensor>& offs);

// Reductions over `dims` (empty: all dims; negative dims count from the end; a dim listed twice is
// an Error). mean over an unevenly sharded dim is exact (global count). amax: nan propagates.
DTensor sum(const DTensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
DTensor mean(const DTensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
DTensor amax(const DTensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);

// softmax / log_softmax over `dim`; a sharded dim is kept sharded (max and sum all-reduces).
DTensor softmax(const DTensor& a, int64_t dim);
DTensor log_softmax(const DTensor& a, int64_t dim);
// Norms over the trailing dims of x given by normalized_shape; weight and bias have that shape.
// rms_norm's eps defaults to the dtype's machine epsilon (as ATen).
DTensor layer_norm(const DTensor& x, std::vector<int64_t> normalized_shape,
                   const std::optional<DTensor>& weight = std::nullopt,
                   const std::optional<DTensor>& bias = std::nullopt, double eps = 1e-5);
DTensor rms_norm(const DTensor& x, std::vector<int64_t> normalized_shape,
                 const std::optional<DTensor>& weight = std::nullopt, std::optional<double> eps = std::nullopt);
// embedding: weight [num, dim], indices int64/int32 of any shape -> [*indices.shape, dim]; an index
// outside [0, num) is an Error. A vocabulary-sharded weight gives a Partial(sum) output.
DTensor embedding(const DTensor& weight, const DTensor& indices);
// cross_entropy: logits [n, classes] (or [classes]), target int64 class indices [n]; reduction
// "mean", "sum" or "none". Class-sharded logits stay sharded (loss parallelism).
DTensor cross_entropy(const DTensor& logits, const DTensor& target, const std::string& reduction = "mean");
// scaled_dot_product_attention: q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev], scale
// 1/sqrt(E); is_causal masks keys after the query position. Heads (a batch dim) may be sharded.
DTensor scaled_dot_product_attention(const DTensor& q, const DTensor& k, const DTensor& v, bool is_causal);
// flex_attention (ops/flex_attention/defs.cc, kernels/cpu/flex_attention.h): attention with
// the mask and score modifier as data. document_ids int64 [N] or [q.size(0), N] (N = L = S),
// alibi_slopes [H] (H = q.size(-3)), block_mask from create_block_mask (computed once, reused by
// every layer and the backward; None: each call builds its own).
struct FlexAttentionOptions {
  bool is_causal = false;
  int64_t window = -1;         // keep |q - k| <= window; -1: none
  int64_t prefix_length = 0;   // keys [0, prefix_length) seen by every query
  double soft_cap = 0;         // 0: none
  std::optional<double> scale;
  int64_t block_size = 64;
  std::optional<DTensor> document_ids, alibi_slopes, block_mask;
};
DTensor flex_attention(const DTensor& q, const DTensor& k, const DTensor& v, const FlexAttentionOptions& o);
// The int32 tile map [1 or B0, ceil(N / block_size), ceil(N / block_size)] of the mask options of
// `o` (document_ids required: pass zeros for a mask without documents).
DTensor create_block_mask(const DTensor& document_ids, const FlexAttentionOptions& o);

// Views and shape ops with ATen's semantics (one -1 allowed in view/reshape; expand: -1 keeps a dim).
// The engine keeps a sharded dim sharded where the view leaves its blocks contiguous, else
// redistributes it first.
DTensor view(const DTensor& a, std::vector<int64_t> shape);
DTensor reshape(const DTensor& a, std::vector<int64_t> shape);
DTensor transpose(const DTensor& a, int64_t d0, int64_t d1);
DTensor permute(const DTensor& a, std::vector<int64_t> dims);
DTensor unsqueeze(const DTensor& a, int64_t dim);
DTensor expand(const DTensor& a, std::vector<int64_t> shape);

}  // namespace dtensor::F
