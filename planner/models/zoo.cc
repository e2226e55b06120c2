#include "planner/models/zoo.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtensor::planner::models {
namespace {

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kI64 = DType::kInt64;

BuildArg I(int64_t v) { return IValue(v); }
BuildArg F(double v) { return IValue(v); }
BuildArg L(std::vector<int64_t> v) { return IValue(std::move(v)); }
BuildArg Str(const std::string& s) { return IValue(s); }
BuildArg Bool(bool v) { return IValue(v); }
BuildArg None() { return IValue(); }

struct Config {
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, positions = 0;
  int64_t experts = 0, top_k = 0;
  double eps = 1e-5;
};

// Attention core on q [b, h, s, d], k and v [b, h, s, d] (flash-attention style: the scores are fused).
TensorId attention(GraphBuilder& b, TensorId q, TensorId k, TensorId v, std::optional<TensorId> mask, int64_t hd) {
  TensorId kt = b.op1("attn.k_T", "transpose", {k, I(2), I(3)});
  b.set_fused(true);
  TensorId s = b.op1("attn.scores", "matmul", {q, kt});
  s = b.op1("attn.scale", "mul.Scalar", {s, F(1.0 / std::sqrt(static_cast<double>(hd)))});
  if (mask) s = b.op1("attn.mask", "masked_fill", {s, *mask, F(-1e30)});
  TensorId p = b.op1("attn.softmax", "softmax", {s, I(-1)});
  b.set_fused(false);
  return b.op1("attn.context", "matmul", {p, v});
}

// [b, h, s, d] -> [b, s, h*d]
TensorId merge_heads(GraphBuilder& b, TensorId ctx, int64_t B, int64_t S, int64_t width) {
  TensorId t = b.op1("attn.merge_t", "transpose", {ctx, I(1), I(2)});
  return b.op1("attn.merge", "reshape", {t, L({B, S, width})});
}

// ---- GPT-2 ----------------------------------------------------------------------------------------

TensorId layer_norm(GraphBuilder& b, const std::string& name, TensorId x, int64_t h, double eps) {
  TensorId w = b.param(name + ".weight", {h}, kBf16);
  TensorId bias = b.param(name + ".bias", {h}, kBf16);
  return b.op1(name, "layer_norm", {x, L({h}), w, bias, F(eps)});
}

// A pre-LN transformer block with fused QKV (Megatron per-head layout) and a GELU MLP: GPT-2, ViT.
TensorId gelu_block(GraphBuilder& b, TensorId x, const Config& c, int64_t B, int64_t S, std::optional<TensorId> mask,
                    const std::string& gelu) {
  const int64_t h = c.hidden, nh = c.heads, hd = h / nh;
  TensorId x1 = layer_norm(b, "ln_1", x, h, c.eps);
  TensorId wqkv = b.param("attn.qkv.weight", {3 * h, h}, kBf16);
  TensorId bqkv = b.param("attn.qkv.bias", {3 * h}, kBf16);
  TensorId qkv = b.op1("attn.qkv", "linear", {x1, wqkv, bqkv}, {}, "column");
  TensorId heads = b.op1("attn.heads", "view", {qkv, L({B, S, nh, 3 * hd})});
  TensorId q = b.op1("attn.q", "slice", {heads, I(3), I(0), I(hd)});
  TensorId k = b.op1("attn.k", "slice", {heads, I(3), I(hd), I(2 * hd)});
  TensorId v = b.op1("attn.v", "slice", {heads, I(3), I(2 * hd), I(3 * hd)});
  q = b.op1("attn.q_t", "transpose", {q, I(1), I(2)});
  k = b.op1("attn.k_t", "transpose", {k, I(1), I(2)});
  v = b.op1("attn.v_t", "transpose", {v, I(1), I(2)});
  TensorId ctx = merge_heads(b, attention(b, q, k, v, mask, hd), B, S, h);
  TensorId wo = b.param("attn.proj.weight", {h, h}, kBf16);
  TensorId bo = b.param("attn.proj.bias", {h}, kBf16);
  TensorId a = b.op1("attn.proj", "linear", {ctx, wo, bo}, {}, "row");
  x = b.op1("attn.residual", "add", {x, a});
  TensorId x2 = layer_norm(b, "ln_2", x, h, c.eps);
  TensorId w1 = b.param("mlp.fc.weight", {c.ffn, h}, kBf16);
  TensorId b1 = b.param("mlp.fc.bias", {c.ffn}, kBf16);
  TensorId f = b.op1("mlp.fc", "linear", {x2, w1, b1}, {}, "column");
  f = b.op1("mlp.gelu", "gelu", {f}, {{"approximate", Str(gelu)}});
  TensorId w2 = b.param("mlp.proj.weight", {h, c.ffn}, kBf16);
  TensorId b2 = b.param("mlp.proj.bias", {h}, kBf16);
  TensorId m = b.op1("mlp.proj", "linear", {f, w2, b2}, {}, "row");
  return b.op1("mlp.residual", "add", {x, m});
}

void check_seq(const std::string& model, int64_t seq, int64_t positions) {
  DT_CHECK(seq >= 1 && seq <= positions, "model ", model, ": sequence length ", seq, " is outside [1, ", positions,
           "] (its position table)");
}

ModelGraph gpt2(const std::string& name, const Config& c, const ModelOptions& o) {
  const int64_t B = o.batch, S = o.seq, h = c.hidden;
  check_seq(name, S, c.positions);
  GraphBuilder b(name, absl::StrCat("GPT-2: ", c.layers, " layers, hidden ", h, ", ", c.heads, " heads, vocab ",
                                    c.vocab, "; batch ", B, " x ", S, " tokens"));
  b.set_block("embed");
  TensorId tokens = b.input("tokens", {B, S}, kI64);
  TensorId targets = b.input("targets", {B * S}, kI64);
  TensorId pos = b.constant("positions", {S}, kI64);
  TensorId mask = b.constant("causal_mask", {S, S}, DType::kBool);
  TensorId wte = b.param("wte", {c.vocab, h}, kBf16);
  TensorId wpe = b.param("wpe", {c.positions, h}, kBf16);
  TensorId te = b.op1("tok_embed", "embedding", {wte, tokens}, {}, "vocab");
  TensorId pe = b.op1("pos_embed", "embedding", {wpe, pos});
  TensorId x = b.op1("embed", "add", {te, pe});
  b.set_block("layer");
  for (int l = 0; l < c.layers; ++l) {
    b.set_layer(l);
    b.set_scope(absl::StrCat("layers.", l, "."));
    x = gelu_block(b, x, c, B, S, mask, "tanh");
  }
  b.set_layer(-1);
  b.set_scope("");
  b.set_block("head");
  x = layer_norm(b, "ln_f", x, h, c.eps);
  TensorId logits = b.op1("lm_head", "linear", {x, wte}, {}, "column");  // tied to wte
  logits = b.op1("logits_flat", "view", {logits, L({B * S, c.vocab})});
  b.op1("loss", "cross_entropy", {logits, targets}, {{"reduction", Str("sum")}});
  return b.finish(o.training, o.optimizer);
}

// ---- Llama 3 / Mixtral ----------------------------------------------------------------------------

TensorId rms_norm(GraphBuilder& b, const std::string& name, TensorId x, int64_t h, double eps) {
  TensorId w = b.param(name + ".weight", {h}, kBf16);
  return b.op1(name, "rms_norm", {x, L({h}), w, F(eps)});
}

TensorId rope(GraphBuilder& b, const std::string& n, TensorId t, TensorId cos, TensorId sin, int64_t hd) {
  TensorId x1 = b.op1(n + ".rot_lo", "slice", {t, I(3), I(0), I(hd / 2)});
  TensorId x2 = b.op1(n + ".rot_hi", "slice", {t, I(3), I(hd / 2), I(hd)});
  // A fused rotary kernel: the intermediates are neither saved nor written to memory.
  b.set_fused(true);
  TensorId nx2 = b.op1(n + ".rot_neg", "neg", {x2});
  TensorId rot = b.op1(n + ".rot", "cat", {std::vector<TensorId>{nx2, x1}, I(3)});
  TensorId a = b.op1(n + ".cos", "mul", {t, cos});
  TensorId s = b.op1(n + ".sin", "mul", {rot, sin});
  b.set_fused(false);
  return b.op1(n + ".rope", "add", {a, s});
}

// [b, s, kv, d] -> [b, heads, s, d] (transpose, then repeat each KV head `rep` times).
TensorId kv_heads(GraphBuilder& b, const std::string& n, TensorId t, int64_t B, int64_t S, int64_t kv, int64_t rep,
                  int64_t hd) {
  t = b.op1(n + "_t", "transpose", {t, I(1), I(2)});
  if (rep == 1) return t;
  t = b.op1(n + "_u", "unsqueeze", {t, I(2)});
  t = b.op1(n + "_rep", "expand", {t, L({B, kv, rep, S, hd})});
  return b.op1(n + "_heads", "reshape", {t, L({B, kv * rep, S, hd})});
}

TensorId gqa_attention(GraphBuilder& b, TensorId x, const Config& c, int64_t B, int64_t S, TensorId mask,
                       TensorId cos, TensorId sin) {
  const int64_t h = c.hidden, nh = c.heads, kv = c.kv_heads, hd = h / nh, rep = nh / kv;
  TensorId xn = rms_norm(b, "attn_norm", x, h, c.eps);
  TensorId w = b.param("attn.qkv.weight", {(nh + 2 * kv) * hd, h}, kBf16);
  TensorId qkv = b.op1("attn.qkv", "linear", {xn, w}, {}, "column");
  TensorId g = b.op1("attn.groups", "view", {qkv, L({B, S, kv, (rep + 2) * hd})});
  TensorId q = b.op1("attn.q", "slice", {g, I(3), I(0), I(rep * hd)});
  q = b.op1("attn.q_heads", "reshape", {q, L({B, S, nh, hd})});
  TensorId k = b.op1("attn.k", "slice", {g, I(3), I(rep * hd), I((rep + 1) * hd)});
  TensorId v = b.op1("attn.v", "slice", {g, I(3), I((rep + 1) * hd), I((rep + 2) * hd)});
  q = rope(b, "attn.q", q, cos, sin, hd);
  k = rope(b, "attn.k", k, cos, sin, hd);
  q = b.op1("attn.q_t", "transpose", {q, I(1), I(2)});
  k = kv_heads(b, "attn.k", k, B, S, kv, rep, hd);
  v = kv_heads(b, "attn.v", v, B, S, kv, rep, hd);
  TensorId ctx = merge_heads(b, attention(b, q, k, v, mask, hd), B, S, h);
  TensorId wo = b.param("attn.o.weight", {h, nh * hd}, kBf16);
  TensorId a = b.op1("attn.o", "linear", {ctx, wo}, {}, "row");
  return b.op1("attn.residual", "add", {x, a});
}

TensorId swiglu_mlp(GraphBuilder& b, TensorId x, const Config& c, int64_t B, int64_t S) {
  const int64_t h = c.hidden;
  TensorId xn = rms_norm(b, "ffn_norm", x, h, c.eps);
  TensorId w13 = b.param("ffn.w13.weight", {2 * c.ffn, h}, kBf16);
  TensorId gu = b.op1("ffn.w13", "linear", {xn, w13}, {}, "column");
  gu = b.op1("ffn.pairs", "view", {gu, L({B, S, c.ffn, 2})});
  TensorId gate = b.op1("ffn.gate", "select", {gu, I(3), I(0)});
  TensorId up = b.op1("ffn.up", "select", {gu, I(3), I(1)});
  TensorId act = b.op1("ffn.mul", "mul", {b.op1("ffn.silu", "silu", {gate}), up});
  TensorId w2 = b.param("ffn.w2.weight", {h, c.ffn}, kBf16);
  TensorId y = b.op1("ffn.w2", "linear", {act, w2}, {}, "row");
  return b.op1("ffn.residual", "add", {x, y});
}

TensorId moe_mlp(GraphBuilder& b, TensorId x, const Config& c, int64_t B, int64_t S) {
  const int64_t h = c.hidden, E = c.experts, T = B * S;
  TensorId xn = rms_norm(b, "ffn_norm", x, h, c.eps);
  TensorId t = b.op1("moe.tokens", "reshape", {xn, L({T, h})});
  TensorId wr = b.param("moe.router.weight", {E, h}, kBf16);
  TensorId logits = b.op1("moe.router", "linear", {t, wr});
  TensorId probs = b.op1("moe.probs", "softmax", {logits, I(1)});
  TensorId d = b.op1("moe.dispatch", "moe_dispatch", {t, probs, I(c.top_k), F(1.0)});
  const int64_t C = b.meta(d).shape[1];
  TensorId w13 = b.param("moe.experts.w13", {E, h, 2 * c.ffn}, kBf16);
  TensorId gu = b.op1("moe.w13", "grouped_mm", {d, w13}, {}, "column");
  gu = b.op1("moe.pairs", "view", {gu, L({E, C, c.ffn, 2})});
  TensorId gate = b.op1("moe.gate", "select", {gu, I(3), I(0)});
  TensorId up = b.op1("moe.up", "select", {gu, I(3), I(1)});
  TensorId act = b.op1("moe.mul", "mul", {b.op1("moe.silu", "silu", {gate}), up});
  TensorId w2 = b.param("moe.experts.w2", {E, c.ffn, h}, kBf16);
  TensorId y = b.op1("moe.w2", "grouped_mm", {act, w2}, {}, "row");
  TensorId o = b.op1("moe.combine", "moe_combine", {y, probs, I(c.top_k)});
  o = b.op1("moe.out", "reshape", {o, L({B, S, h})});
  return b.op1("ffn.residual", "add", {x, o});
}

ModelGraph llama(const std::string& name, const std::string& title, const Config& c, const ModelOptions& o) {
  const int64_t B = o.batch, S = o.seq, h = c.hidden, hd = c.hidden / c.heads;
  check_seq(name, S, c.positions);
  std::string desc = absl::StrCat(title, ": ", c.layers, " layers, dim ", h, ", ", c.heads, " heads (", c.kv_heads,
                                  " KV), ");
  if (c.experts > 0) absl::StrAppend(&desc, c.experts, " experts (top-", c.top_k, ") of FFN ", c.ffn);
  else absl::StrAppend(&desc, "FFN ", c.ffn);
  absl::StrAppend(&desc, ", vocab ", c.vocab, "; batch ", B, " x ", S, " tokens");
  GraphBuilder b(name, desc);
  b.set_block("embed");
  TensorId tokens = b.input("tokens", {B, S}, kI64);
  TensorId targets = b.input("targets", {B * S}, kI64);
  TensorId mask = b.constant("causal_mask", {S, S}, DType::kBool);
  TensorId cos = b.constant("rope_cos", {S, 1, hd}, kBf16);
  TensorId sin = b.constant("rope_sin", {S, 1, hd}, kBf16);
  TensorId emb = b.param("tok_embeddings", {c.vocab, h}, kBf16);
  TensorId x = b.op1("tok_embed", "embedding", {emb, tokens}, {}, "vocab");
  b.set_block("layer");
  for (int l = 0; l < c.layers; ++l) {
    b.set_layer(l);
    b.set_scope(absl::StrCat("layers.", l, "."));
    x = gqa_attention(b, x, c, B, S, mask, cos, sin);
    x = c.experts > 0 ? moe_mlp(b, x, c, B, S) : swiglu_mlp(b, x, c, B, S);
  }
  b.set_layer(-1);
  b.set_scope("");
  b.set_block("head");
  x = rms_norm(b, "norm", x, h, c.eps);
  TensorId w = b.param("lm_head.weight", {c.vocab, h}, kBf16);
  TensorId logits = b.op1("lm_head", "linear", {x, w}, {}, "column");
  logits = b.op1("logits_flat", "view", {logits, L({B * S, c.vocab})});
  b.op1("loss", "cross_entropy", {logits, targets}, {{"reduction", Str("sum")}});
  return b.finish(o.training, o.optimizer);
}

// ---- ViT ------------------------------------------------------------------------------------------

ModelGraph vit(const std::string& name, const Config& c, const ModelOptions& o) {
  const int64_t B = o.batch, h = c.hidden, img = 224, patch = 16, grid = img / patch, S = grid * grid + 1;
  GraphBuilder b(name, absl::StrCat("ViT-L/16: ", c.layers, " layers, hidden ", h, ", ", c.heads, " heads, MLP ",
                                    c.ffn, ", 224x224 images, ", S, " tokens; batch ", B));
  b.set_block("embed");
  TensorId images = b.input("images", {B, 3, img, img}, kBf16);
  TensorId labels = b.input("labels", {B}, kI64);
  TensorId wp = b.param("patch.weight", {h, 3, patch, patch}, kBf16);
  TensorId bp = b.param("patch.bias", {h}, kBf16);
  TensorId p = b.op1("patch", "convolution",
                     {images, wp, bp, L({patch, patch}), L({0, 0}), L({1, 1}), Bool(false), L({0, 0}), I(1)});
  p = b.op1("patch_flat", "flatten", {p, I(2)});
  p = b.op1("patch_t", "transpose", {p, I(1), I(2)});
  TensorId cls = b.param("cls_token", {1, 1, h}, kBf16);
  TensorId clsb = b.op1("cls_expand", "expand", {cls, L({B, 1, h})});
  TensorId x = b.op1("tokens", "cat", {std::vector<TensorId>{clsb, p}, I(1)});
  TensorId pos = b.param("pos_embed", {1, S, h}, kBf16);
  x = b.op1("embed", "add", {x, pos});
  b.set_block("layer");
  for (int l = 0; l < c.layers; ++l) {
    b.set_layer(l);
    b.set_scope(absl::StrCat("layers.", l, "."));
    x = gelu_block(b, x, c, B, S, std::nullopt, "none");
  }
  b.set_layer(-1);
  b.set_scope("");
  b.set_block("head");
  x = layer_norm(b, "norm", x, h, c.eps);
  TensorId first = b.op1("cls_out", "select", {x, I(1), I(0)});
  TensorId w = b.param("head.weight", {c.vocab, h}, kBf16);
  TensorId bias = b.param("head.bias", {c.vocab}, kBf16);
  TensorId logits = b.op1("head", "linear", {first, w, bias}, {}, "column");
  b.op1("loss", "cross_entropy", {logits, labels}, {{"reduction", Str("sum")}});
  return b.finish(o.training, o.optimizer);
}

// ---- ResNet-50 ------------------------------------------------------------------------------------

TensorId conv_bn(GraphBuilder& b, const std::string& n, TensorId x, int64_t cin, int64_t cout, int64_t k,
                 int64_t stride, int64_t pad, bool relu, bool training) {
  TensorId w = b.param(n + ".conv.weight", {cout, cin, k, k}, kBf16);
  TensorId y = b.op1(n + ".conv", "convolution",
                     {x, w, None(), L({stride, stride}), L({pad, pad}), L({1, 1}), Bool(false), L({0, 0}), I(1)});
  TensorId g = b.param(n + ".bn.weight", {cout}, kBf16);
  TensorId beta = b.param(n + ".bn.bias", {cout}, kBf16);
  // Training normalizes with the batch's statistics (synchronized when the batch is split);
  // inference with the running ones.
  y = b.op1(n + ".bn", "batch_norm", {y, g, beta}, {{"training", Bool(training)}});
  return relu ? b.op1(n + ".relu", "relu", {y}) : y;
}

ModelGraph resnet50(const std::string& name, const ModelOptions& o) {
  const int64_t B = o.batch;
  const int64_t blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  int total = 0;
  for (int64_t n : blocks) total += static_cast<int>(n);
  const int depth = o.layers > 0 ? std::min(o.layers, total) : total;
  GraphBuilder b(name, absl::StrCat("ResNet-50: bottleneck blocks [3, 4, 6, 3] (", depth,
                                    " used), 224x224 images, 1000 classes; batch ", B));
  b.set_block("embed");
  TensorId images = b.input("images", {B, 3, 224, 224}, kBf16);
  TensorId labels = b.input("labels", {B}, kI64);
  TensorId x = conv_bn(b, "stem", images, 3, 64, 7, 2, 3, true, o.training);
  x = b.op("stem.pool", "max_pool2d_with_indices", {x, L({3, 3}), L({2, 2}), L({1, 1})})[0];
  b.set_block("layer");
  int64_t cin = 64;
  int index = 0;
  for (int s = 0; s < 4 && index < depth; ++s) {
    for (int64_t i = 0; i < blocks[s] && index < depth; ++i, ++index) {
      b.set_layer(index);
      b.set_scope(absl::StrCat("layer", s + 1, ".", i, "."));
      const int64_t w = widths[s], stride = (i == 0 && s > 0) ? 2 : 1;
      TensorId y = conv_bn(b, "a", x, cin, w, 1, 1, 0, true, o.training);
      y = conv_bn(b, "b", y, w, w, 3, stride, 1, true, o.training);
      y = conv_bn(b, "c", y, w, 4 * w, 1, 1, 0, false, o.training);
      TensorId id = x;
      if (i == 0) id = conv_bn(b, "downsample", x, cin, 4 * w, 1, stride, 0, false, o.training);
      y = b.op1("residual", "add", {y, id});
      x = b.op1("out", "relu", {y});
      cin = 4 * w;
    }
  }
  b.set_layer(-1);
  b.set_scope("");
  b.set_block("head");
  x = b.op1("avgpool", "adaptive_avg_pool2d", {x, L({1, 1})});
  x = b.op1("flatten", "flatten", {x, I(1)});
  TensorId w = b.param("fc.weight", {1000, cin}, kBf16);
  TensorId bias = b.param("fc.bias", {1000}, kBf16);
  TensorId logits = b.op1("fc", "linear", {x, w, bias}, {}, "column");
  b.op1("loss", "cross_entropy", {logits, labels}, {{"reduction", Str("sum")}});
  return b.finish(o.training, o.optimizer);
}

Config with_layers(Config c, const ModelOptions& o) {
  if (o.layers > 0) c.layers = o.layers;
  return c;
}

}  // namespace

