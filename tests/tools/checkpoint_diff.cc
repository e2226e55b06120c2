// checkpoint_diff TEXT SEQ DIM LAYERS HEADS DIR_A DIR_B TOLERANCE: loads two `dtensor train --check`
// checkpoints (float64 parameters and AdamW moments, saved on any mesh) onto one rank and prints the
// largest absolute difference over every tensor, naming it, and both steps. Exit 0 when the steps are
// equal and the difference is at most TOLERANCE, 1 otherwise (2 for bad arguments). For the elastic
// training tests (train_elastic_test.sh): an independent reference, read by the checkpoint loader.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dtensor/collectives/threads_backend.h"
#include "nn/checkpoint.h"
#include "nn/data.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/parallel.h"

int main(int argc, char** argv) {
  using namespace dtensor;
  if (argc != 9) {
    std::fprintf(stderr, "usage: checkpoint_diff TEXT SEQ DIM LAYERS HEADS DIR_A DIR_B TOLERANCE\n");
    return 2;
  }
  const int64_t seq = std::atoll(argv[2]);
  nn::CharDataset data = nn::CharDataset::from_file(argv[1], seq + 2);
  nn::GPTConfig cfg;
  cfg.vocab = data.vocab();
  cfg.seq = seq;
  cfg.dim = std::atoll(argv[3]);
  cfg.layers = std::atoll(argv[4]);
  cfg.heads = std::atoll(argv[5]);
  const double tol = std::atof(argv[8]);
  int rc = 1;
  run_threads(1, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {1}, {"tp"});
    nn::GPT a(cfg), c(cfg);
    nn::parallelize(a, mesh, nn::megatron_plan(false, false), 0, DType::kFloat64);
    nn::parallelize(c, mesh, nn::megatron_plan(false, false), 0, DType::kFloat64);
    nn::AdamW oa(a.named_parameters()), oc(c.named_parameters());
    nn::NamedTensors sa = a.named_parameters(), sc = c.named_parameters();
    for (auto& s : oa.state()) sa.push_back(s);
    for (auto& s : oc.state()) sc.push_back(s);
    const int64_t step_a = nn::load_checkpoint(argv[6], sa), step_c = nn::load_checkpoint(argv[7], sc);
    double worst = 0;
    std::string where = "(none)";
    for (size_t i = 0; i < sa.size(); ++i) {
      std::vector<double> x = sa[i].second->local_tensor().to_vector<double>();
      std::vector<double> y = sc[i].second->local_tensor().to_vector<double>();
      for (size_t k = 0; k < x.size(); ++k) {
        const double d = std::abs(x[k] - y[k]);
        if (!(d <= worst)) worst = std::isnan(d) ? HUGE_VAL : d, where = sa[i].first;
      }
    }
    std::printf("checkpoint_diff: steps %lld and %lld, %zu tensors, largest difference %.3g (%s), tolerance %.3g\n",
                static_cast<long long>(step_a), static_cast<long long>(step_c), sa.size(), worst, where.c_str(), tol);
    rc = step_a == step_c && worst <= tol ? 0 : 1;
  });
  return rc;
}
