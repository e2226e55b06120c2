// Planning for a device count (planner/devices.h): the mesh factorizations (every one, and only
// those), the topology rule, memory-infeasible meshes rejected with the reason, the ranking against
// planning each mesh directly, and model FLOPs against a hand count. The shortcuts of the search
// (PlanOptions::bound_modes, shared move times, baselines after the search) against the search
// without them: the same ranking, rejections and chosen plan.
#include <algorithm>
#include <atomic>
#include <set>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "planner/devices.h"
#include "planner/models/zoo.h"

namespace dtensor::planner {
namespace {

std::set<Shape> shapes(const std::vector<MeshSpec>& ms) {
  std::set<Shape> out;
  for (const MeshSpec& m : ms) out.insert(m.shape);
  return out;
}

TEST(Devices, FactorizationsAreEveryOrderedOneOfUpToThreeDims) {
  const std::vector<MeshSpec> twelve = mesh_factorizations(12);
  EXPECT_EQ(twelve.size(), 8u);
  EXPECT_EQ(shapes(twelve), (std::set<Shape>{{12}, {2, 6}, {3, 4}, {4, 3}, {6, 2}, {2, 2, 3}, {2, 3, 2}, {3, 2, 2}}));
  EXPECT_EQ(twelve[1].str(), "dp=2,tp=6");
  EXPECT_EQ(twelve[5].str(), "dp=2,fsdp=2,tp=3");
  EXPECT_EQ(shapes(mesh_factorizations(7)), (std::set<Shape>{{7}}));  // a prime: one dim
  EXPECT_EQ(shapes(mesh_factorizations(1)), (std::set<Shape>{{1}}));
  EXPECT_EQ(shapes(mesh_factorizations(12, 2)).size(), 5u);
  // 2^14: 1 + 13 two-dim + C(13, 2) = 78 three-dim meshes.
  EXPECT_EQ(mesh_factorizations(16384).size(), 92u);
  // 2^17 devices: no 1-dim mesh (a dim holds at most 2^16 ranks), the others listed.
  for (const MeshSpec& m : mesh_factorizations(1 << 17)) {
    EXPECT_GE(m.ndim(), 2);
    EXPECT_EQ(m.size(), 1 << 17);
  }
  try {
    mesh_factorizations(0);
    ADD_FAILURE() << "0 devices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: 1 to"), std::string::npos) << e.what();
  }
}

TEST(Devices, TheInnermostDimStaysInAHost) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");  // 8 per host
  EXPECT_EQ(topology_rejection(MeshSpec::parse("dp=64"), hw), "");
  EXPECT_EQ(topology_rejection(MeshSpec::parse("dp=16,tp=8"), hw), "");
  EXPECT_EQ(topology_rejection(MeshSpec::parse("dp=4,fsdp=16,tp=2"), hw), "");  // fsdp may span hosts
  EXPECT_NE(topology_rejection(MeshSpec::parse("dp=4,tp=16"), hw).find("tp=16 does not fit in one host"),
            std::string::npos);
  EXPECT_NE(topology_rejection(MeshSpec::parse("dp=2,tp=12"), hw), "");  // 12 does not divide 8
}

TEST(Devices, ModelFlopsCountContractionsThreeTimesInTraining) {
  GraphBuilder b("mm", "one product");
  TensorId x = b.input("x", {16, 32}, DType::kBFloat16);
  TensorId w = b.param("w", {64, 32}, DType::kBFloat16);
  TensorId h = b.op1("fc", "linear", {x, w});
  b.op1("act", "gelu", {h});  // not a contraction: not counted
  EXPECT_DOUBLE_EQ(model_flops(b.finish(true)), 3.0 * 2 * 16 * 32 * 64);
}

models::ModelOptions small() {
  models::ModelOptions mo;
  mo.batch = 16;
  mo.seq = 256;
  mo.layers = 2;
  return mo;
}

// The 4-layer gpt2 of small() with a global batch of 64, for one mesh and for the pipeline search
// (a stage's layers and batch).
ModelGraph gpt2_4_layers(const MeshSpec& m) {
  models::ModelOptions mo = small();
  mo.batch = 64;
  mo.layers = 4;
  return models::build_model("gpt2", mo, m);
}

