// Strategy selection, tie-breaks, the cost model, hardware profiles and the decision cache.
#include "propagation/propagate.h"

#include <cmath>

#include "dispatch/dispatch.h"
#include "gtest/gtest.h"

namespace dtensor {
namespace {

OpCall make_call(const std::string& op, std::vector<TensorMeta> metas, std::vector<Placements> pl,
                 const Shape& mesh, std::vector<std::pair<std::string, ArgValue>> kw = {}) {
  init_ops();
  std::vector<ArgValue> pos;
  for (size_t i = 0; i < metas.size(); ++i) pos.emplace_back(std::in_place_type<TensorRef>, TensorRef{static_cast<int>(i)});
  return OpCall::bind(Registry::get().find(op), pos, kw, std::move(metas), std::move(pl), mesh);
}

TensorMeta f32(Shape s) { return {std::move(s), DType::kFloat32}; }

// One keyword argument (built by emplace: a braced list of variants trips GCC's maybe-uninitialized).
std::vector<std::pair<std::string, ArgValue>> kwarg(const char* name, IValue v) {
  std::vector<std::pair<std::string, ArgValue>> out;
  out.emplace_back(name, ArgValue(std::move(v)));
  return out;
}

TEST(Propagation, NoRedistributionWinsTiesAgainstLocalChunking) {
  auto d = propagate(make_call("relu", {f32({8, 8})}, {{Replicate()}}, {4}));
  EXPECT_EQ(d->strategy.outputs[0], (Placements{Replicate()}));
  EXPECT_EQ(d->cost_us, 0.0);
  EXPECT_TRUE(d->replicated_fallback);
}

TEST(Propagation, KeepsExistingShardsAndPrefersLowerDimsOnTies) {
  auto d = propagate(make_call("add", {f32({8, 8}), f32({8, 8})}, {{Shard(0)}, {Shard(1)}}, {4}));
  // Moving either input costs the same all_to_all: the lower tensor dim wins.
  EXPECT_EQ(d->strategy.outputs[0], (Placements{Shard(0)}));
  ASSERT_EQ(d->collectives.size(), 1u);
  EXPECT_EQ(d->collectives[0].kind, CommKind::kAllToAll);
}

TEST(Propagation, PartialFeedingNonLinearOpIsReduceScattered) {
  auto d = propagate(make_call("gelu", {f32({64, 32})}, {{Partial()}}, {8}));
  EXPECT_EQ(d->strategy.inputs[0], (Placements{Shard(0)}));
  EXPECT_EQ(d->collectives.at(0).kind, CommKind::kReduceScatter);
  // ... while a linear op keeps the Partial with no communication.
  auto a = propagate(make_call("add", {f32({64, 32}), f32({64, 32})}, {{Partial()}, {Partial()}}, {8}));
  EXPECT_EQ(a->strategy.outputs[0], (Placements{Partial()}));
  EXPECT_TRUE(a->collectives.empty());
}

TEST(Propagation, MegatronMlpOnTwoDMesh) {
  // x [S(0), R] (batch over dp) @ w1 [R, S(1)] (columns over tp): no communication, [S(0), S(1)].
  auto d = propagate(make_call("mm", {f32({16, 32}), f32({32, 64})}, {{Shard(0), Replicate()}, {Replicate(), Shard(1)}}, {2, 4}));
  EXPECT_EQ(d->strategy.outputs[0], (Placements{Shard(0), Shard(1)}));
  EXPECT_TRUE(d->collectives.empty());
  // h [S(0), S(1)] @ w2 [R, S(0)] (rows over tp): a Partial(sum) over tp, still no communication.
  auto e = propagate(make_call("mm", {f32({16, 64}), f32({64, 32})}, {{Shard(0), Shard(1)}, {Replicate(), Shard(0)}}, {2, 4}));
  EXPECT_EQ(e->strategy.outputs[0], (Placements{Shard(0), Partial()}));
  EXPECT_TRUE(e->collectives.empty());
}

// Weighted shards (DESIGN §2) pass through pointwise ops, matmul and reductions with no
// communication; an op whose rows cannot carry weights redistributes to an even placement.
TEST(Propagation, WeightedShardsCarryThroughOrRedistributeToEven) {
  const Placement w = Shard(0, {3, 1});
  auto a = propagate(make_call("add", {f32({10, 8}), f32({10, 8})}, {{w}, {w}}, {2}));
  EXPECT_EQ(a->strategy.outputs[0], (Placements{w}));
  EXPECT_TRUE(a->collectives.empty());
  // x [S(0)[3:1], R] @ w1 [R, S(1)]: data-parallel rows by weight, tensor-parallel columns.
  auto m = propagate(make_call("mm", {f32({10, 32}), f32({32, 64})}, {{w, Replicate()}, {Replicate(), Shard(1)}},
                               {2, 2}));
  EXPECT_EQ(m->strategy.outputs[0], (Placements{w, Shard(1)}));
  EXPECT_TRUE(m->collectives.empty());
  // The contraction dim weighted on both sides gives a Partial(sum).
  const Placement k = Shard(1, {1, 2});
  auto c = propagate(make_call("mm", {f32({4, 9}), f32({9, 5})}, {{k}, {Shard(0, {1, 2})}}, {2}));
  EXPECT_EQ(c->strategy.outputs[0], (Placements{Partial()}));
  EXPECT_TRUE(c->collectives.empty());
  auto r = propagate(make_call("sum", {f32({10, 8})}, {{w}}, {2}, kwarg("dim", std::vector<int64_t>{1})));
  EXPECT_EQ(r->strategy.outputs[0], (Placements{w}));
  EXPECT_TRUE(r->collectives.empty());
  // softmax over the weighted dim: its sharded row runs a distributed step written for even parts,
  // so the weighted input moves to an even or replicated placement first.
  auto s = propagate(make_call("softmax", {f32({10, 8})}, {{w}}, {2}, kwarg("dim", int64_t{0})));
  EXPECT_FALSE(s->strategy.inputs[0][0].is_weighted());
  EXPECT_FALSE(s->collectives.empty());
  // Mixed weights on one pointwise op: one input is re-split (all_to_all), never computed as is.
  auto x = propagate(make_call("add", {f32({10, 8}), f32({10, 8})}, {{w}, {Shard(0)}}, {2}));
  EXPECT_EQ(x->strategy.inputs[0], x->strategy.inputs[1]);
  ASSERT_EQ(x->collectives.size(), 1u);
  EXPECT_EQ(x->collectives[0].kind, CommKind::kAllToAll);
}

TEST(Propagation, OpsWithoutApplicableRulesFallBackToReplicateWithCost) {
  // matmul of a 1-d by a 3-d tensor has no sharded rule: inputs are gathered, the cost shows it.
  auto d = propagate(make_call("matmul", {f32({5}), f32({3, 5, 4})}, {{Shard(0)}, {Replicate()}}, {2}));
  EXPECT_TRUE(d->replicated_fallback);
  EXPECT_EQ(d->strategy.inputs[0], (Placements{Replicate()}));
  EXPECT_GT(d->cost_us, 0.0);
}

TEST(Propagation, DecisionsAreCachedAndTheCacheIsBounded) {
  OpCall c = make_call("mm", {f32({8, 16}), f32({16, 8})}, {{Shard(0)}, {Replicate()}}, {4});
  EXPECT_EQ(propagate(c).get(), propagate(c).get());
  set_propagation_cache_capacity(64);
  for (int64_t n = 1; n <= 1000; ++n) propagate(make_call("neg", {f32({n})}, {{Shard(0)}}, {2}));
  EXPECT_EQ(propagation_cache_size(), 64u);
  set_propagation_cache_capacity(kDefaultPropagationCacheCapacity);
}

TEST(Propagation, DefaultHardwareIsUsedWhenNoneIsGiven) {
  // gelu on a Partial tensor needs a collective, so its cost depends on the profile.
  OpCall c = make_call("gelu", {f32({64, 32})}, {{Partial()}}, {8});
  const HardwareProfile& cpu = hardware_profile("cpu-tcp");
  const double on_cpu = propagate_uncached(c, {&cpu})->cost_us;
  EXPECT_NE(on_cpu, propagate_uncached(c)->cost_us);  // the default: h100-nvlink
  set_default_hardware(cpu);  // `dtensor train --hardware`
  EXPECT_EQ(propagate(c)->cost_us, on_cpu);
  EXPECT_EQ(propagate_uncached(c)->cost_us, on_cpu);
  set_default_hardware(hardware_profile(kDefaultHardware));
  EXPECT_NE(propagate(c)->cost_us, on_cpu);  // the cache keys by profile
}

TEST(CostModel, RingFormulasAndLinks) {
  const HardwareProfile& h = hardware_profile("h100-nvlink");
  LinkModel nv = h.intra_host;
  double t = collective_time_us(CommKind::kAllReduce, 1'000'000, 4, nv);
  EXPECT_NEAR(t, nv.base_latency_us + 6 * nv.latency_us + 1e6 / nv.bytes_per_us(), 1e-9);
  EXPECT_NEAR(collective_time_us(CommKind::kAllGather, 1000, 8, nv),
              nv.base_latency_us + 7 * nv.latency_us + 1000 / nv.bytes_per_us(), 1e-9);
  EXPECT_EQ(collective_time_us(CommKind::kAllReduce, 1000, 1, nv), 0.0);
  // dp=8, tp=8 on 8-GPU hosts: tp inside a host, dp across hosts.
  auto links = h.links_for_mesh({8, 8});
  EXPECT_EQ(links[1].bandwidth_GBps, h.intra_host.bandwidth_GBps);
  EXPECT_EQ(links[0].bandwidth_GBps, h.inter_host.bandwidth_GBps);
  auto small = h.links_for_mesh({2, 4});
  EXPECT_EQ(small[0].bandwidth_GBps, h.intra_host.bandwidth_GBps);
}

TEST(CostModel, ProfilesAreDataAndValidated) {
  auto names = hardware_profile_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu-tcp"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "h100-nvlink"), names.end());
  try {
    hardware_profile("tpu-v9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: "), std::string::npos);
  }
  EXPECT_THROW(HardwareProfile::from_json(R"({"name": "x", "ranks_per_host": 8})"), Error);
  EXPECT_THROW(HardwareProfile::from_json("{"), Error);
}

}  // namespace
}  // namespace dtensor