const std::vector<ModelEntry>& zoo() {
  static const auto* z = new std::vector<ModelEntry>{
      {"gpt2", {"gpt2-124m"}, "GPT-2 124M (12 layers, hidden 768, 12 heads)", 1, 1024,
       [](const ModelOptions& o) {
         return gpt2("gpt2", with_layers({12, 768, 12, 12, 3072, 50257, 1024, 0, 0, 1e-5}, o), o);
       }},
      {"char-gpt", {}, "dtensor train's character-level GPT (2 layers, hidden 64, 4 heads, vocab 96 unless given)", 8, 64,
       [](const ModelOptions& o) {
         const int64_t h = o.hidden > 0 ? o.hidden : 64, nh = o.heads > 0 ? o.heads : 4;
         DT_CHECK(h % nh == 0, "model char-gpt: hidden ", h, " is not a multiple of heads ", nh);
         return gpt2("char-gpt", with_layers({2, h, nh, nh, 4 * h, o.vocab > 0 ? o.vocab : 96, o.seq, 0, 0, 1e-5}, o), o);
       }},
      {"gpt2-xl", {"gpt2-1.5b"}, "GPT-2 1.5B (48 layers, hidden 1600, 25 heads)", 1, 1024,
       [](const ModelOptions& o) {
         return gpt2("gpt2-xl", with_layers({48, 1600, 25, 25, 6400, 50257, 1024, 0, 0, 1e-5}, o), o);
       }},
      {"llama3-8b", {"llama-3-8b"}, "Llama-3 8B (32 layers, dim 4096, GQA 32/8 heads, FFN 14336)", 1, 8192,
       [](const ModelOptions& o) {
         return llama("llama3-8b", "Llama-3 8B", with_layers({32, 4096, 32, 8, 14336, 128256, 8192, 0, 0, 1e-5}, o), o);
       }},
      {"llama3-70b", {"llama-3-70b"}, "Llama-3 70B (80 layers, dim 8192, GQA 64/8 heads, FFN 28672)", 1, 8192,
       [](const ModelOptions& o) {
         return llama("llama3-70b", "Llama-3 70B", with_layers({80, 8192, 64, 8, 28672, 128256, 8192, 0, 0, 1e-5}, o), o);
       }},
      // The Llama 3 Herd of Models (2024), Table 3; meta-llama/Llama-3.1-405B's config.json (its
      // max_position_embeddings, 131072: the paper's long-context stage trains at that length).
      {"llama3-405b", {"llama-3-405b", "llama3.1-405b"},
       "Llama-3 405B (126 layers, dim 16384, GQA 128/8 heads, FFN 53248)", 1, 8192,
       [](const ModelOptions& o) {
         return llama("llama3-405b", "Llama-3 405B",
                      with_layers({126, 16384, 128, 8, 53248, 128256, 131072, 0, 0, 1e-5}, o), o);
       }},
      {"mixtral-8x7b", {"mixtral"}, "Mixtral 8x7B (32 layers, dim 4096, 8 experts top-2 of FFN 14336)", 1, 4096,
       [](const ModelOptions& o) {
         return llama("mixtral-8x7b", "Mixtral 8x7B",
                      with_layers({32, 4096, 32, 8, 14336, 32000, 32768, 8, 2, 1e-5}, o), o);
       }},
      {"vit-l16", {"vit-l/16", "vit-large"}, "ViT-L/16 (24 layers, hidden 1024, 16 heads, 224x224)", 32, 0,
       [](const ModelOptions& o) { return vit("vit-l16", with_layers({24, 1024, 16, 16, 4096, 1000, 0, 0, 0, 1e-6}, o), o); }},
      {"resnet50", {"resnet-50"}, "ResNet-50 (bottleneck [3, 4, 6, 3], 224x224, 1000 classes)", 32, 0,
       [](const ModelOptions& o) { return resnet50("resnet50", o); }},
  };
  return *z;
}