PipelineSearch gpt2_4_layer_pipelines() {
  PipelineSearch ps;
  ps.build = [](const MeshSpec& m, int layers, int64_t batch) {
    models::ModelOptions mo = small();
    mo.layers = layers;
    mo.batch = batch;
    return models::build_model("gpt2", mo, m);
  };
  ps.global_batch = 64;
  return ps;
}

TEST(Devices, RankingAgreesWithPlanningEachMeshDirectly) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  PlanOptions po;
  po.compare = false;
  auto build = [](const MeshSpec& m) { return models::build_model("gpt2", small(), m); };
  DevicesResult r = plan_devices(16, build, hw, po, 16 * 256);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.ranked.size() + r.rejected.size(), mesh_factorizations(16).size());
  for (size_t i = 1; i < r.ranked.size(); ++i) EXPECT_LE(r.ranked[i - 1].step_time_us, r.ranked[i].step_time_us);
  EXPECT_EQ(r.best_mesh.str(), r.ranked.front().mesh.str());
  // Each ranked mesh planned on its own gives the same prediction: the ranking is of real plans.
  for (const DeviceCandidate& c : r.ranked) {
    ModelGraph g = build(c.mesh);
    PlanResult p = plan_model(g, c.mesh, hw, po);
    EXPECT_DOUBLE_EQ(p.eval.step_time_us, c.step_time_us) << c.mesh.str();
    EXPECT_NEAR(c.tokens_per_s, 16 * 256 / (c.step_time_us * 1e-6), 1e-6 * c.tokens_per_s);
    EXPECT_NEAR(c.mfu, r.model_flops / (c.step_time_us * 1e-6 * 16 * r.peak_flops), 1e-12);
    EXPECT_GT(c.mfu, 0);
    EXPECT_LT(c.mfu, 1);
  }
  EXPECT_DOUBLE_EQ(r.best.eval.step_time_us, r.ranked.front().step_time_us);
  for (const DeviceCandidate& c : r.rejected) EXPECT_NE(c.rejected.find("does not fit in one host"), std::string::npos);
}

TEST(Devices, RecomputationIsChosenOnlyWhenItIsNeeded) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const MeshSpec mesh = MeshSpec::parse("dp=2");
  models::ModelOptions mo = small();
  mo.batch = 64;
  const ModelGraph g = models::build_model("gpt2", mo, mesh);
  PlanOptions po;
  po.compare = false;
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  // Memory to spare: recomputing only adds time, so none is the fastest.
  PlanResult ample = plan_model_recompute(g, mesh, hw, po, all);
  EXPECT_EQ(ample.cost_model->recompute(), Recompute::kNone);
  EXPECT_DOUBLE_EQ(ample.eval.step_time_us, plan_model(g, mesh, hw, po).eval.step_time_us);
  // A limit between what full recomputation and no recomputation need at least: a recomputing plan.
  PlanOptions tight = po;
  tight.recompute = Recompute::kFull;
  tight.memory_limit_bytes = 1e12;
  const double full_least = plan_model(g, mesh, hw, tight).eval.peak_memory_bytes;
  tight.recompute = Recompute::kNone;
  tight.memory_limit_bytes = 0.5 * full_least + 0.5 * ample.eval.peak_memory_bytes;
  ASSERT_LT(full_least, tight.memory_limit_bytes);
  PlanResult r = plan_model_recompute(g, mesh, hw, tight, all);
  EXPECT_NE(r.cost_model->recompute(), Recompute::kNone);
  EXPECT_LE(r.eval.peak_memory_bytes, tight.memory_limit_bytes);
  EXPECT_NE(absl::StrJoin(r.notes, "\n").find("activation recomputation: "), std::string::npos);
  EXPECT_GT(r.eval.step_time_us, ample.eval.step_time_us);
}

