// Sharding propagation (DESIGN §4): for one op call, expand the op's single-mesh-dim rules to the
// n-d mesh (plus the all-Replicate row), drop rows an input cannot take, cost every remaining row by
// the alpha-beta model (its input redistributions plus its own distributed step) and pick the cheapest.
// Ties break deterministically: no redistribution first, then fewer bytes, then lower tensor dims
// for Shard placements, then rule order. Decisions are cached per (op, input specs, arguments).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "propagation/cost_model.h"
#include "propagation/hardware.h"

namespace dtensor {

struct ShardingDecision {
  Strategy strategy;                  // chosen placements for outputs and inputs
  std::vector<TensorMeta> out_meta;   // global output shapes and dtypes
  // Per input: the plan from its given placements to strategy.inputs.
  std::vector<std::shared_ptr<const RedistributePlan>> input_plans;
  // Every collective the call performs: redistributions first, then the rule's own steps.
  std::vector<CollectiveRecord> collectives;
  double cost_us = 0;
  int64_t bytes = 0;
  int candidates = 0;      // rows costed
  bool replicated_fallback = false;  // only the all-R row was usable or it won
};

struct PropagateOptions {
  const HardwareProfile* hardware = nullptr;  // default: default_hardware()
};

// Chooses the strategy for `call`. Throws dtensor::Error (from the op's meta function) when the
// arguments are invalid, naming the op, shapes and placements.
std::shared_ptr<const ShardingDecision> propagate(const OpCall& call,
                                                  const PropagateOptions& options = {});
// The same without the cache (for benchmarks and tests).
std::shared_ptr<const ShardingDecision> propagate_uncached(const OpCall& call,
                                                           const PropagateOptions& options = {});
// All candidate strategies with their costs, best first (for `explain --all` and tests).
std::vector<std::pair<Strategy, double>> rank_strategies(const OpCall& call,
                                                         const PropagateOptions& options = {});

// The op's rules expanded to the call's mesh (plus the all-R row), without costing: every
// combination of one rule per mesh dim that passes the filters (no mixed Partial ops on a tensor;
// evenness where a rule needs it; with check_shardable, no new shard splitting a dim into more pieces
// than it has elements). `meta` is op.meta(call). Where an input's placement is a weighted shard,
// rows that can carry its weights also appear with them (see add_weighted_variants), first.
// Throws dtensor::Error naming the op, its inputs and the mesh when the rows to try
// (rules ^ mesh dims) exceed kMaxStrategyRows.
std::vector<Strategy> expand_strategies(const OpCall& call, const std::vector<TensorMeta>& meta,
                                        bool check_shardable);
inline constexpr int64_t kMaxStrategyRows = int64_t{1} << 20;

// The decision cache is per thread (each rank thread keeps its own), LRU, bounded.
void set_propagation_cache_capacity(size_t entries);
size_t propagation_cache_size();
inline constexpr size_t kDefaultPropagationCacheCapacity = 16384;

}  // namespace dtensor
