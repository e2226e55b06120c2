// Tensor-parallel styles and parallelize() (PyTorch's torch.distributed.tensor.parallel, in C++).
// A style decides the placement of a module's parameters on the tensor-parallel mesh dim and
// redistributes its input and output there; other mesh dims (e.g. data parallel) keep parameters
// replicated and activations as they come. Megatron-LM's layouts (Shoeybi et al. 2019; Korthikanti
// et al. 2022 for sequence parallelism):
//   ColwiseParallel   weight [out, in] S(0), bias S(0); input -> R; output S(-1)
//   RowwiseParallel   weight S(1), bias R (added once, as a Partial); input -> S(-1); output -> R
//                     (all_reduce) or S(1) (reduce_scatter, with sequence parallelism)
//   SequenceParallel  parameters R; input -> S(1) (the sequence dim); output S(1)
//   PrepareModuleInput  no parameters; input -> the given placement (e.g. S(1) -> R: all_gather once
//                     before the q/k/v projections)
// For Embedding (weight [V, D]): Colwise shards D (output S(-1)), Rowwise shards V (a masked
// Partial output, reduced to `output`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace dtensor::nn {

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  // Placement on the tp mesh dim of parameter `name` ("weight", "bias") of module m.
  virtual Placement param_placement(const std::string& name, const Module& m) const = 0;
  // Placements over every mesh dim of parameter `name`: by default param_placement on tp_dim and
  // Replicate elsewhere (ExpertParallel in nn/moe.h also shards on the "ep" dim).
  virtual Placements param_placements(const std::string& name, const Module& m, const DeviceMesh& mesh,
                                      int tp_dim) const;
  virtual DTensor prepare_input(const DTensor& x, const Module& m) const;
  virtual DTensor prepare_output(const DTensor& y, const Module& m) const;
  virtual std::string str() const = 0;

 protected:
  // x with its placement on m's tp mesh dim set to p (differentiable; no-op if already there).
  static DTensor on_tp(const DTensor& x, const Module& m, Placement p);
};

struct ColwiseParallel : ParallelStyle {
  Placement input = Replicate();
  Placement output = Shard(-1);
  Placement param_placement(const std::string& name, const Module& m) const override;
  DTensor prepare_input(const DTensor& x, const Module& m) const override;
  DTensor prepare_output(const DTensor& y, const Module& m) const override;
  std::string str() const override { return "ColwiseParallel"; }
};

struct RowwiseParallel : ParallelStyle {
  Placement input = Shard(-1);
  Placement output = Replicate();
  Placement param_placement(const std::string& name, const Module& m) const override;
  DTensor prepare_input(const DTensor& x, const Module& m) const override;
  DTensor prepare_output(const DTensor& y, const Module& m) const override;
  std::string str() const override;
};

struct SequenceParallel : ParallelStyle {
  int64_t seq_dim = 1;
  Placement param_placement(const std::string&, const Module&) const override { return Replicate(); }
  DTensor prepare_input(const DTensor& x, const Module& m) const override;
  DTensor prepare_output(const DTensor& y, const Module& m) const override;
  std::string str() const override { return "SequenceParallel"; }
};

struct PrepareModuleInput : ParallelStyle {
  Placement input = Replicate();
  Placement param_placement(const std::string&, const Module&) const override { return Replicate(); }
  DTensor prepare_input(const DTensor& x, const Module& m) const override;
  std::string str() const override { return "PrepareModuleInput(" + input.str() + ")"; }
};

// {module path pattern -> style}; '*' matches any run of characters within a path component
// ("blocks.*.attn.q_proj"). The first matching entry wins.
using ParallelPlan = std::vector<std::pair<std::string, std::shared_ptr<const ParallelStyle>>>;

// Places every parameter of `model` on `mesh`: the matched style's placement on mesh dim `tp_dim`,
// Replicate elsewhere (and for unmatched modules); sets styles. Parameters are initialized from their
// full values (the same on every rank) in `dtype`, so any mesh gives the same model. Collective-free
// the first time; re-parallelizing an already placed model gathers each parameter first.
// Throws dtensor::Error for a bad tp_dim or a pattern that matches no module.
// `device`: where the local blocks live (cpu, or a CUDA device: then the ops run their CUDA kernels,
// dispatch/dispatch.h).
void parallelize(Module& model, MeshPtr mesh, const ParallelPlan& plan, int tp_dim,
                 DType dtype = DType::kFloat32, Device device = cpu());
void parallelize_module(Module& m, const ParallelStyle* style, MeshPtr mesh, int tp_dim,
                        DType dtype = DType::kFloat32, Device device = cpu());
bool path_matches(const std::string& pattern, const std::string& path);

// The Megatron plan for the GPT of nn/gpt.h, with or without sequence parallelism; with
// loss_parallel the logits stay sharded over the vocabulary.
ParallelPlan megatron_plan(bool sequence_parallel, bool loss_parallel);

}  // namespace dtensor::nn