const ModelEntry& find_model(const std::string& name) {
  std::vector<std::string> names;
  for (const ModelEntry& m : zoo()) {
    if (m.name == name) return m;
    for (const std::string& a : m.aliases)
      if (a == name) return m;
    names.push_back(m.name);
  }
  DT_FAIL("unknown model '", name, "'; known models: ", absl::StrJoin(names, ", "),
          " (dtensor plan --list-models), or give a graph file with --graph FILE.json");
}

int64_t data_parallel_size(const MeshSpec& mesh) {
  int64_t n = 1;
  for (int i = 0; i < mesh.ndim(); ++i) {
    const std::string& d = mesh.names[i];
    if (d == "tp" || d == "cp" || d == "sp" || d == "ep" || d == "pp") continue;
    n *= mesh.shape[i];
  }
  return n;
}

ModelGraph build_model(const std::string& name, ModelOptions options, const MeshSpec& mesh) {
  const ModelEntry& m = find_model(name);
  if (options.batch == 0) options.batch = m.micro_batch * data_parallel_size(mesh);
  if (options.seq == 0) options.seq = m.default_seq > 0 ? m.default_seq : 1;
  DT_CHECK(options.batch >= 1, "model ", name, ": batch must be >= 1, got ", options.batch);
  DT_CHECK(options.layers >= 0, "model ", name, ": layers must be >= 0, got ", options.layers);
  return m.build(options);
}

}  // namespace dtensor::planner::models
