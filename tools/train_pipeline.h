// Pipeline-parallel training of the GPT (`dtensor train --mesh pp=P,tp=N`): the layers split into
// P * V consecutive chunks (V virtual stages per rank, nn/pipeline_schedule.h), the embedding in
// chunk 0 and the final norm, head and loss in the last; each chunk tensor-parallel over the tp
// ranks of its stage (Megatron's plan, as without pp); the global batch split into micro-batches
// run by 1F1B (V = 1) or interleaved 1F1B (V > 1), activations and their gradients sent between the
// stages' ranks with the same tp coordinate. Gradients accumulate over the micro-batches and the
// optimizer steps after the flush.
#pragma once

#include <memory>
#include <ostream>
#include <vector>

#include "nn/layers.h"
#include "nn/parallel.h"
#include "nn/pipeline.h"
#include "tools/train.h"

namespace dtensor::tools {

// One rank's part of a pipeline-parallel GPT.
class PipelineGPT {
 public:
  // mesh: dims ("pp", "tp"). Every rank builds the whole model (so every layout holds the same
  // parameters) and parallelizes it over its stage's tp ranks; it runs and trains only its chunks.
  // Throws dtensor::Error unless pp * virtual_stages divides cfg.layers, micro_batches >= 1 and, for
  // virtual_stages > 1, a multiple of pp (nn/pipeline_schedule.h).
  PipelineGPT(MeshPtr mesh, const nn::GPTConfig& cfg, bool sequence_parallel, bool loss_parallel, DType dtype,
              Device device, int micro_batches, int virtual_stages);
  // Forward and backward of one global batch: tokens int64 [B, T + 1] (the same on every rank;
  // inputs the first T, targets the last T), B a multiple of the micro-batches (Error otherwise).
  // Gradients accumulate into parameters(). Returns the batch's mean loss on every rank.
  double forward_backward(const Tensor& tokens, nn::PipelineStepTimes* times = nullptr);
  // Forward only, no gradients, of ids int64 [1, n] (n <= the model's seq; the same on every rank)
  // through every chunk in turn (each stage sends its activation to the next): the logits of the
  // last position, vocab values, on every rank.
  std::vector<double> next_token_logits(const Tensor& ids);
  // The parameters of this rank's chunks (paths as in nn::GPT::named_parameters).
  std::vector<std::pair<std::string, DTensor*>> parameters() const { return owned_; }
  // Which chunks hold the parameter at `path` (nn::GPT paths): -1 for none.
  int chunk_of(const std::string& path) const;
  nn::GPT& model() { return *model_; }
  const MeshPtr& stage_mesh() const { return tp_mesh_; }

 private:
  MeshPtr mesh_, tp_mesh_;
  std::unique_ptr<nn::GPT> model_;
  int stages_, virtual_stages_, micro_batches_, layers_per_chunk_;
  bool sequence_parallel_;
  DType dtype_;
  Device device_;
  std::vector<std::vector<nn::PipelineAction>> program_;
  std::vector<std::pair<std::string, DTensor*>> owned_;
};

// The planner's bubble fraction for p stages, m micro-batches and v virtual stages
// (planner/pipeline.h: (p - 1) / v over m + (p - 1) / v).
double planner_bubble_fraction(int stages, int micro_batches, int virtual_stages);

// train_rank for a mesh with a pp dim (tools/train.h); also fills TrainResult's bubble figures.
TrainResult train_pipeline_rank(std::shared_ptr<Backend> backend, const TrainOptions& o, std::ostream* log);

}  // namespace dtensor::tools
