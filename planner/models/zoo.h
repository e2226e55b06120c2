// The planner's model zoo: graph builders for real architectures from their published
// configurations, as forward graphs of registry ops (planner/graph.h) plus, for training, one optimizer
// vertex per parameter.
//
//   gpt2 (124M)      Radford et al. 2019 / HF "gpt2": 12 layers, hidden 768, 12 heads, vocab 50257, 1024 positions
//   gpt2-xl (1.5B)   HF "gpt2-xl": 48 layers, hidden 1600, 25 heads
//   char-gpt         dtensor train's character-level GPT (nn/layers.h) at its sizes (ModelOptions'
//                    layers, hidden, heads, vocab, seq; defaults 2, 64, 4, 96, 64), priced as a GPT-2
//                    block stack (pre-LN, GELU MLP of 4 x hidden, learned positions, tied head): what
//                    dtensor train --elastic prices its candidate meshes with
//   llama3-8b        Meta Llama 3 params.json: 32 layers, dim 4096, 32 heads, 8 KV heads, FFN 14336, vocab 128256
//   llama3-70b       80 layers, dim 8192, 64 heads, 8 KV heads, FFN 28672, vocab 128256
//   mixtral-8x7b     Mistral AI: 32 layers, dim 4096, 32 heads, 8 KV heads, 8 experts of FFN 14336, top-2, vocab 32000
//   vit-l16          Dosovitskiy et al. 2021: 224x224 images, 16x16 patches, 24 layers, hidden 1024, 16 heads, MLP 4096
//   resnet50         He et al. 2016: bottleneck blocks [3, 4, 6, 3], widths 64..512 (x4), 1000 classes
//
// Modelling choices (all compute the published function; only weight layouts differ):
//   - Fused QKV projection in Megatron-LM's per-head (per KV group) interleaved layout, split by
//     slicing the head dim, so that a column split of the weight keeps whole heads on a rank; SwiGLU
//     gate and up projections fused likewise ([.., ffn, 2], split by select).
//   - Attention as registry ops (matmul, mul.Scalar, masked_fill, softmax, matmul); the [b, h, s, s]
//     intermediates are marked fused (flash attention: not saved, not written to memory).
//   - Training loss: cross_entropy with reduction 'sum' (its rules split the batch; 'mean' runs
//     replicated in this engine), on logits flattened to [tokens, vocab].
//   - Every tensor is bfloat16 (mixed precision: fp32 master weights live in the optimizer state).
//   - Mixture of experts: router linear + softmax, moe_dispatch to [experts, capacity, hidden]
//     (capacity factor 1), experts as grouped_mm (3-d x 3-d: the expert dim shards as expert
//     parallel, FFN columns/rows as tensor parallel, ops/grouped_mm/rules.cc), moe_combine
//     (ops/planned/defs.cc).
//   - ResNet: convolution and batch_norm (training: synchronized statistics when the batch is split)
//     are the planned family's ops (ops/planned/); max_pool2d_with_indices and adaptive_avg_pool2d are
//     the engine's.
// Errors: dtensor::Error for an unknown model (listing the known ones) or options the model cannot
// take (a sequence longer than its positions, batch < 1).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "planner/graph.h"
#include "planner/mesh.h"

namespace dtensor::planner::models {

struct ModelOptions {
  int64_t batch = 0;  // global batch (sequences or images); 0: micro_batch x data-parallel ranks
  int64_t seq = 0;    // tokens per sequence; 0: the model's default
  int layers = 0;     // 0: the published depth
  // Sizes for the models that take them (char-gpt, dtensor train's model); 0: the model's default.
  int64_t hidden = 0, heads = 0, vocab = 0;
  bool training = true;
  std::string optimizer = "adamw";
};

struct ModelEntry {
  std::string name;
  std::vector<std::string> aliases;
  std::string description;
  int64_t micro_batch = 1;  // default batch per data-parallel rank
  int64_t default_seq = 0;  // 0 for image models
  std::function<ModelGraph(const ModelOptions&)> build;  // options with batch and seq filled in
};

const std::vector<ModelEntry>& zoo();
// Throws dtensor::Error listing the known models.
const ModelEntry& find_model(const std::string& name);
// Product of the mesh dims that split the batch by default: every dim not named tp, cp, sp, ep or pp.
int64_t data_parallel_size(const MeshSpec& mesh);
// Builds a model, filling defaults: batch = micro_batch * data_parallel_size(mesh) when 0.
ModelGraph build_model(const std::string& name, ModelOptions options, const MeshSpec& mesh);

}  // namespace dtensor::planner::models