TEST(Devices, RecomputingSomeLayersIsTriedAndTheFastestKept) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const MeshSpec mesh = MeshSpec::parse("dp=2");
  const ModelGraph g = gpt2_4_layers(mesh);
  PlanOptions po;
  po.compare = false;
  // A limit between full recomputation's least memory and no recomputation's: none does not fit.
  PlanOptions full = po;
  full.recompute = Recompute::kFull;
  full.memory_limit_bytes = 1e12;
  const double full_least = plan_model(g, mesh, hw, full).eval.peak_memory_bytes;
  const double none_peak = plan_model(g, mesh, hw, po).eval.peak_memory_bytes;
  po.memory_limit_bytes = 0.7 * full_least + 0.3 * none_peak;
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  PlanResult uniform = plan_model_recompute(g, mesh, hw, po, all);
  PlanResult mixed = plan_model_recompute(g, mesh, hw, po, all, /*per_layer=*/true);
  EXPECT_LE(mixed.eval.step_time_us, uniform.eval.step_time_us);
  EXPECT_LE(mixed.eval.peak_memory_bytes, po.memory_limit_bytes);
  const std::string notes = absl::StrJoin(mixed.notes, "\n");
  EXPECT_NE(notes.find("full on the first "), std::string::npos) << notes;  // the partial plans were tried
  if (mixed.cost_model->recompute_layers() >= 0) {  // a partial plan won: it is priced as it says
    EXPECT_GT(mixed.cost_model->recompute_layers(), 0);
    EXPECT_LT(mixed.cost_model->recompute_layers(), 4);
    PlanOptions o = po;
    o.recompute = Recompute::kFull;
    o.recompute_layers = mixed.cost_model->recompute_layers();
    EXPECT_DOUBLE_EQ(plan_model(g, mesh, hw, o).eval.step_time_us, mixed.eval.step_time_us);
  }
}

TEST(Devices, MemoryLowerBoundIsBelowEveryPlanAndAboveItNothingFits) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const MeshSpec mesh = MeshSpec::parse("dp=2,tp=2");
  models::ModelOptions mo = small();
  mo.batch = 64;
  const ModelGraph g = models::build_model("gpt2", mo, mesh);
  for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    PlanOptions po;
    po.compare = false;
    po.recompute = mode;
    po.memory_limit_bytes = 1e15;
    const int64_t least = memory_lower_bound(CostModel(g, mesh, hw, {}, mode));
    EXPECT_GT(least, 0);
    // The fastest plan, and the least-memory one the search finds under a limit it must fit.
    const PlanResult fast = plan_model(g, mesh, hw, po);
    EXPECT_LE(least, fast.eval.peak_memory_bytes) << recompute_name(mode);
    Planner planner(g, mesh, hw, po);
    const Planner::Search s = planner.lagrangian(nullptr, 0);
    ASSERT_TRUE(s.least.valid);
    EXPECT_LE(least, s.least.eval.peak_memory_bytes) << recompute_name(mode);
    po.memory_limit_bytes = static_cast<double>(least) * (1 - 1e-9);
    EXPECT_THROW(plan_model(g, mesh, hw, po), Error) << recompute_name(mode);
  }
}

// The memory bound of another recomputation mode read from one cost model (what it keeps is all that
// changes) equals the bound of that mode's own cost model: every pair of modes, recomputing every
// layer or the first one, with 1 and 3 activation copies (a pipeline stage's), on a 2-d mesh.
TEST(Devices, MemoryLowerBoundOfAnotherModeEqualsItsOwnCostModels) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const MeshSpec mesh = MeshSpec::parse("dp=2,tp=2");
  models::ModelOptions mo = small();
  mo.batch = 64;
  const ModelGraph g = models::build_model("gpt2", mo, mesh);
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  for (int copies : {1, 3})
    for (int layers : {-1, 1})
      for (Recompute from : all) {
        const CostModel base(g, mesh, hw, {}, from, copies, layers);
        for (Recompute to : all) {
          const int64_t own = memory_lower_bound(CostModel(g, mesh, hw, {}, to, copies, layers));
          EXPECT_EQ(memory_lower_bound(base, to, layers), own)
              << recompute_name(from) << " -> " << recompute_name(to) << ", copies " << copies << ", layers " << layers;
        }
      }
}

// A limit that full recomputation fits and no recomputation's bound exceeds: the bound skips none.
double limit_between_full_and_none_bound(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw) {
  PlanOptions full;
  full.compare = false;
  full.recompute = Recompute::kFull;
  full.memory_limit_bytes = 1e15;
  Planner planner(g, mesh, hw, full);
  const double full_least = static_cast<double>(planner.lagrangian(nullptr, 0).least.eval.peak_memory_bytes);
  const double none_bound = static_cast<double>(memory_lower_bound(CostModel(g, mesh, hw, {}, Recompute::kNone)));
  EXPECT_LT(full_least, none_bound);
  return 0.5 * (full_least + none_bound);
}

