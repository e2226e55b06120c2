// AdamW (Loshchilov & Hutter 2019, torch.optim.AdamW's update) whose state is sharded like its
// parameter: m and v are DTensors with the parameter's placements, so the update is local.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace dtensor::nn {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, DTensor*>> params, AdamWOptions options = {});
  // One update of every parameter that has a gradient; parameters are updated in place (their
  // local blocks), so the modules see the new values. Throws if a gradient's placements differ
  // from its parameter's.
  void step();
  void zero_grad();
  int64_t steps() const { return t_; }
  // State for checkpoints: (name, tensor) for every m and v ("<param>.exp_avg", ".exp_avg_sq").
  std::vector<std::pair<std::string, DTensor*>> state();
  void set_steps(int64_t t) { t_ = t; }

 private:
  std::vector<std::pair<std::string, DTensor*>> params_;
  std::vector<DTensor> m_, v_;
  AdamWOptions o_;
  int64_t t_ = 0;
};

}  // namespace dtensor::nn
