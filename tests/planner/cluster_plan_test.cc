// The planner on mixed clusters (planner/cluster_plan.h, planner/cost.h): per-rank compute with the
// slowest rank's time checked by hand; identical hosts against the single profile; H100 + A100
// against the all-A100 cluster (even shares), the all-H100 one (a lower bound) and the
// hand-computed speed ratio (weighted shares).
#include "planner/cluster_plan.h"

#include <map>
#include <string>

#include "dtensor/core/error.h"
#include "gtest/gtest.h"
#include "planner/models/zoo.h"

namespace dtensor::planner {
namespace {

constexpr DType kBf16 = DType::kBFloat16;

const HardwareProfile& h100() { return hardware_profile("h100-nvlink"); }
const HardwareProfile& a100() { return hardware_profile("a100-nvlink"); }

// The profile with two ranks a host (the references for clusters of two-rank hosts, so that the
// data-parallel dim of dp=2,tp=2 crosses hosts in both).
const HardwareProfile& two_a_host(const HardwareProfile& p) {
  static std::map<std::string, HardwareProfile> copies;
  auto [it, fresh] = copies.try_emplace(p.name, p);
  it->second.ranks_per_host = 2;
  return it->second;
}

// An H100 host then an A100 host.
Cluster h100_a100(int64_t ranks_each) {
  Cluster c;
  c.hosts = {{"h100-nvlink", &h100(), ranks_each}, {"a100-nvlink", &a100(), ranks_each}};
  return c;
}

// y[4096, 4096] = x[4096, 4096] @ w^T, w[4096, 4096]: compute-bound on both profiles.
ModelGraph one_linear() {
  GraphBuilder b("linear", "one matmul");
  TensorId x = b.input("x", {4096, 4096}, kBf16);
  TensorId w = b.param("w", {4096, 4096}, kBf16);
  b.op1("fc", "linear", {x, w});
  return b.finish(false);
}

// The choice of `fc` with x S(0), w R, y S(0) on the one mesh dim (data parallel).
const Choice& row_split(const CostModel& cm) {
  const ModelGraph& g = cm.graph();
  for (int v = 0; v < g.num_vertices(); ++v) {
    if (g.node(v).name != "fc") continue;
    for (const Choice& c : cm.info(v).choices)
      if (c.strategy.outputs[0][0] == Shard(0) && c.strategy.inputs[0][0] == Shard(0) &&
          c.strategy.inputs[1][0].is_replicate())
        return c;
  }
  throw Error("no row split of fc");
}

TEST(ClusterPlan, SlowestRankByHand) {
  ModelGraph g = one_linear();
  MeshSpec mesh = MeshSpec::parse("dp=2");
  Cluster c = h100_a100(1);
  const double flop = 2.0 * 4096 * 4096 * 4096;  // multiply-adds of the whole matmul
  // Even: both ranks hold 2048 rows; the A100 (312 TFLOP/s = 312e6 FLOP/µs) is the slower.
  CostModel even(g, mesh, h100(), {&c, {}});
  EXPECT_DOUBLE_EQ(row_split(even).fwd_us, flop / 2 / 312e6);
  // The same on two H100s: 989 TFLOP/s.
  CostModel fast(g, mesh, h100());
  EXPECT_DOUBLE_EQ(row_split(fast).fwd_us, flop / 2 / 989e6);
  // Weights 317:100: 4096 rows by largest remainder, 4096*317/417 = 3113.75 and 4096*100/417 =
  // 982.25, the row left over to the larger remainder: 3114 and 982. H100: 3114 rows / 989,
  // A100: 982 / 312; the step waits for the slower of the two.
  CostModel weighted(g, mesh, h100(), {&c, {{317, 100}}});
  const double t_h100 = flop * 3114 / 4096 / 989e6, t_a100 = flop * 982 / 4096 / 312e6;
  EXPECT_GT(t_h100, t_a100);
  EXPECT_NEAR(row_split(weighted).fwd_us, t_h100, 1e-9 * t_h100);
  // Memory (the largest block): the H100's 3114 rows of x and y plus all of w, bfloat16.
  EXPECT_EQ(row_split(weighted).work_bytes, (3114 * 4096 * 2 + 4096 * 4096) * 2);
  // Weight lists must match the mesh.
  EXPECT_THROW(CostModel(g, mesh, h100(), {&c, {{1, 2, 3}}}), Error);
  EXPECT_THROW(CostModel(g, mesh, h100(), {&c, {{1}, {1}}}), Error);
  EXPECT_THROW(CostModel(g, MeshSpec::parse("dp=4"), h100(), {&c, {}}), Error);
}

// A view that merges the weighted dim: x[R, 8] -> [8R]. With weights 317:100 on dp=2, R = 6 rows
// split 5, 1 (6*317/417 = 4.56 and 1.44, the row left to the larger remainder .56) while 48
// elements split 36, 12 (36.49 and 11.51, the one left to .51): 5/6 != 36/48, the engine would
// re-split, so the planner drops the view's S(0) choice. R = 4 with weights 3:1 splits 3, 1 and
// 24, 8: equal fractions, kept. Even shares keep it in both.
int view_row_splits(int64_t rows, MeshWeights w) {
  GraphBuilder b("view", "merge");
  TensorId x = b.input("x", {rows, 8}, kBf16);
  b.op1("flat", "reshape", {x, IValue(std::vector<int64_t>{rows * 8})});
  ModelGraph g = b.finish(false);
  Cluster c = h100_a100(1);
  CostModel cm(g, MeshSpec::parse("dp=2"), h100(), {&c, std::move(w)});
  int n = 0;
  for (int v = 0; v < g.num_vertices(); ++v)
    if (g.node(v).name == "flat")
      for (const Choice& ch : cm.info(v).choices) n += ch.strategy.outputs[0][0].is_shard(0) ? 1 : 0;
  return n;
}

TEST(ClusterPlan, ViewsKeepOnlyWeightsThatCarry) {
  EXPECT_EQ(view_row_splits(6, {}), 1);
  EXPECT_EQ(view_row_splits(6, {{317, 100}}), 0);
  EXPECT_EQ(view_row_splits(4, {{3, 1}}), 1);
}

// Weights from the profiles: round(100 * 989 / 312) = round(316.99) = 317 for bfloat16 peaks,
// round(100 * 3350 / 2039) = round(164.3) = 164 for memory bandwidth; the tensor-parallel dim is
// within one kind of host, so even.
TEST(ClusterPlan, SpeedWeightsFollowTheProfiles) {
  Cluster c = h100_a100(8);
  MeshSpec mesh = MeshSpec::parse("dp=2,tp=8");
  EXPECT_EQ(speed_weights(c, mesh, kBf16, false), (MeshWeights{{317, 100}, {}}));
  EXPECT_EQ(speed_weights(c, mesh, kBf16, true), (MeshWeights{{164, 100}, {}}));
  // Half way: round(100 * (0.5 + 0.5 * 3.1699)) = round(208.49) = 208.
  EXPECT_EQ(speed_weights(c, mesh, kBf16, false, 0.5), (MeshWeights{{208, 100}, {}}));
  // tp=16 across both hosts: tp coordinates 0-7 are H100, 8-15 A100.
  std::vector<int64_t> tp(8, 317);
  tp.resize(16, 100);
  EXPECT_EQ(speed_weights(c, MeshSpec::parse("tp=16"), kBf16, false), (MeshWeights{tp}));
  EXPECT_EQ(speed_weights(Cluster::uniform(h100(), 2), mesh, kBf16, false), (MeshWeights{{}, {}}));
}

ModelGraph small_llama(int64_t batch = 8, int64_t seq = 512) {
  models::ModelOptions o;
  o.layers = 2;
  o.batch = batch;
  o.seq = seq;
  return models::build_model("llama3-8b", o, MeshSpec::parse("dp=2,tp=2"));
}

void expect_same_plan(const PlanResult& a, const PlanResult& b) {
  ASSERT_EQ(a.plan.size(), b.plan.size());
  for (size_t v = 0; v < a.plan.size(); ++v) {
    ASSERT_EQ(a.plan[v] == nullptr, b.plan[v] == nullptr);
    if (!a.plan[v]) continue;
    EXPECT_EQ(a.plan[v]->strategy.outputs, b.plan[v]->strategy.outputs) << v;
    EXPECT_EQ(a.plan[v]->strategy.inputs, b.plan[v]->strategy.inputs) << v;
  }
}

// Identical hosts: one candidate (even), and the very plan and step time of the single profile.
TEST(ClusterPlan, IdenticalHostsPlanLikeTheProfile) {
  ModelGraph g = small_llama();
  MeshSpec mesh = MeshSpec::parse("dp=2,tp=2");
  PlanOptions o;
  o.compare = false;
  const HardwareProfile& h = two_a_host(h100());
  PlanResult single = plan_model(g, mesh, h, o);
  Cluster c = Cluster::uniform(h, 2);
  PlanResult mixed = plan_cluster(g, mesh, c, o);
  ASSERT_EQ(mixed.weight_options.size(), 1u);
  EXPECT_EQ(mixed.weight_options[0].basis, "even");
  EXPECT_EQ(mixed.eval.step_time_us, single.eval.step_time_us);
  EXPECT_EQ(mixed.eval.peak_memory_bytes, single.eval.peak_memory_bytes);
  EXPECT_EQ(mixed.memory_limit_bytes, single.memory_limit_bytes);
  expect_same_plan(mixed, single);
}

// H100 + A100 hosts. Even shares: every op waits for its A100 rank and every link is the A100
// host's, so the plan is the all-A100 cluster's. Weighted shares: faster, the H100 ranks the
// larger share. A batch large enough for data parallelism over the hosts (at 8 x 512 tokens the
// plan splits the weights over dp instead, with no gain from shares).
TEST(ClusterPlan, MixedHostsWeightedBeatsEven) {
  ModelGraph g = small_llama(16, 2048);
  MeshSpec mesh = MeshSpec::parse("dp=2,tp=2");
  PlanOptions o;
  o.compare = false;
  Cluster c = h100_a100(2);
  PlanResult r = plan_cluster(g, mesh, c, o);
  PlanResult a = plan_model(g, mesh, two_a_host(a100()), o);
  // Speed weights 154, 208, 263, 317 (peak FLOP/s x 0.25 .. 1) and 164 (memory bandwidth) to 100,
  // as batch rows of 16: 16*154/254 = 9.70 and 6.30 -> 10, 6 (the row left to the larger
  // remainder); 208: 10.81, 5.19 -> 11, 5; 263: 11.59, 4.41 -> 12, 4; 317: 12.16, 3.84 -> 12, 4;
  // 164: 9.94, 6.06 -> 10, 6.
  ASSERT_EQ(r.weight_options.size(), 4u);
  EXPECT_EQ(r.weight_options[1].weights, (MeshWeights{{10, 6}, {}}));
  EXPECT_EQ(r.weight_options[1].basis, "peak FLOP/s x 0.25, memory bandwidth");
  EXPECT_EQ(r.weight_options[2].weights, (MeshWeights{{11, 5}, {}}));
  EXPECT_EQ(r.weight_options[3].weights, (MeshWeights{{12, 4}, {}}));
  EXPECT_EQ(r.weight_options[3].basis, "peak FLOP/s x 0.75, peak FLOP/s");
  const PlanResult::WeightOption& even = r.weight_options[0];
  ASSERT_TRUE(even.valid);
  EXPECT_EQ(even.step_time_us, a.eval.step_time_us);
  EXPECT_LT(r.eval.step_time_us, even.step_time_us);
  ASSERT_EQ(r.weights.size(), 2u);
  ASSERT_EQ(r.weights[0].size(), 2u);
  EXPECT_GT(r.weights[0][0], r.weights[0][1]);
  EXPECT_TRUE(r.weights[1].empty());
  // The chosen weights are a searched candidate, priced at the returned step time.
  bool found = false;
  for (const auto& w : r.weight_options)
    if (w.weights == r.weights) found = w.valid && w.step_time_us == r.eval.step_time_us;
  EXPECT_TRUE(found);
  // Nor below the all-H100 mesh's plan: for the same placements every op there is at least as
  // fast (the H100 rank's share here is larger than half, the links here are the A100 host's),
  // and that search is exact over the same choices.
  PlanResult h = plan_model(g, mesh, two_a_host(h100()), o);
  ASSERT_TRUE(h.exact);
  EXPECT_GT(r.eval.step_time_us, h.eval.step_time_us);
  EXPECT_EQ(r.cluster, "2x h100-nvlink + 2x a100-nvlink");
}

// Tensor parallelism across an H100 host and an A100 host (tp=4, two ranks each): shares counted in
// 4 units per rank (16): 317:100 -> 16*317/834 = 6.08, 1.92 -> 6, 6, 1, 1 and the two units left
// to the larger remainders (.92) -> 6, 6, 2, 2; 154:100 -> 4.85, 3.15 -> 5, 5, 3, 3; 208 -> 5.40,
// 2.60 -> 5, 5, 3, 3; 263 -> 5.80, 2.20 -> 6, 6, 2, 2; 164 -> 4.97, 3.03 -> 5, 5, 3, 3.
TEST(ClusterPlan, TensorParallelSharesInUnitsPerRank) {
  ModelGraph g = small_llama();
  PlanOptions o;
  o.compare = false;
  Cluster c = h100_a100(2);
  PlanResult r = plan_cluster(g, MeshSpec::parse("tp=4"), c, o);
  ASSERT_EQ(r.weight_options.size(), 3u);
  EXPECT_EQ(r.weight_options[1].weights, (MeshWeights{{5, 5, 3, 3}}));
  EXPECT_EQ(r.weight_options[2].weights, (MeshWeights{{6, 6, 2, 2}}));
  EXPECT_TRUE(r.weight_options[0].valid);
}

}  // namespace
}  // namespace dtensor::planner