TEST(Devices, ModesSkippedByTheirMemoryBoundChangeNoChoice) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const MeshSpec mesh = MeshSpec::parse("dp=2");
  models::ModelOptions mo = small();
  mo.batch = 64;
  const ModelGraph g = models::build_model("gpt2", mo, mesh);
  PlanOptions po;
  po.memory_limit_bytes = limit_between_full_and_none_bound(g, mesh, hw);
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const PlanResult exact = plan_model_recompute(g, mesh, hw, po, all);
  po.bound_modes = true;
  const PlanResult bounded = plan_model_recompute(g, mesh, hw, po, all);
  const std::string notes = absl::StrJoin(bounded.notes, "\n");
  EXPECT_NE(notes.find(": no plan fits: needs at least"), std::string::npos) << notes;
  EXPECT_NE(notes.find("not searched"), std::string::npos) << notes;  // the bound fired
  EXPECT_EQ(bounded.cost_model->recompute(), exact.cost_model->recompute());
  EXPECT_EQ(bounded.eval.step_time_us, exact.eval.step_time_us);
  EXPECT_EQ(bounded.eval.peak_memory_bytes, exact.eval.peak_memory_bytes);
  EXPECT_EQ(bounded.source, exact.source);
}

// plan_devices with the shortcuts (bound_modes, shared move times, baselines after each search)
// against without bound_modes, with pipelines and every recomputation mode: every candidate, its
// figures, each rejection's reason and the chosen plan (its notes included) are the same.
TEST(Devices, TheBoundedSearchRanksExactlyAsTheFullOne) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const auto build = gpt2_4_layers;
  PipelineSearch ps = gpt2_4_layer_pipelines();
  PlanOptions po;
  po.memory_limit_bytes = limit_between_full_and_none_bound(build(MeshSpec::parse("dp=2")), MeshSpec::parse("dp=2"), hw);
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const DevicesResult exact = plan_devices(8, build, hw, po, 64 * 256, all, &ps);
  po.bound_modes = true;
  const DevicesResult bounded = plan_devices(8, build, hw, po, 64 * 256, all, &ps);
  ASSERT_EQ(bounded.ranked.size(), exact.ranked.size());
  for (size_t i = 0; i < exact.ranked.size(); ++i) {
    const DeviceCandidate &a = exact.ranked[i], &b = bounded.ranked[i];
    EXPECT_EQ(b.label(), a.label());
    EXPECT_EQ(b.recompute, a.recompute) << a.label();
    EXPECT_EQ(b.step_time_us, a.step_time_us) << a.label();
    EXPECT_EQ(b.compute_us, a.compute_us) << a.label();
    EXPECT_EQ(b.comm_us, a.comm_us) << a.label();
    EXPECT_EQ(b.peak_memory_bytes, a.peak_memory_bytes) << a.label();
  }
  ASSERT_EQ(bounded.rejected.size(), exact.rejected.size());
  for (size_t i = 0; i < exact.rejected.size(); ++i) {
    EXPECT_EQ(bounded.rejected[i].label(), exact.rejected[i].label());
    EXPECT_EQ(bounded.rejected[i].rejected, exact.rejected[i].rejected);
  }
  EXPECT_GT(exact.ranked.size(), 3u);
  EXPECT_EQ(bounded.best_mesh.str(), exact.best_mesh.str());
  EXPECT_EQ(bounded.best.eval.step_time_us, exact.best.eval.step_time_us);
  EXPECT_EQ(bounded.best.notes, exact.best.notes);
  EXPECT_EQ(bounded.best_pipeline.has_value(), exact.best_pipeline.has_value());
  if (exact.best_pipeline) {
    EXPECT_EQ(bounded.best_pipeline->step_time_us, exact.best_pipeline->step_time_us);
  }
}

