// `dtensor train --check`: the float64 comparison with one rank passes on correct tensor
// parallelism (tp=2, tp=4, dp x tp, sequence and loss parallel) within kCheckTolerance, and fails on a
// real sharding bug: ranks whose "replicated" inputs and parameters differ (each rank seeded
// differently, as when ranks read different batches or initialize on their own). `--record`: its
// initial checkpoint and batches replay the run (what bench/train_vs_torch.py relies on).
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/data.h"
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

// Trains on `world` thread ranks; rank r uses seed o.seed + r * seed_skew. Returns rank 0's result.
TrainResult rank0_result(const TrainOptions& o, int world, uint64_t seed_skew = 0) {
  TrainResult r0;
  run_threads(world, [&](std::shared_ptr<Backend> b) {
    TrainOptions mine = o;
    mine.seed += static_cast<uint64_t>(b->rank()) * seed_skew;
    TrainResult r = train_rank(b, mine, nullptr);
    if (b->rank() == 0) r0 = std::move(r);
  });
  return r0;
}

// rank0_result's losses.
std::vector<double> sharded_losses(const TrainOptions& o, int world, uint64_t seed_skew = 0) {
  return rank0_result(o, world, seed_skew).losses;
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

// --rank-weights: batch rows split 3:1 (and 1:2:1) over dp by a weighted shard, tp beside it.
TEST(TrainCheck, WeightedDataParallelPassesTheFloat64Bound) {
  struct Case {
    const char* mesh;
    const char* weights;
    int world;
  };
  for (Case c : {Case{"dp=2,tp=2", "3,1", 4}, Case{"dp=3,tp=1", "1,2,1", 3}}) {
    TrainOptions o = small(c.mesh);
    o.steps = 10;
    o.rank_weights = c.weights;
    validate_train_options(o);
    const double worst = max_relative_loss_difference(o, sharded_losses(o, c.world));
    EXPECT_LE(worst, kCheckTolerance) << c.mesh << " " << c.weights;
  }
}

TEST(TrainCheck, AShardingBugFailsTheCheck) {
  TrainOptions o = small("tp=2");
  const double worst = max_relative_loss_difference(o, sharded_losses(o, 2, /*seed_skew=*/1));
  EXPECT_GT(worst, 1e3 * kCheckTolerance) << "inconsistent replicas went unnoticed";
}

// A run recorded on tp=2 (then checked against one rank, as --check does) holds its own losses and
// batches; started again on one rank from the recorded initial checkpoint (step 0: else the batches
// would shift), it gives the recorded losses.
TEST(TrainRecord, TheRecordReplaysTheRun) {
  const char* test_tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path base = test_tmp != nullptr ? test_tmp : std::filesystem::temp_directory_path();
  const std::string dir = (base / ("dtensor_record_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  TrainOptions o = small("tp=2");
  o.steps = 5;
  o.record = dir;
  const std::vector<double> losses = sharded_losses(o, 2);
  // As with --check: the one-rank comparison run must leave the sharded run's record alone.
  EXPECT_LE(max_relative_loss_difference(o, losses), kCheckTolerance);

  const nn::CharDataset data = nn::CharDataset::from_file(o.text);
  std::ifstream in(dir + "/steps.jsonl");
  std::vector<double> recorded;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const int64_t step = static_cast<int64_t>(recorded.size());
    EXPECT_EQ(j.at("step").get<int64_t>(), step + 1);
    const std::vector<int64_t> want = data.batch(o.batch, o.seq, o.seed * 7919 + step).to_vector<int64_t>();
    std::vector<int64_t> got;
    for (const auto& row : j.at("tokens")) {
      EXPECT_EQ(row.size(), static_cast<size_t>(o.seq + 1));
      for (const auto& id : row) got.push_back(id.get<int64_t>());
    }
    EXPECT_EQ(got, want) << "step " << step + 1;
    recorded.push_back(j.at("loss").get<double>());
  }
  ASSERT_EQ(recorded, losses) << "steps.jsonl holds the run's losses at full precision";

  TrainOptions replay = o;
  replay.mesh = "tp=1";
  replay.record.clear();
  replay.load = dir + "/init";
  std::vector<double> again;
  run_threads(1, [&](std::shared_ptr<Backend> b) { again = train_rank(b, replay, nullptr).losses; });
  ASSERT_EQ(again.size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(again[i], losses[i], kCheckTolerance * losses[i]);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dtensor::tools

namespace dtensor::tools {
namespace {

// --moe on --mesh ep=2,tp=2: experts split over ep (tokens dispatched by all_to_all_v), attention
// tensor parallel on tp, the float64 losses (with the load-balancing term) equal one rank's; and the
// experts' parameters really are sharded (the exchange moved bytes).
TEST(TrainCheck, MixtureOfExpertsOnEpTimesTpMatchesOneRank) {
  TrainOptions o = small("ep=2,tp=2");
  o.steps = 8;
  o.experts = 4;
  o.top_k = 2;
  o.moe_aux_coef = 0.05;
  std::vector<double> losses = sharded_losses(o, 4);
  ASSERT_EQ(losses.size(), 8u);
  const double worst = max_relative_loss_difference(o, losses);
  EXPECT_LE(worst, kCheckTolerance);
  EXPECT_LT(losses.back(), losses.front());
  // An ep dim without experts is refused, naming the flag.
  TrainOptions bad = small("ep=2,tp=2");
  EXPECT_THROW(validate_train_options(bad), Error);
}

}  // namespace
}  // namespace dtensor::tools

namespace dtensor::tools {
namespace {

// Context parallel (--mesh cp=N): token ids sharded on the sequence dim, attention's query, key and
// value with them. The float64 losses equal one rank's, and the collectives over cp are those of the
// plan: each layer's forward attention is ring attention, n-1 send/recv rounds (one
// batch_isend_irecv each), and its backward all-gathers key and value (the cost model prices the
// ring backward higher: it re-sends key and value to recompute the log-sum-exp, then moves the
// gradients round by round without overlap); no other all-gather runs over cp, so the activations
// stay sequence-sharded. Uneven sequences (15 over 4: 4,4,4,3; 5 over 4: 2,2,1,0) follow
// torch.chunk and still match one rank (an empty block skips its rounds: no exact counts there).
// Beside data parallel (dp=2), each dp rank's rows run their own ring.
TEST(TrainCheck, ContextParallelMatchesOneRankByRingAttention) {
  struct Case {
    const char* mesh;
    int world;
    int cp;
    int seq;
    bool sp;
    int cp_dim = 0;
  };
  for (Case c : {Case{"cp=2", 2, 2, 16, false}, Case{"cp=4", 4, 4, 16, false},
                 Case{"cp=2,tp=2", 4, 2, 16, true}, Case{"cp=4", 4, 4, 15, false},
                 Case{"cp=4", 4, 4, 5, false}, Case{"dp=2,cp=2,tp=1", 4, 2, 16, false, 1}}) {
    SCOPED_TRACE(::testing::Message() << c.mesh << " seq " << c.seq << (c.sp ? " sequence+loss parallel" : ""));
    TrainOptions o = small(c.mesh);
    o.steps = 6;
    o.seq = c.seq;
    o.context_parallel = true;
    o.sequence_parallel = o.loss_parallel = c.sp;
    validate_train_options(o);
    const TrainResult r = rank0_result(o, c.world);
    ASSERT_EQ(r.losses.size(), 6u);
    EXPECT_LE(max_relative_loss_difference(o, r.losses), kCheckTolerance);
    const CommStats& cp = r.comm_by_dim.at(c.cp_dim);
    EXPECT_GT(cp.of(CommKind::kSendRecv), 0) << "no ring rounds: attention did not run ring attention";
    if (c.seq % c.cp == 0) {
      const int64_t layer_steps = int64_t{o.layers} * o.steps;
      EXPECT_EQ(cp.of(CommKind::kSendRecv), layer_steps * (c.cp - 1)) << "ring rounds over cp";
      EXPECT_EQ(cp.of(CommKind::kAllGather), layer_steps * 2) << "all-gathers over cp: key and value, backward";
    }
  }
}

// --context-parallel states the intent: without a cp mesh dim it is refused, naming the flag; so are
// a cp dim with --moe and mesh forms that put cp elsewhere.
TEST(TrainCheck, ContextParallelRejectsInconsistentOptions) {
  TrainOptions o = small("tp=2");
  o.context_parallel = true;
  try {
    validate_train_options(o);
    ADD_FAILURE() << "--context-parallel without a cp dim was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--context-parallel"), std::string::npos) << e.what();
  }
  TrainOptions moe = small("cp=2,tp=2");
  moe.experts = 4;
  EXPECT_THROW(validate_train_options(moe), Error);
  for (const char* mesh : {"tp=2,cp=2", "cp=2,dp=2,tp=1", "ep=2,cp=2,tp=1", "cp=2,cp=2"})
    EXPECT_THROW(validate_train_options(small(mesh)), Error) << mesh;
  // cp alone is cp=N,tp=1.
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh("cp=4", &sizes, &names);
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(names, (std::vector<std::string>{"cp", "tp"}));
}

}  // namespace
}  // namespace dtensor::tools
