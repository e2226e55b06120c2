// The ground-truth validator (DESIGN §4): every rule of every registered op, expanded to meshes of 1
// to 3 dims, run on random data with adversarial Partial inputs and uneven shapes, must give the
// single-device op's result. Valid single-mesh-dim rows that no rule lists are reported (missed
// savings), not failed.
#include <algorithm>
#include <iostream>
#include <optional>
#include <set>

#include "absl/strings/str_join.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "tests/ops/simulated_mesh.h"

namespace dtensor {
namespace {

using testing::bind_on;
using testing::make_globals;

bool has_weighted(const Strategy& s) {
  for (const auto* group : {&s.outputs, &s.inputs})
    for (const Placements& p : *group)
      for (const Placement& x : p)
        if (x.is_weighted()) return true;
  return false;
}

// Checks every strategy of `call` (with `weighted_only`, those with a weighted shard); returns failures.
std::vector<std::string> check_strategies(const OpCall& call, int max_strategies, uint64_t seed,
                                          int* checked, bool weighted_only = false) {
  std::vector<std::string> failures;
  auto meta = call.op().meta(call);
  auto strategies = expand_strategies(call, meta, /*check_shardable=*/false);
  if (weighted_only) std::erase_if(strategies, [](const Strategy& s) { return !has_weighted(s); });
  if (static_cast<int>(strategies.size()) > max_strategies) {
    // Keep a deterministic spread: every k-th combination.
    std::vector<Strategy> pick;
    size_t step = strategies.size() / max_strategies + 1;
    for (size_t i = 0; i < strategies.size(); i += step) pick.push_back(strategies[i]);
    strategies = pick;
  }
  auto globals = make_globals(call, seed);
  auto want = run_single_device(call, globals);
  std::vector<Strategy> with_steps;
  for (const Strategy& s : strategies) {
    if (s.step() != 0) {
      with_steps.push_back(s);  // distributed steps need real collectives: run below on threads
      continue;
    }
    ++*checked;
    std::string err;
    try {
      err = testing::compare(testing::simulate(call, s, meta, globals, seed), want);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (!err.empty()) failures.push_back(absl::StrCat(call.str(), " strategy ", s.str(), ": ", err));
  }
  if (with_steps.empty()) return failures;
  // Rows with a distributed step: every rank builds its adversarial block, runs the strategy (the
  // step's collectives included) and gathers full tensors; rank 0 compares.
  std::vector<std::string> errs(with_steps.size());
  try {
  run_threads(static_cast<int>(numel(call.mesh_shape())), [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, call.mesh_shape(), {}, {}, std::chrono::seconds(30));
    for (size_t k = 0; k < with_steps.size(); ++k) {
      const Strategy& s = with_steps[k];
      std::vector<DTensor> inputs;
      for (int t = 0; t < call.num_tensors(); ++t) {
        DTensorSpec spec(mesh, s.inputs[t], call.tensor(t).shape, call.tensor(t).dtype);
        inputs.emplace_back(spec, adversarial_local_block(globals[t], spec.placements, call.mesh_shape(),
                                                          mesh->coordinate(), seed + t));
      }
      auto outs = execute_strategy(call, s, meta, inputs, std::chrono::seconds(30));
      testing::Simulated got;
      for (auto& o : outs) {
        got.outputs.push_back(o.full_tensor(std::chrono::seconds(30)));
        got.scales.push_back(Tensor::zeros(o.shape(), DType::kFloat64));
      }
      if (b->rank() == 0) errs[k] = testing::compare(got, want);
    }
  });
  } catch (const std::exception& e) {
    for (auto& err : errs)
      if (err.empty()) err = absl::StrCat("threw: ", e.what());
  }
  for (size_t k = 0; k < with_steps.size(); ++k) {
    ++*checked;
    if (!errs[k].empty())
      failures.push_back(absl::StrCat(call.str(), " strategy ", with_steps[k].str(), " (step): ", errs[k]));
  }
  return failures;
}

TEST(GroundTruthValidator, EveryRuleOfEveryOpMatchesTheSingleDeviceOp) {
  init_ops();
  const std::vector<Shape> meshes = {{2}, {3}, {4}, {2, 2}, {2, 3}, {2, 2, 2}};
  std::vector<std::string> failures;
  int checked = 0, ops = 0;
  for (const std::string& name : Registry::get().names()) {
    const OpDef& op = Registry::get().find(name);
    if (!op.kernel) continue;  // the planned family: no kernel to compare a rule's result with
    ASSERT_TRUE(op.samples) << name << " has no samples";
    ++ops;
    uint64_t seed = 17;
    for (const Sample& s : op.samples()) {
      for (const Shape& mesh : meshes) {
        OpCall call = bind_on(op, s, mesh);
        auto f = check_strategies(call, mesh.size() == 3 ? 40 : 400, seed++, &checked);
        failures.insert(failures.end(), f.begin(), f.end());
      }
      // The same sample in float64 and bfloat16 (float32 tensors converted) on a 1-d and a 2-d mesh.
      for (DType dt : {DType::kFloat64, DType::kBFloat16}) {
        Sample v = s;
        bool any = false;
        for (auto& t : v.tensors)
          if (t.dtype == DType::kFloat32) {
            t.dtype = dt;
            any = true;
          }
        if (!any) continue;
        for (const Shape& mesh : std::vector<Shape>{{3}, {2, 2}}) {
          OpCall call = bind_on(op, v, mesh);
          auto f = check_strategies(call, 100, seed++, &checked);
          failures.insert(failures.end(), f.begin(), f.end());
        }
      }
    }
  }
  std::cout << "validator: " << ops << " ops, " << checked << " strategies checked, "
            << failures.size() << " wrong\n";
  EXPECT_GT(checked, 1000);
  for (size_t i = 0; i < std::min<size_t>(failures.size(), 30); ++i) ADD_FAILURE() << failures[i];
  // A short summary of every failing (op, strategy) for the log.
  for (const auto& f : failures) std::cout << "WRONG: " << f << "\n";
}

// Weighted shards (DESIGN §2): every op, with each tensor input in turn weighted-sharded along each of
// its dims on one mesh dim of 1- to 3-d meshes; every strategy the engine offers that carries weights
// must give the single-device result. (Rows that cannot carry weights are not offered with them: the
// engine redistributes to an even placement, which the test above covers.)
TEST(GroundTruthValidator, WeightedShardsCarriedThroughEveryOp) {
  init_ops();
  const std::vector<Shape> meshes = {{3}, {4}, {2, 3}, {2, 2, 2}};
  const int64_t pattern[] = {3, 1, 2, 5};
  std::vector<std::string> failures;
  int checked = 0, calls = 0;
  std::set<std::string> ops_carrying;
  for (const std::string& name : Registry::get().names()) {
    const OpDef& op = Registry::get().find(name);
    if (!op.kernel) continue;  // the planned family
    uint64_t seed = 29;
    for (const Sample& s : op.samples()) {
      for (const Shape& mesh : meshes) {
        for (size_t t = 0; t < s.tensors.size(); ++t) {
          const int64_t rank = static_cast<int64_t>(s.tensors[t].shape.size());
          for (int32_t d = 0; d < rank; ++d) {
            if (s.tensors[t].shape[d] < 2) continue;
            const int i = static_cast<int>((t + d) % mesh.size());  // vary the mesh dim
            std::vector<int64_t> w(mesh[i]);
            for (int64_t r = 0; r < mesh[i]; ++r) w[r] = pattern[(r + d) % 4];
            std::vector<Placements> pl(s.tensors.size(), Placements(mesh.size(), Replicate()));
            pl[t][i] = Shard(d, w);
            std::optional<OpCall> call;
            try {
              call.emplace(OpCall::bind(op, s.positional, s.keyword, s.tensors, pl, mesh));
            } catch (const Error&) {
              continue;  // an op that takes no placements of this kind on this input
            }
            ++calls;
            const int before = checked;
            auto f = check_strategies(*call, 60, seed++, &checked, /*weighted_only=*/true);
            if (checked > before) ops_carrying.insert(name);
            failures.insert(failures.end(), f.begin(), f.end());
          }
        }
      }
    }
  }
  std::cout << "validator (weighted shards): " << calls << " calls, " << checked
            << " weighted strategies checked over " << ops_carrying.size() << " ops, " << failures.size()
            << " wrong\n";
  EXPECT_GT(checked, 500);
  for (const char* must : {"add", "mul", "mm", "sum", "view", "transpose"}) {
    if (!Registry::get().try_find(must)) continue;
    EXPECT_TRUE(ops_carrying.count(must)) << must << " carries no weights";
  }
  for (size_t i = 0; i < std::min<size_t>(failures.size(), 30); ++i) ADD_FAILURE() << failures[i];
  for (const auto& f : failures) std::cout << "WRONG: " << f << "\n";
}

// Valid single-mesh-dim rows that no rule lists, on a 1-d mesh of 2 and of 3: listed, not failed.
TEST(GroundTruthValidator, ListsValidRowsNoRuleCovers) {
  init_ops();
  int missed = 0;
  for (const std::string& name : Registry::get().names()) {
    const OpDef& op = Registry::get().find(name);
    if (!op.kernel) continue;  // the planned family
    const Sample s = op.samples()[0];
    OpCall call2 = bind_on(op, s, {2});
    auto meta = op.meta(call2);
    if (call2.num_tensors() + meta.size() > 4) continue;  // keep the search small
    std::set<std::string> listed;
    for (const Strategy& st : expand_strategies(call2, meta, false)) listed.insert(st.str());
    // Candidate placements per tensor: R, each S(d), each Partial op.
    auto options = [](int64_t rank) {
      std::vector<Placement> v{Replicate()};
      for (int32_t d = 0; d < rank; ++d) v.push_back(Shard(d));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) v.push_back(Partial(op));
      return v;
    };
    std::vector<std::vector<Placement>> slots;
    for (const auto& m : meta) slots.push_back(options(static_cast<int64_t>(m.shape.size())));
    for (int t = 0; t < call2.num_tensors(); ++t)
      slots.push_back(options(static_cast<int64_t>(call2.tensor(t).shape.size())));
    std::vector<size_t> idx(slots.size(), 0);
    std::vector<std::string> found;
    while (true) {
      Strategy st;
      for (size_t k = 0; k < slots.size(); ++k) {
        Placements p{slots[k][idx[k]]};
        if (k < meta.size()) st.outputs.push_back(p);
        else st.inputs.push_back(p);
      }
      st.steps.assign(1, 0);
      bool all_r = true;
      for (const auto& p : st.inputs) all_r &= p[0].is_replicate();
      if (!all_r && !listed.count(st.str())) {
        bool valid = true;
        for (const Shape& mesh : std::vector<Shape>{{2}, {3}}) {
          OpCall call = bind_on(op, s, mesh);
          for (uint64_t seed : {5u, 6u}) {
            try {
              auto g = make_globals(call, seed);
              valid &= testing::compare(testing::simulate(call, st, meta, g, seed), run_single_device(call, g)).empty();
            } catch (const std::exception&) {
              valid = false;
            }
            if (!valid) break;
          }
          if (!valid) break;
        }
        if (valid) found.push_back(st.str());
      }
      size_t k = slots.size();
      while (k > 0 && ++idx[k - 1] == slots[k - 1].size()) idx[--k] = 0;
      if (k == 0) break;
    }
    if (!found.empty())
      std::cout << "missed rows for " << call2.str() << ": " << absl::StrJoin(found, "; ") << "\n";
    missed += static_cast<int>(found.size());
  }
  std::cout << "validator: " << missed << " valid rows no rule covers (missed savings)\n";
}

}  // namespace
}  // namespace dtensor
