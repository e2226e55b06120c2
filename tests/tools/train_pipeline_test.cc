// Pipeline-parallel training (tools/train_pipeline.h) on thread ranks: 1F1B and interleaved 1F1B
// give the one-rank gradients (first step, every parameter) and losses within kCheckTolerance in
// float64, with tp inside the stages, sequence and loss parallel, micro-batch counts below, equal
// to and not a multiple of the stages; the chunks' parameters cover the model once; the bubble
// figures are reported.
#include <set>

#include "absl/strings/str_cat.h"

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "nn/data.h"
#include "tools/train.h"
#include "tools/train_pipeline.h"

namespace dtensor::tools {
namespace {

TrainOptions small(const std::string& mesh, int layers, int micro_batches, int virtual_stages) {
  TrainOptions o;
  o.mesh = mesh;
  o.steps = 3;
  o.batch = 4;
  o.seq = 16;
  o.dim = 32;
  o.heads = 4;
  o.layers = layers;
  o.micro_batches = micro_batches;
  o.virtual_stages = virtual_stages;
  o.sample_chars = 0;
  o.check = true;
  return o;
}

TrainResult rank0(const TrainOptions& o, int world) {
  validate_train_options(o);
  TrainResult r0;
  run_threads(world, [&](std::shared_ptr<Backend> b) {
    TrainResult r = train_rank(b, o, nullptr);
    if (b->rank() == 0) r0 = std::move(r);
  });
  return r0;
}

TEST(TrainPipeline, GradientsAndLossesEqualOneRanks) {
  struct Case {
    const char* mesh;
    int world, layers, micro_batches, virtual_stages, batch;
    bool sp;
  };
  for (Case c : {Case{"pp=2,tp=2", 4, 2, 4, 1, 4, false},   // 1F1B, tp in each stage
                 Case{"pp=2,tp=2", 4, 4, 4, 2, 4, false},   // interleaved 1F1B
                 Case{"pp=4,tp=1", 4, 8, 4, 2, 4, false},   // interleaved over 4 stages
                 Case{"pp=2,tp=2", 4, 2, 2, 1, 4, true},    // sequence and loss parallel
                 Case{"pp=2", 2, 4, 3, 1, 6, false},        // micro-batches not a multiple of pp
                 Case{"pp=3", 3, 3, 1, 1, 4, false}}) {     // one micro-batch: no overlap at all
    TrainOptions o = small(c.mesh, c.layers, c.micro_batches, c.virtual_stages);
    o.batch = c.batch;
    o.sequence_parallel = o.loss_parallel = c.sp;
    const std::string what = absl::StrCat(c.mesh, " v=", c.virtual_stages, " m=", c.micro_batches);
    TrainResult r = rank0(o, c.world);
    EXPECT_GE(r.gradient_difference, 0.0) << what;
    EXPECT_LE(r.gradient_difference, kCheckTolerance) << what;
    EXPECT_LE(max_relative_loss_difference(o, r.losses), kCheckTolerance) << what;
    // The planner's bubble and the schedule's agree for 1F1B; measured is a fraction of time.
    const int p = c.world / (std::string(c.mesh).find("tp=2") != std::string::npos ? 2 : 1);
    const double v = c.virtual_stages, m = c.micro_batches;
    EXPECT_DOUBLE_EQ(r.bubble_predicted, (p - 1) / v / (m + (p - 1) / v)) << what;
    if (c.virtual_stages == 1) {
      EXPECT_NEAR(r.bubble_simulated, r.bubble_predicted, 1e-12) << what;
    }
    EXPECT_GE(r.bubble_measured, 0.0) << what;
    EXPECT_LT(r.bubble_measured, 1.0) << what;
  }
}

// The sample drawn at the end through the stages equals one rank's (float64, the same steps).
TEST(TrainPipeline, SampleThroughTheStagesEqualsOneRanks) {
  for (int v : {1, 2}) {
    TrainOptions o = small("pp=2,tp=2", 4, 2, v);
    o.sample_chars = 24;
    o.sequence_parallel = v == 2;  // uneven sequence shards as the window grows
    const std::string piped = rank0(o, 4).sample;
    TrainOptions one = o;
    one.mesh = "tp=1";
    one.micro_batches = 0;
    one.virtual_stages = 1;
    one.sequence_parallel = false;
    EXPECT_EQ(piped, rank0(one, 1).sample) << "v=" << v;
    EXPECT_EQ(piped.size(), 4u + 24u);
  }
}

// Every parameter is trained by exactly one stage (its tp ranks), whatever the chunking.
TEST(TrainPipeline, ChunksHoldEveryParameterOnce) {
  nn::GPTConfig cfg;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.layers = 4;
  cfg.seq = 8;
  for (int v : {1, 2}) {
    std::vector<std::vector<std::string>> held(4);
    size_t total = 0;
    run_threads(4, [&](std::shared_ptr<Backend> b) {
      auto mesh = DeviceMesh::create(b, {2, 2}, {"pp", "tp"});
      PipelineGPT model(mesh, cfg, false, false, DType::kFloat64, cpu(), 2, v);
      for (auto& [path, p] : model.parameters()) held[b->rank()].push_back(path);
      if (b->rank() == 0) total = model.model().named_parameters().size();
    });
    EXPECT_EQ(held[0], held[1]);  // tp ranks of one stage
    EXPECT_EQ(held[2], held[3]);
    std::set<std::string> all(held[0].begin(), held[0].end());
    for (const std::string& p : held[2]) EXPECT_TRUE(all.insert(p).second) << p << " in two stages";
    EXPECT_EQ(all.size(), total) << "v=" << v;
  }
}

}  // namespace
}  // namespace dtensor::tools
