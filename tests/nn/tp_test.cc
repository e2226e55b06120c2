// Tensor parallelism against one rank: a GPT's loss and every parameter's
// gradient under tp=2, tp=4 and dp=2 x tp=2 (plain and sequence-parallel Megatron plans) equal the
// single-rank run over 20 AdamW steps; and the forward inserts exactly Megatron's collectives.
#include <map>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/parallel.h"

namespace dtensor::nn {
namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.vocab = 24;
  c.seq = 8;
  c.dim = 16;
  c.heads = 4;
  c.layers = 2;
  return c;
}

// Deterministic token batches [B, T + 1].
Tensor batch(int step, int64_t B, int64_t T, int64_t vocab) {
  Tensor t = Tensor::empty({B, T + 1}, DType::kInt64);
  int64_t* p = t.data<int64_t>();
  uint64_t x = 0x9e3779b97f4a7c15ull * (step + 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<int64_t>(x % vocab);
  }
  return t;
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, Tensor> grads;  // after the first step
};

// Trains `steps` steps on a mesh of `shape` (names dp/tp); rank 0's view of losses and grads.
TrainRun train(const Shape& shape, bool sp, int steps, bool loss_parallel = false) {
  TrainRun out;
  const int64_t B = 4, T = 8;
  run_threads(static_cast<int>(numel(shape)), [&](std::shared_ptr<Backend> b) {
    std::vector<std::string> names = shape.size() == 2 ? std::vector<std::string>{"dp", "tp"} : std::vector<std::string>{"tp"};
    auto mesh = DeviceMesh::create(b, shape, names);
    const int tp = mesh->dim_index("tp");
    GPT model(tiny());
    parallelize(model, mesh, megatron_plan(sp, loss_parallel), tp);
    AdamW opt(model.named_parameters(), {1e-2});
    Placements data(mesh->ndim(), Replicate());
    if (shape.size() == 2) data[0] = Shard(0);
    for (int s = 0; s < steps; ++s) {
      Tensor tok = batch(s, B, T, tiny().vocab);
      DTensor x = distribute_tensor(tok.narrow(1, 0, T).contiguous(), mesh, data);
      DTensor y = distribute_tensor(tok.narrow(1, 1, T).contiguous(), mesh, data);
      DTensor loss = GPT::loss(model(x), y);
      double l = loss.full_tensor().item();
      backward(loss);
      if (s == 0)
        for (auto& [n, p] : model.named_parameters()) {
          Tensor g = grad(*p)->full_tensor();
          if (b->rank() == 0) out.grads[n] = g;
        }
      opt.step();
      opt.zero_grad();
      if (b->rank() == 0) out.losses.push_back(l);
    }
  });
  return out;
}

void expect_same(const TrainRun& want, const TrainRun& got, const std::string& what) {
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << what << " step " << i;
  for (const auto& [n, g] : want.grads) {
    ASSERT_TRUE(got.grads.count(n)) << what << " " << n;
    EXPECT_TRUE(allclose(got.grads.at(n), g, 1e-5, 1e-6)) << what << " " << n << " off by "
                                                          << max_abs_diff(got.grads.at(n), g);
  }
}

TEST(TensorParallel, LossesAndGradientsEqualOneRank) {
  const int steps = 20;
  TrainRun one = train({1}, false, steps);
  EXPECT_LT(one.losses.back(), one.losses.front());  // it learns
  expect_same(one, train({2}, false, steps), "tp=2");
  expect_same(one, train({4}, false, steps), "tp=4");
  expect_same(one, train({2, 2}, false, steps), "dp=2,tp=2");
  expect_same(one, train({2}, true, steps), "tp=2 sequence parallel");
  expect_same(one, train({2, 2}, true, steps), "dp=2,tp=2 sequence parallel");
  expect_same(one, train({4}, true, steps, true), "tp=4 sequence and loss parallel");
}

// Collectives one block's forward issues on the tp group, by kind.
std::map<std::string, int64_t> block_collectives(bool sp) {
  std::map<std::string, int64_t> calls;
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2}, {"tp"});
    Block block(16, 4, 7);
    ParallelPlan plan;
    for (auto& [pattern, style] : megatron_plan(sp, false)) {
      if (pattern.rfind("blocks.*.", 0) != 0) continue;
      plan.push_back({pattern.substr(9), style});  // relative to the block
    }
    parallelize(block, mesh, plan, 0);
    Placements act{sp ? Shard(1) : Replicate()};
    DTensor x = distribute_tensor(random_tensor({2, 8, 16}, DType::kFloat32, 5), mesh, act);
    ProcessGroup& g = mesh->group(0);
    DTensor y = block(x);
    if (b->rank() == 0)
      for (int k = 0; k < kNumCommKinds; ++k)
        if (g.stats().calls_by_kind[k]) calls[comm_kind_name(static_cast<CommKind>(k))] = g.stats().calls_by_kind[k];
    EXPECT_EQ(y.placements(), act);
  });
  return calls;
}

TEST(TensorParallel, ForwardInsertsMegatronCollectives) {
  using M = std::map<std::string, int64_t>;
  EXPECT_EQ(block_collectives(false), (M{{"all_reduce", 2}}));
  EXPECT_EQ(block_collectives(true), (M{{"all_gather", 2}, {"reduce_scatter", 2}}));
}

}  // namespace
}  // namespace dtensor::nn
