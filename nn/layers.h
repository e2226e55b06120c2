// Layers and the GPT model (nn/module.h). Shapes: activations [B, T, D]; token ids int64 [B, T].
// Initialization follows GPT-2 (normal(0, 0.02) weights, zero biases, unit norm weights), seeded
// from each parameter's path so that every mesh layout holds the same model.
#pragma once

#include "nn/module.h"

namespace dtensor::nn {

class Linear : public Module {
 public:
  // weight [out, in], bias [out].
  Linear(int64_t in, int64_t out, bool bias, uint64_t seed, double std = 0.02);
  DTensor forward(const DTensor& x) override;  // [..., in] -> [..., out]
 private:
  DTensor* weight_;
  DTensor* bias_ = nullptr;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, uint64_t seed);
  DTensor forward(const DTensor& ids) override;  // int64 [...] -> [..., dim]
 private:
  DTensor* weight_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  DTensor forward(const DTensor& x) override;
 private:
  int64_t dim_;
  double eps_;
  DTensor *weight_, *bias_;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  DTensor forward(const DTensor& x) override;
 private:
  int64_t dim_;
  double eps_;
  DTensor* weight_;
};

// fc (D -> hidden), gelu, proj (hidden -> D).
class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, uint64_t seed);
  DTensor forward(const DTensor& x) override;
};

// Causal multi-head self-attention: q/k/v projections, scaled_dot_product_attention(is_causal),
// output projection.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t dim, int64_t heads, uint64_t seed);
  DTensor forward(const DTensor& x) override;
 private:
  int64_t dim_, heads_;
};

// Pre-norm transformer block: x + attn(ln1(x)), then + mlp(ln2(x)); with experts > 0 the MLP is a
// mixture of experts (nn/moe.h, child "moe", FFN 4 dim per expert).
class Block : public Module {
 public:
  Block(int64_t dim, int64_t heads, uint64_t seed, int64_t experts = 0, int64_t top_k = 2);
  DTensor forward(const DTensor& x) override;
 private:
  std::string ffn_;  // "mlp" or "moe"
};

struct GPTConfig {
  int64_t vocab = 96;
  int64_t seq = 64;
  int64_t dim = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  uint64_t seed = 1234;
  int64_t experts = 0;  // > 0: MoE blocks (nn/moe.h) with this many experts
  int64_t top_k = 2;
};

// Token + position embeddings, blocks, final norm, lm_head (D -> vocab). forward(ids) -> logits.
class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& c);
  DTensor forward(const DTensor& ids) override;  // head(blocks(embed(ids)))
  // The parts of forward, for pipeline stages that hold a range of the layers (nn/pipeline.h):
  // embed: token + position embeddings, ids int64 [B, T] -> [B, T, D]; block: blocks.i, [B, T, D]
  // -> [B, T, D]; head: final norm and lm_head, [B, T, D] -> logits [B, T, vocab].
  DTensor embed(const DTensor& ids);
  DTensor block(int64_t i, const DTensor& x);
  DTensor head(const DTensor& x);
  const GPTConfig& config() const { return c_; }
  // Mean next-token cross-entropy of logits [B, T, V] against targets int64 [B, T] (sequence-sharded
  // logits, context parallel: summed per rank in [T, B] order, divided by B * T).
  static DTensor loss(const DTensor& logits, const DTensor& targets);
  // Sum over the MoE blocks of their load-balancing losses from the last forward (nullopt without
  // experts).
  std::optional<DTensor> aux_loss() const;
 private:
  GPTConfig c_;
};

}  // namespace dtensor::nn
