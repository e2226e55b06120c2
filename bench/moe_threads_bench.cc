// One MoE layer (nn/moe.h) forward + backward on ep = 1, 2, 4 thread ranks, 256 tokens per rank
// (weak scaling), float32: step time, and the bytes rank 0 sends per step against the formula
//   all_to_all_v bytes = 2 (rows sent + rows received) x dim x 4 bytes
// (dispatch sends, combine returns what was received, the backward does both reversed), with the
// rows counted by the layer (MoE::rows_sent / rows_received) and, for comparison, the expectation
// under uniform routing, 4 x tokens x top_k x (ep - 1) / ep rows. The rest of the measured bytes are the E-sized
// terms: the per-expert counts all_gather, the load-balancing mean and the router gradient's
// all_reduce ([E, D]).
// Run: bazel run -c opt //bench:moe_threads_bench
#include <chrono>
#include <cstdio>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "nn/moe.h"

namespace dtensor {
namespace {

constexpr int64_t kDim = 64, kHidden = 256, kExperts = 8, kTopK = 2, kBatchPerRank = 4, kSeq = 64;
constexpr int kWarmup = 2, kSteps = 10;

void run(int ep) {
  double ms = 0, bytes = 0, rows = 0;
  run_threads(ep, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {ep}, {"ep"});
    nn::MoE moe(kDim, kHidden, kExperts, kTopK, 7);
    nn::ExpertParallel style;
    nn::parallelize_module(moe, &style, mesh, 0);
    Tensor x = random_tensor({kBatchPerRank * ep, kSeq, kDim}, DType::kFloat32, 11);
    DTensor xd = distribute_tensor(x, mesh, {Shard(0)});
    set_requires_grad(xd);
    for (int s = 0; s < kWarmup + kSteps; ++s) {
      const int64_t before = mesh->stats().bytes_sent;
      auto t0 = std::chrono::steady_clock::now();
      DTensor y = moe(xd);
      backward(F::add(F::sum(F::mul(y, y)), *moe.aux_loss()));
      auto t1 = std::chrono::steady_clock::now();
      if (s >= kWarmup && b->rank() == 0) {
        ms += std::chrono::duration<double, std::milli>(t1 - t0).count() / kSteps;
        bytes += static_cast<double>(mesh->stats().bytes_sent - before) / kSteps;
        rows += static_cast<double>(moe.rows_sent() + moe.rows_received()) / kSteps;
      }
    }
  });
  const double tokens = kBatchPerRank * kSeq;
  const double formula = 2 * rows * kDim * 4, uniform = 4 * tokens * kTopK * (ep - 1.0) / ep * kDim * 4;
  std::printf("| %d | %.0f | %.1f | %.0f | %.0f | %.0f | %.0f |\n", ep, tokens, ms, bytes, formula, uniform,
              bytes - formula);
}

}  // namespace
}  // namespace dtensor

int main() {
  std::printf("| ep | tokens/rank | ms/step | bytes sent (rank 0) | a2a formula | uniform-routing a2a | rest |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int ep : {1, 2, 4}) dtensor::run(ep);
  return 0;
}