// one_graph: the model built once and every mesh planned on it (by the workers at once), the same
// candidates, figures, rejections and bounds as building it per mesh.
TEST(Devices, OneGraphForEveryMeshRanksAsAGraphPerMesh) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  std::atomic<int> builds{0};
  const auto build = [&](const MeshSpec& m) {
    ++builds;
    return gpt2_4_layers(m);
  };
  PipelineSearch ps = gpt2_4_layer_pipelines();
  PlanOptions po;
  po.memory_limit_bytes = 0.3e9;
  po.bound_modes = true;
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const DevicesResult each = plan_devices(16, build, hw, po, 64 * 256, all, &ps, 2);
  const int per_mesh = builds.exchange(0);
  const DevicesResult one = plan_devices(16, build, hw, po, 64 * 256, all, &ps, 2, /*one_graph=*/true);
  EXPECT_EQ(builds.load(), 1);
  EXPECT_GT(per_mesh, 3);
  auto rows = [](const DevicesResult& r) {
    std::vector<std::string> out;
    for (const auto* list : {&r.ranked, &r.rejected, &r.pruned})
      for (const DeviceCandidate& c : *list)
        out.push_back(absl::StrCat(c.label(), " ", recompute_name(c.recompute), " ", c.step_time_us, " ", c.compute_us,
                                   " ", c.comm_us, " ", c.peak_memory_bytes, " ", c.lower_bound_us, " ", c.rejected));
    return out;
  };
  EXPECT_EQ(rows(one), rows(each));
  EXPECT_EQ(one.best_mesh.str(), each.best_mesh.str());
  EXPECT_EQ(one.best.eval.step_time_us, each.best.eval.step_time_us);
  EXPECT_EQ(one.best.notes, each.best.notes);
}

TEST(Devices, TimeLowerBoundsAreBelowThePlans) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  models::ModelOptions mo = small();
  mo.batch = 64;
  for (const char* m : {"dp=4", "dp=2,tp=2", "dp=2,fsdp=2,tp=2", "tp=4"}) {
    const MeshSpec mesh = MeshSpec::parse(m);
    const ModelGraph g = models::build_model("gpt2", mo, mesh);
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      for (double limit : {1e15, 0.0}) {
        PlanOptions po;
        po.recompute = mode;
        po.memory_limit_bytes = limit;
        const Planner planner(g, mesh, hw, po);
        if (limit == 0) {  // a limit that binds: halfway between the least memory and the fastest plan's
          const Planner::Search s = planner.lagrangian(nullptr, 1e15);
          po.memory_limit_bytes = 0.5 * (s.least.eval.peak_memory_bytes + s.best.eval.peak_memory_bytes);
        }
        PlanResult r;
        try {
          r = plan_model(g, mesh, hw, po);
        } catch (const Error&) {
          continue;  // nothing fits: nothing to bound
        }
        Planner bounded(g, mesh, hw, po);
        const double tables = bounded.lower_bound(r.memory_limit_bytes);
        const double cheap = time_lower_bound(CostModel(g, mesh, hw, {}, mode));
        const std::string what = absl::StrCat(m, " ", recompute_name(mode), " limit ", po.memory_limit_bytes);
        EXPECT_LE(tables, r.eval.step_time_us) << what;
        EXPECT_LE(cheap, r.eval.step_time_us) << what;
        EXPECT_GT(cheap, 0) << what;
        for (const Baseline& b : r.baselines) {
          if (!b.valid || !b.fits) continue;
          EXPECT_LE(tables, b.eval.step_time_us) << what << " " << b.name;
        }
        // run() after lower_bound reuses its solves: the same plan as without it.
        EXPECT_EQ(bounded.run().eval.step_time_us, r.eval.step_time_us) << what;
      }
    }
  }
}

