// dtensor train --elastic's layout for a generation (tools/train_elastic.h): the launch mesh when
// every launch rank is back; otherwise the candidate mesh with the fastest predicted step (the
// planner's Megatron-LM plan of the run's GPT on that mesh) among those whose tp divides the ranks,
// --heads and --dim, ties to the larger tp; the batch rows of the rule (choose_elastic_layout).
#include "gtest/gtest.h"
#include "tools/train_elastic.h"

namespace dtensor::tools {
namespace {

TrainOptions options(const std::string& hardware) {
  TrainOptions o;
  o.batch = 8;
  o.seq = 64;
  o.dim = 64;
  o.heads = 4;
  o.layers = 2;
  o.hardware = hardware;
  return o;
}

TEST(ElasticLayout, TheLaunchMeshWhenEveryRankIsBack) {
  const ElasticLayout l = plan_elastic_layout(4, {2, 2}, options("cpu-tcp"), 76);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.tp, 2);
  EXPECT_NE(l.reason.find("the launch mesh"), std::string::npos) << l.reason;
}

TEST(ElasticLayout, TheFastestPredictedCandidate) {
  int differing = 0;  // cases where the candidates' predictions differ (else the test shows little)
  for (const std::string hw : {"cpu-tcp", "h100-nvlink"}) {
    const TrainOptions o = options(hw);
    for (int64_t ranks : {2, 3, 4, 6}) {
      const ElasticLayout l = plan_elastic_layout(ranks, {4, 2}, o, 76);
      ASSERT_EQ(l.dp * l.tp, ranks);
      const double chosen = predicted_step_us(o, 76, l.dp, l.tp);
      for (int64_t t = 1; t <= ranks; ++t) {
        if (ranks % t != 0 || o.heads % t != 0 || o.dim % t != 0 || t == l.tp) continue;
        const double other = predicted_step_us(o, 76, ranks / t, t);
        differing += other != chosen;
        EXPECT_TRUE(chosen < other * (1 + 1e-9) && !(chosen > other * (1 - 1e-9) && t > l.tp))
            << hw << ", " << ranks << " ranks: chose dp=" << l.dp << ",tp=" << l.tp << " (" << chosen
            << " us) over dp=" << ranks / t << ",tp=" << t << " (" << other << " us): " << l.reason;
      }
      int64_t rows = 0;
      for (int64_t r : l.rows) rows += r;
      EXPECT_EQ(rows, o.batch);
      EXPECT_NE(l.reason.find("the fastest predicted step"), std::string::npos) << l.reason;
    }
  }
  EXPECT_GT(differing, 4);
}

TEST(ElasticLayout, NoFittingTpIsAnError) {
  TrainOptions o = options("cpu-tcp");
  o.batch = 1;  // 3 ranks: tp=1 leaves dp ranks without a row, tp=3 does not divide the heads
  EXPECT_THROW(plan_elastic_layout(3, {2, 2}, o, 76), Error);
}

}  // namespace
}  // namespace dtensor::tools
