#include "nn/layers.h"

#include "absl/strings/str_cat.h"
#include "nn/moe.h"

namespace dtensor::nn {

Linear::Linear(int64_t in, int64_t out, bool bias, uint64_t seed, double std) {
  weight_ = &add_parameter("weight", normal_init({out, in}, std, seed));
  if (bias) bias_ = &add_parameter("bias", Tensor::zeros({out}, DType::kFloat64));
}
DTensor Linear::forward(const DTensor& x) {
  return F::linear(x, *weight_, bias_ ? std::optional<DTensor>(*bias_) : std::nullopt);
}

Embedding::Embedding(int64_t num, int64_t dim, uint64_t seed) {
  weight_ = &add_parameter("weight", normal_init({num, dim}, 0.02, seed));
}
DTensor Embedding::forward(const DTensor& ids) { return F::embedding(*weight_, ids); }

LayerNorm::LayerNorm(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  weight_ = &add_parameter("weight", Tensor::full({dim}, 1.0, DType::kFloat64));
  bias_ = &add_parameter("bias", Tensor::zeros({dim}, DType::kFloat64));
}
DTensor LayerNorm::forward(const DTensor& x) { return F::layer_norm(x, {dim_}, *weight_, *bias_, eps_); }

RMSNorm::RMSNorm(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  weight_ = &add_parameter("weight", Tensor::full({dim}, 1.0, DType::kFloat64));
}
DTensor RMSNorm::forward(const DTensor& x) { return F::rms_norm(x, {dim_}, *weight_, eps_); }

MLP::MLP(int64_t dim, int64_t hidden, uint64_t seed) {
  add_module("fc", std::make_shared<Linear>(dim, hidden, true, seed_of("fc", seed)));
  add_module("proj", std::make_shared<Linear>(hidden, dim, true, seed_of("proj", seed)));
}
DTensor MLP::forward(const DTensor& x) { return (*child("proj"))(F::gelu((*child("fc"))(x), "tanh")); }

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, uint64_t seed) : dim_(dim), heads_(heads) {
  DT_CHECK(dim % heads == 0, "CausalSelfAttention: dim ", dim, " must be a multiple of heads ", heads);
  for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"})
    add_module(n, std::make_shared<Linear>(dim, dim, true, seed_of(n, seed)));
}
DTensor CausalSelfAttention::forward(const DTensor& x) {
  const int64_t B = x.shape()[0], T = x.shape()[1], hd = dim_ / heads_;
  auto heads = [&](const char* proj) {  // [B, T, D] -> [B, H, T, hd]
    return F::transpose(F::view((*child(proj))(x), {B, T, heads_, hd}), 1, 2);
  };
  DTensor y = F::scaled_dot_product_attention(heads("q_proj"), heads("k_proj"), heads("v_proj"), true);
  y = F::reshape(F::transpose(y, 1, 2), {B, T, dim_});
  return (*child("out_proj"))(y);
}

Block::Block(int64_t dim, int64_t heads, uint64_t seed, int64_t experts, int64_t top_k) {
  add_module("ln1", std::make_shared<LayerNorm>(dim));
  add_module("attn", std::make_shared<CausalSelfAttention>(dim, heads, seed_of("attn", seed)));
  add_module("ln2", std::make_shared<LayerNorm>(dim));
  ffn_ = experts > 0 ? "moe" : "mlp";
  if (experts > 0)
    add_module("moe", std::make_shared<MoE>(dim, 4 * dim, experts, top_k, seed_of("moe", seed)));
  else
    add_module("mlp", std::make_shared<MLP>(dim, 4 * dim, seed_of("mlp", seed)));
}
DTensor Block::forward(const DTensor& x) {
  DTensor h = F::add(x, (*child("attn"))((*child("ln1"))(x)));
  return F::add(h, (*child(ffn_))((*child("ln2"))(h)));
}

GPT::GPT(const GPTConfig& c) : c_(c) {
  add_module("tok_emb", std::make_shared<Embedding>(c.vocab, c.dim, seed_of("tok_emb", c.seed)));
  add_module("pos_emb", std::make_shared<Embedding>(c.seq, c.dim, seed_of("pos_emb", c.seed)));
  for (int64_t i = 0; i < c.layers; ++i)
    add_module(absl::StrCat("blocks.", i), std::make_shared<Block>(c.dim, c.heads, seed_of(absl::StrCat("blocks.", i), c.seed), c.experts, c.top_k));
  add_module("ln_f", std::make_shared<LayerNorm>(c.dim));
  add_module("lm_head", std::make_shared<Linear>(c.dim, c.vocab, false, seed_of("lm_head", c.seed)));
}

DTensor GPT::forward(const DTensor& ids) {
  DTensor x = embed(ids);
  for (int64_t i = 0; i < c_.layers; ++i) x = block(i, x);
  return head(x);
}

DTensor GPT::embed(const DTensor& ids) {
  const int64_t T = ids.shape()[1];
  DT_CHECK(T <= c_.seq, "GPT: sequence of ", T, " tokens exceeds the model's ", c_.seq);
  DTensor tok = (*child("tok_emb"))(ids);
  // Positions 0..T-1 as a [1, T] index tensor (its embedding broadcasts over the batch), split on the
  // sequence dim where the ids are (context parallel): each rank embeds only its own positions.
  Tensor pos = Tensor::arange(T, DType::kInt64).view({1, T}).to(ids.local_tensor().device());
  Placements pos_pl(ids.mesh()->ndim(), Replicate());
  for (size_t m = 0; m < pos_pl.size(); ++m)
    if (ids.placements()[m].is_shard() && ids.placements()[m].dim == 1) pos_pl[m] = Shard(1);
  DTensor p = distribute_tensor(pos, ids.mesh(), pos_pl);
  return F::add(tok, (*child("pos_emb"))(p));
}

DTensor GPT::block(int64_t i, const DTensor& x) {
  DT_CHECK(i >= 0 && i < c_.layers, "GPT: block ", i, " of a model with ", c_.layers, " blocks");
  return (*child(absl::StrCat("blocks.", i)))(x);
}

DTensor GPT::head(const DTensor& x) { return (*child("lm_head"))((*child("ln_f"))(x)); }

std::optional<DTensor> GPT::aux_loss() const {
  std::optional<DTensor> total;
  for (auto& [path, m] : const_cast<GPT*>(this)->named_modules()) {
    auto* moe = dynamic_cast<MoE*>(m);
    if (moe == nullptr || !moe->aux_loss()) continue;
    total = total ? F::add(*total, *moe->aux_loss()) : *moe->aux_loss();
  }
  return total;
}

DTensor GPT::loss(const DTensor& logits, const DTensor& targets) {
  const int64_t V = logits.shape()[2];
  const int64_t n = logits.shape()[0] * logits.shape()[1];
  // Sequence-sharded logits (context parallel) flatten as [T * B, V]: a [B * T] merge would split
  // the sequence shard and gather the logits; [T, B] keeps it the leading, contiguous dim, and the
  // mean over all tokens is the same (only the summation order changes).
  bool seq_sharded = false;
  for (const Placement& pl : logits.placements()) seq_sharded |= pl.is_shard() && pl.dim == 1;
  DTensor flat = seq_sharded ? F::reshape(F::transpose(logits, 0, 1), {n, V}) : F::reshape(logits, {n, V});
  DTensor t = seq_sharded ? F::reshape(F::transpose(targets, 0, 1), {n}) : F::reshape(targets, {n});
  return F::div(F::cross_entropy(flat, t, "sum"), static_cast<double>(n));
}

}  // namespace dtensor::nn