// lower_bound's feasibility (a plan that fits exists: the memory search finds one) against the
// memory search itself, on limits between the least memory and the fastest plan's (where the
// fastest plan with its parameters and optimizer state in their least layouts may prove it), just
// above the least memory, and just below it (nothing fits).
TEST(Devices, LowerBoundSaysWhetherThePlanFits) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  models::ModelOptions mo = small();
  mo.batch = 64;
  int fits = 0, not_fits = 0;
  for (const char* m : {"dp=4", "dp=2,tp=2", "dp=2,fsdp=2,tp=2"}) {
    const MeshSpec mesh = MeshSpec::parse(m);
    const ModelGraph g = models::build_model("gpt2", mo, mesh);
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      PlanOptions po;
      po.recompute = mode;
      const Planner planner0(g, mesh, hw, po);
      const Planner::Search fast = planner0.lagrangian(nullptr, 1e15), small = planner0.lagrangian(nullptr, 0);
      ASSERT_TRUE(fast.best.valid && small.least.valid);
      const double least = static_cast<double>(small.least.eval.peak_memory_bytes);
      const double fastest = static_cast<double>(fast.best.eval.peak_memory_bytes);
      for (double limit : {0.1 * least + 0.9 * fastest, 0.5 * (least + fastest), least * (1 + 1e-6), least * (1 - 1e-6)}) {
        const std::string what = absl::StrCat(m, " ", recompute_name(mode), " limit ", limit);
        const Planner planner(g, mesh, hw, po);
        bool feasible = false;
        planner.lower_bound(limit, &feasible);
        const bool want = Planner(g, mesh, hw, po).lagrangian(nullptr, limit).best.valid;
        EXPECT_EQ(feasible, want) << what;
        (want ? fits : not_fits) += 1;
      }
    }
  }
  EXPECT_GT(fits, 0);
  EXPECT_GT(not_fits, 0);
}

// Baselines priced only until they cannot beat the search (plan_devices' candidates): the same plan
// and figures as pricing them, and full_baselines() prices them as plan_model does; some are cut
// (on limits between the least memory and the fastest plan's).
TEST(Devices, BaselinesPricedOnlyToBeatTheSearchChangeNoFigure) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  models::ModelOptions mo = small();
  mo.batch = 64;
  int cut = 0;
  for (const char* m : {"dp=4", "dp=2,tp=2", "dp=2,fsdp=2,tp=2"}) {
    const MeshSpec mesh = MeshSpec::parse(m);
    const ModelGraph g = models::build_model("gpt2", mo, mesh);
    PlanOptions po;
    po.parallel_baselines = false;
    const Planner planner0(g, mesh, hw, po);
    const double least = static_cast<double>(planner0.lagrangian(nullptr, 0).least.eval.peak_memory_bytes);
    const double fastest = static_cast<double>(planner0.lagrangian(nullptr, 1e15).best.eval.peak_memory_bytes);
    for (double limit : {1e15, 0.5 * (least + fastest), 0.9 * least + 0.1 * fastest}) {
      const std::string what = absl::StrCat(m, " limit ", limit);
      po.memory_limit_bytes = limit;
      po.baselines_to_beat = false;
      const PlanResult all = plan_model(g, mesh, hw, po);
      po.baselines_to_beat = true;
      PlanResult some = plan_model(g, mesh, hw, po);
      EXPECT_EQ(some.eval.step_time_us, all.eval.step_time_us) << what;
      EXPECT_EQ(some.eval.peak_memory_bytes, all.eval.peak_memory_bytes) << what;
      EXPECT_EQ(some.source, all.source) << what;
      EXPECT_EQ(some.notes, all.notes) << what;
      if (!some.full_baselines) {
        EXPECT_EQ(some.baselines.size(), all.baselines.size()) << what;
        continue;
      }
      ++cut;
      const std::vector<Baseline> full = some.full_baselines();
      ASSERT_EQ(full.size(), all.baselines.size()) << what;
      for (size_t i = 0; i < full.size(); ++i) {
        EXPECT_EQ(full[i].name, all.baselines[i].name) << what;
        EXPECT_EQ(full[i].valid, all.baselines[i].valid) << what << " " << full[i].name;
        EXPECT_EQ(full[i].fits, all.baselines[i].fits) << what << " " << full[i].name;
        EXPECT_EQ(full[i].note, all.baselines[i].note) << what << " " << full[i].name;
        EXPECT_EQ(full[i].eval.step_time_us, all.baselines[i].eval.step_time_us) << what << " " << full[i].name;
        EXPECT_EQ(full[i].eval.peak_memory_bytes, all.baselines[i].eval.peak_memory_bytes) << what << " " << full[i].name;
      }
    }
  }
  EXPECT_GT(cut, 0);
}

