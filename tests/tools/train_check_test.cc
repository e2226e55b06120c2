// `dtensor train --check`: the float64 comparison with one rank passes on correct tensor
// parallelism (tp=2, tp=4, dp x tp, sequence and loss parallel) within kCheckTolerance, and fails on a
// real sharding bug: ranks whose "replicated" inputs and parameters differ (each rank seeded
// differently, as when ranks read different batches or initialize on their own).
#include <cmath>

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "tools/train.h"

namespace dtensor::tools {
namespace {

TrainOptions small(const std::string& mesh) {
  TrainOptions o;
  o.mesh = mesh;
  o.steps = 30;
  o.batch = 4;
  o.seq = 16;
  o.dim = 32;
  o.heads = 4;
  o.layers = 2;
  o.sample_chars = 0;
  o.check = true;
  return o;
}

// Trains on `world` thread ranks; rank r uses seed o.seed + r * seed_skew. Returns rank 0's losses.
std::vector<double> sharded_losses(const TrainOptions& o, int world, uint64_t seed_skew = 0) {
  std::vector<double> losses;
  run_threads(world, [&](std::shared_ptr<Backend> b) {
    TrainOptions mine = o;
    mine.seed += static_cast<uint64_t>(b->rank()) * seed_skew;
    TrainResult r = train_rank(b, mine, nullptr);
    if (b->rank() == 0) losses = r.losses;
  });
  return losses;
}

TEST(TrainCheck, CorrectShardingPassesTheFloat64Bound) {
  struct Case {
    const char* mesh;
    int world;
    bool sp;
  };
  for (Case c : {Case{"tp=2", 2, false}, Case{"tp=4", 4, false}, Case{"dp=2,tp=2", 4, true}}) {
    TrainOptions o = small(c.mesh);
    o.sequence_parallel = o.loss_parallel = c.sp;
    const double worst = max_relative_loss_difference(o, sharded_losses(o, c.world));
    EXPECT_LE(worst, kCheckTolerance) << c.mesh;
    EXPECT_GE(worst, 0.0);
  }
}

TEST(TrainCheck, AShardingBugFailsTheCheck) {
  TrainOptions o = small("tp=2");
  const double worst = max_relative_loss_difference(o, sharded_losses(o, 2, /*seed_skew=*/1));
  EXPECT_GT(worst, 1e3 * kCheckTolerance) << "inconsistent replicas went unnoticed";
}

}  // namespace
}  // namespace dtensor::tools