// Branch and bound (keep > 0) against planning every candidate: the keep fastest and every plan
// within their times are the same, and each pruned mesh's bound is below what planning it gives.
TEST(Devices, BranchAndBoundKeepsTheFastestExactly) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  const auto build = gpt2_4_layers;
  PipelineSearch ps = gpt2_4_layer_pipelines();
  PlanOptions po;
  po.memory_limit_bytes = 0.3e9;  // on 2 hosts: some meshes only fit recomputing, some not at all
  po.bound_modes = true;
  const std::vector<Recompute> all = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const DevicesResult exact = plan_devices(16, build, hw, po, 64 * 256, all, &ps);
  for (int keep : {1, 2}) {
    const DevicesResult bb = plan_devices(16, build, hw, po, 64 * 256, all, &ps, keep);
    ASSERT_GE(exact.ranked.size(), static_cast<size_t>(keep));
    const double kth = exact.ranked[keep - 1].step_time_us;
    EXPECT_EQ(bb.kth_step_time_us, kth);
    EXPECT_FALSE(bb.pruned.empty()) << "keep " << keep;  // the bound prunes some mesh here
    // Every plan within the keep-th fastest's time, in the same order with the same figures.
    size_t within = 0;
    while (within < exact.ranked.size() && exact.ranked[within].step_time_us <= kth) ++within;
    ASSERT_GE(bb.ranked.size(), within);
    for (size_t i = 0; i < within; ++i) {
      EXPECT_EQ(bb.ranked[i].label(), exact.ranked[i].label());
      EXPECT_EQ(bb.ranked[i].recompute, exact.ranked[i].recompute);
      EXPECT_EQ(bb.ranked[i].step_time_us, exact.ranked[i].step_time_us);
      EXPECT_EQ(bb.ranked[i].peak_memory_bytes, exact.ranked[i].peak_memory_bytes);
    }
    // The others ranked are exact's too; the pruned are meshes exact ranks slower, or rejects.
    for (const DeviceCandidate& c : bb.ranked) {
      const auto at = std::find_if(exact.ranked.begin(), exact.ranked.end(),
                                   [&](const DeviceCandidate& e) { return e.label() == c.label(); });
      ASSERT_NE(at, exact.ranked.end()) << c.label();
      EXPECT_EQ(at->step_time_us, c.step_time_us) << c.label();
    }
    for (const DeviceCandidate& c : bb.pruned) {
      EXPECT_EQ(c.stages, 1) << c.label();
      EXPECT_GT(c.lower_bound_us, kth) << c.label();
      const auto at = std::find_if(exact.ranked.begin(), exact.ranked.end(),
                                   [&](const DeviceCandidate& e) { return e.label() == c.label(); });
      if (at != exact.ranked.end()) {
        EXPECT_LE(c.lower_bound_us, at->step_time_us) << c.label();
      }
    }
    EXPECT_EQ(bb.ranked.size() + bb.rejected.size() + bb.pruned.size(), exact.ranked.size() + exact.rejected.size());
    EXPECT_EQ(bb.best_mesh.str(), exact.best_mesh.str());
    EXPECT_EQ(bb.best.eval.step_time_us, exact.best.eval.step_time_us);
    EXPECT_EQ(bb.best.notes, exact.best.notes);
    EXPECT_NE(devices_table(bb, keep).find("pruned: a plan of it that fits takes at least"), std::string::npos);
  }
}

TEST(Devices, MemoryInfeasibleMeshesAreRejectedWithTheReason) {
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  PlanOptions po;
  po.compare = false;
  po.memory_limit_bytes = 1e6;  // 1 MB: nothing fits
  auto build = [](const MeshSpec& m) { return models::build_model("gpt2", small(), m); };
  try {
    plan_devices(4, build, hw, po, 16 * 256);
    ADD_FAILURE() << "a plan fitted 1 MB";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no mesh is admitted and fits"), std::string::npos) << what;
    EXPECT_NE(what.find("dp=4: no plan fits: needs at least"), std::string::npos) << what;
    EXPECT_NE(what.find("dp=2,tp=2: no plan fits: needs at least"), std::string::npos) << what;
    EXPECT_NE(what.find("(limit 0.0 GB)"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dtensor::planner
