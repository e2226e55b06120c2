// The plan search on small op graphs against exhaustive search over the same choices, and the
// decomposition of the objective (the solver's problem) against the plan evaluator.
#include <random>

#include "gtest/gtest.h"
#include "planner/search.h"

namespace dtensor::planner {
namespace {

constexpr DType kBf16 = DType::kBFloat16;

BuildArg L(std::vector<int64_t> v) { return IValue(std::move(v)); }

// x[16, 32] -> linear(w1[64, 32]) -> gelu -> linear(w2[32, 64]): a chain.
ModelGraph mlp(bool training) {
  GraphBuilder b("mlp", "chain");
  TensorId x = b.input("x", {16, 32}, kBf16);
  TensorId w1 = b.param("w1", {64, 32}, kBf16);
  TensorId w2 = b.param("w2", {32, 64}, kBf16);
  TensorId h = b.op1("fc1", "linear", {x, w1}, {}, "column");
  h = b.op1("act", "gelu", {h});
  b.op1("fc2", "linear", {h, w2}, {}, "row");
  return b.finish(training);
}

// Two inputs joined by mm, then relu and a sum: a tree (fan-in).
ModelGraph tree() {
  GraphBuilder b("tree", "fan-in");
  TensorId a = b.input("a", {8, 12}, kBf16);
  TensorId c = b.input("c", {12, 16}, kBf16);
  TensorId m = b.op1("mm", "mm", {a, c});
  TensorId r = b.op1("relu", "relu", {m});
  b.op1("sum", "sum", {r, L({1})});
  return b.finish(false);
}

// A residual block: x -> layer_norm -> linear -> add(x, .) (a diamond).
ModelGraph residual(bool training) {
  GraphBuilder b("residual", "diamond");
  TensorId x = b.input("x", {8, 16}, kBf16);
  TensorId w = b.param("w", {16, 16}, kBf16);
  TensorId n = b.op1("norm", "layer_norm", {x, L({16})});
  TensorId y = b.op1("fc", "linear", {n, w});
  b.op1("residual", "add", {x, y});
  return b.finish(training);
}

MeshSpec mesh(const std::string& s) { return MeshSpec::parse(s); }

// Exhaustive search over the planner's own problem, and the problem's objective against the
// evaluator on the optimum and on random plans.
void check(const ModelGraph& g, const std::string& m, double lambda = 0, Recompute recompute = Recompute::kNone) {
  SCOPED_TRACE(g.name + " on " + m + " lambda " + std::to_string(lambda) + " recompute " + recompute_name(recompute));
  PlanOptions o;
  o.use_templates = false;
  o.recompute = recompute;
  Planner planner(g, mesh(m), hardware_profile("h100-nvlink"), o);
  std::vector<int> var_of;
  MinSumProblem p = planner.build_problem(lambda, nullptr, &var_of);
  Solution e = solve_exhaustive(p);
  Solution s = solve(p);
  EXPECT_TRUE(s.exact);
  EXPECT_NEAR(s.cost, e.cost, 1e-9 * std::max(1.0, e.cost));
  double cost = 0;
  bool exact = false;
  std::vector<int> x = planner.solve(lambda, nullptr, &cost, &exact);
  EXPECT_NEAR(cost, e.cost, 1e-9 * std::max(1.0, e.cost));
  // The problem's objective is the evaluator's time + lambda * memory, for any plan.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> y(g.num_vertices(), -1);
    std::vector<int> vars(p.num_vars());
    for (int v = 0; v < g.num_vertices(); ++v) {
      if (var_of[v] < 0) continue;
      y[v] = trial == 0 ? x[v] : static_cast<int>(rng() % p.domain(var_of[v]));
      vars[var_of[v]] = y[v];
    }
    PlanEval ev = evaluate(planner.cost_model(), planner.choices(y), lambda);
    const double mem = g.training ? static_cast<double>(ev.peak_memory_bytes)
                                  : static_cast<double>(ev.param_bytes + ev.activation_bytes);
    double memory_term = lambda * mem;
    // Dropped-and-moved-again inputs are counted by the evaluator as time, not memory: both agree.
    EXPECT_NEAR(p.cost(vars), ev.step_time_us + memory_term, 1e-6 * std::max(1.0, p.cost(vars)));
  }
}

TEST(Search, ChainEqualsExhaustiveOn1dMesh) { check(mlp(true), "tp=4"); }
TEST(Search, ChainEqualsExhaustiveWithMemoryPrice) { check(mlp(true), "tp=4", 1e-4); }
TEST(Search, InferenceChainEqualsExhaustiveOn2dMesh) { check(mlp(false), "dp=2,tp=2"); }
TEST(Search, TreeEqualsExhaustiveOn2dMesh) { check(tree(), "dp=2,tp=2"); }
TEST(Search, ResidualEqualsExhaustiveOn1dMesh) { check(residual(true), "tp=4"); }
TEST(Search, ResidualEqualsExhaustiveOn2dInference) { check(residual(false), "dp=2,tp=2"); }
TEST(Search, ResidualEqualsExhaustiveWithMemoryPrice) { check(residual(true), "tp=2", 3e-3); }

// Two residual MLP layers between an input projection and a head (Node::layer 0 and 1).
ModelGraph layered(int layers = 2) {
  GraphBuilder b("layered", "residual MLP layers");
  TensorId x = b.input("x", {8, 16}, kBf16);
  x = b.op1("embed", "linear", {x, b.param("w_in", {16, 16}, kBf16)});
  for (int l = 0; l < layers; ++l) {
    b.set_layer(l);
    b.set_scope("layers." + std::to_string(l) + ".");
    TensorId n = b.op1("norm", "layer_norm", {x, L({16})});
    TensorId h = b.op1("fc1", "linear", {n, b.param("w1", {32, 16}, kBf16)}, {}, "column");
    h = b.op1("act", "gelu", {h});
    h = b.op1("fc2", "linear", {h, b.param("w2", {16, 32}, kBf16)}, {}, "row");
    x = b.op1("residual", "add", {x, h});
  }
  b.set_layer(-1);
  b.set_scope("");
  b.op1("head", "layer_norm", {x, L({16})});
  return b.finish(true);
}

// The solver's problem and the evaluator agree under recomputation too (steps and moves replayed,
// activations dropped): exhaustive optimum, solve, and random plans.
TEST(Search, RecomputedLayersEqualExhaustive) {
  for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    check(layered(1), "tp=2", 0, r);
    check(layered(1), "tp=2", 2e-3, r);
  }
}

// One plan (the same strategy per vertex) priced without and with recomputation: a recomputed op's
// compute is its forward four times over three (forward, backward's two, forward again); it keeps
// nothing for backward, but the layer's entering tensors are kept; ops outside layers are unchanged.
TEST(Search, RecomputationPricesEachVertexAsDerived) {
  const ModelGraph g = layered();
  PlanOptions none, sel, full;
  none.use_templates = sel.use_templates = full.use_templates = false;
  sel.recompute = Recompute::kSelective;
  full.recompute = Recompute::kFull;
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  Planner pn(g, mesh("dp=2"), hw, none), ps(g, mesh("dp=2"), hw, sel), pf(g, mesh("dp=2"), hw, full);
  double cost = 0;
  bool exact = false;
  std::vector<int> y = pn.solve(0, nullptr, &cost, &exact);  // the same choices in all three
  const PlanEval en = evaluate(pn.cost_model(), pn.choices(y)), es = evaluate(ps.cost_model(), ps.choices(y)),
                 ef = evaluate(pf.cost_model(), pf.choices(y));
  int recomputed = 0, kept_outputs = 0;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& nd = g.node(v);
    if (nd.kind != NodeKind::kOp) continue;
    SCOPED_TRACE(nd.name);
    const bool contraction = nd.op == "linear";
    if (nd.layer < 0) {
      EXPECT_DOUBLE_EQ(ef.vertices[v].compute_us, en.vertices[v].compute_us);
      EXPECT_EQ(ef.vertices[v].memory_bytes, en.vertices[v].memory_bytes);
      continue;
    }
    EXPECT_NEAR(ef.vertices[v].compute_us, en.vertices[v].compute_us * 4 / 3, 1e-9 * en.vertices[v].compute_us);
    EXPECT_NEAR(es.vertices[v].compute_us, en.vertices[v].compute_us * (contraction ? 1.0 : 4.0 / 3), 1e-9 * en.vertices[v].compute_us);
    EXPECT_TRUE(pf.cost_model().recomputed(v));
    EXPECT_EQ(ps.cost_model().recomputed(v), !contraction);
    recomputed += pf.cost_model().recomputed(v);
    // Full: an op keeps at most the tensor entering its layer (the norm and the residual read it).
    if (nd.name.find("norm") == std::string::npos && nd.name.find("residual") == std::string::npos) {
      EXPECT_EQ(ef.vertices[v].memory_bytes, 0);
    }
    if (contraction) kept_outputs += es.vertices[v].memory_bytes > 0;
  }
  EXPECT_EQ(recomputed, 10);     // 5 ops a layer
  EXPECT_EQ(kept_outputs, 4);    // fc1 and fc2 of each layer keep their outputs under selective
  EXPECT_LT(ef.activation_bytes, es.activation_bytes);
  EXPECT_LT(es.activation_bytes, en.activation_bytes);
  EXPECT_GT(ef.compute_us, es.compute_us);
  EXPECT_GT(es.compute_us, en.compute_us);
}

// Recomputing only the first of two layers: layer 0 priced as under full recomputation, layer 1 and
// everything outside the layers as without.
TEST(Search, RecomputingTheFirstLayersOnly) {
  const ModelGraph g = layered();
  PlanOptions none, first, full;
  none.use_templates = first.use_templates = full.use_templates = false;
  first.recompute = full.recompute = Recompute::kFull;
  first.recompute_layers = 1;
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  Planner pn(g, mesh("dp=2"), hw, none), p1(g, mesh("dp=2"), hw, first), pf(g, mesh("dp=2"), hw, full);
  double cost = 0;
  bool exact = false;
  const std::vector<int> y = pn.solve(0, nullptr, &cost, &exact);
  const PlanEval en = evaluate(pn.cost_model(), pn.choices(y)), e1 = evaluate(p1.cost_model(), p1.choices(y)),
                 ef = evaluate(pf.cost_model(), pf.choices(y));
  for (int v = 0; v < g.num_vertices(); ++v) {
    if (g.node(v).kind != NodeKind::kOp) continue;
    SCOPED_TRACE(g.node(v).name);
    const PlanEval& like = g.node(v).layer == 0 ? ef : en;
    EXPECT_DOUBLE_EQ(e1.vertices[v].compute_us, like.vertices[v].compute_us);
    EXPECT_EQ(p1.cost_model().recomputed(v), g.node(v).layer == 0);
  }
  EXPECT_LT(e1.activation_bytes, en.activation_bytes);
  EXPECT_GT(e1.activation_bytes, ef.activation_bytes);
}

TEST(Search, RepeatedLayersSolvedOnceGiveTheSamePlanCost) {
  // Four identical residual layers: the layer template must reproduce the whole-graph optimum.
  GraphBuilder b("stack", "4 residual layers");
  TensorId x = b.input("x", {8, 32}, kBf16);
  x = b.op1("embed", "linear", {x, b.param("w_in", {32, 32}, kBf16)});
  for (int l = 0; l < 4; ++l) {
    b.set_layer(l);
    b.set_scope("layers." + std::to_string(l) + ".");
    TensorId w1 = b.param("w1", {64, 32}, kBf16);
    TensorId w2 = b.param("w2", {32, 64}, kBf16);
    TensorId n = b.op1("norm", "layer_norm", {x, L({32})});
    TensorId h = b.op1("fc1", "linear", {n, w1}, {}, "column");
    h = b.op1("act", "gelu", {h});
    h = b.op1("fc2", "linear", {h, w2}, {}, "row");
    x = b.op1("residual", "add", {x, h});
  }
  b.set_layer(-1);
  b.set_scope("");
  b.op1("head", "layer_norm", {x, L({32})});
  ModelGraph g = b.finish(true);
  for (const char* m : {"tp=4", "dp=2,tp=2"}) {
    PlanOptions with, without;
    without.use_templates = false;
    Planner a(g, mesh(m), hardware_profile("h100-nvlink"), with);
    Planner c(g, mesh(m), hardware_profile("h100-nvlink"), without);
    double ca = 0, cc = 0;
    bool ea = false, ec = false;
    std::vector<int> xa = a.solve(0, nullptr, &ca, &ea);
    std::vector<int> xc = c.solve(0, nullptr, &cc, &ec);
    EXPECT_TRUE(ea && ec);
    EXPECT_NEAR(ca, cc, 1e-9 * cc) << m;
    EXPECT_NEAR(evaluate(a.cost_model(), a.choices(xa)).step_time_us, ca, 1e-6 * ca);
    PlanResult r = a.run();
    EXPECT_EQ(r.templates, 1);
    EXPECT_EQ(r.templated_layers, 4);
  }
}

TEST(Search, TensorUsedBySeveralOpsMovesOnceAndItsGradientsAreSummedFirst) {
  // A row-parallel linear's output, normalized, feeds q, k and v (Megatron's attention input). The
  // norm's output moves once for the three (sequence parallelism's all-gather, or nothing after an
  // all-reduce), and the three input gradients are summed before one collective takes them back.
  GraphBuilder b("qkv", "norm feeding three column-parallel linears");
  TensorId x = b.input("x", {2, 256, 512}, kBf16);
  x = b.op1("proj", "linear", {x, b.param("w_in", {512, 512}, kBf16)}, {}, "row");
  TensorId n = b.op1("norm", "layer_norm", {x, L({512})});
  std::vector<TensorId> qkv;
  for (const char* name : {"q", "k", "v"})
    qkv.push_back(b.op1(name, "linear", {n, b.param(std::string("w") + name, {512, 512}, kBf16)}, {}, "column"));
  TensorId s = b.op1("qk", "add", {qkv[0], qkv[1]});
  s = b.op1("qkv", "add", {s, qkv[2]});
  b.op1("out", "linear", {s, b.param("w_out", {512, 512}, kBf16)}, {}, "row");
  ModelGraph g = b.finish(true);
  const int r = g.find("norm.redistribute");
  ASSERT_GE(r, 0);
  EXPECT_EQ(g.node(r).kind, NodeKind::kRedistribute);
  for (const char* name : {"q", "k", "v"}) EXPECT_EQ(g.inputs(g.find(name))[0].node, r) << name;
  EXPECT_EQ(g.inputs(r)[0].node, g.find("norm"));

  PlanResult res = plan_model(g, mesh("tp=4"), hardware_profile("h100-nvlink"));
  const Baseline* megatron = nullptr;
  for (const Baseline& bl : res.baselines)
    if (bl.name == "megatron") megatron = &bl;
  ASSERT_TRUE(megatron && megatron->valid) << (megatron ? megatron->note : "no megatron baseline");
  // Megatron's q, k, v take the norm's output replicated, and give Partial input gradients.
  int fwd = 0, bwd = 0;  // collectives moving the norm's output or its gradient
  for (int v : {r, g.find("q"), g.find("k"), g.find("v")})
    for (const CollectiveUse& c : megatron->eval.vertices[v].collectives) {
      if (c.input != 0) continue;
      fwd += c.phase == "forward";
      bwd += c.phase == "backward";
    }
  EXPECT_LE(fwd, 1);
  EXPECT_EQ(bwd, 1);
  EXPECT_EQ(res.source, "search") << "a baseline beat the search";
  EXPECT_LE(res.search_eval.step_time_us, megatron->eval.step_time_us * 1.01);
}

// move_time prices a move from its steps planned once per pair of placements for every mesh and
// tensor (cost.cc, MoveSkeletons), each step's bytes from this mesh and tensor: the same figures as
// move(), which plans every move with compute_redistribute_plan. Every pair of R, P(sum) and S(d)
// placements of tensors of rank 1 to 4 whose sizes the mesh dims do not all divide (uneven shards),
// on 1-, 2- and 3-d meshes, bucketed (a parameter's) or not.
TEST(Search, MoveTimesFromPlannedStepsEqualEachMovePlanned) {
  const std::vector<Shape> shapes = {{7}, {6, 5}, {12, 5, 3}, {4, 9, 2, 6}};
  GraphBuilder b("moves", "tensors of rank 1 to 4");
  for (size_t i = 0; i < shapes.size(); ++i)
    b.op1("relu" + std::to_string(i), "relu", {b.input("x" + std::to_string(i), shapes[i], kBf16)});
  const ModelGraph g = b.finish(true);
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  for (const char* m : {"tp=3", "dp=2,tp=4", "dp=3,fsdp=2,tp=4"}) {
    const CostModel cm(g, mesh(m), hw);
    CostModel::MoveTimes cache;
    const int nd = cm.mesh().ndim();
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(std::string(m) + " " + shape_str(shape));
      const TensorMeta meta{shape, kBf16};
      const int id = cm.meta_id(meta);
      const int r = static_cast<int>(shape.size());
      std::vector<Placements> all;
      std::vector<int> digit(nd, 0);  // 0: R, 1: P, 2 + d: S(d)
      while (true) {
        Placements p(nd);
        for (int i = 0; i < nd; ++i) p[i] = digit[i] == 0 ? Replicate() : digit[i] == 1 ? Partial() : Shard(digit[i] - 2);
        all.push_back(p);
        int i = nd - 1;
        while (i >= 0 && ++digit[i] == r + 2) digit[i--] = 0;
        if (i < 0) break;
      }
      int moved = 0;
      for (const Placements& src : all)
        for (const Placements& dst : all)
          for (bool bucketed : {false, true}) {
            const CostModel::MoveTime t = cm.move_time(src, dst, id, cache, bucketed);
            const Move& want = cm.move(src, dst, meta, bucketed);
            moved += want.comm;
            ASSERT_EQ(t.us, want.us) << placements_str(src) << " -> " << placements_str(dst) << " bucketed " << bucketed;
            ASSERT_EQ(t.comm, want.comm) << placements_str(src) << " -> " << placements_str(dst);
          }
      EXPECT_GT(moved, 0);
    }
  }
}

}  // namespace
}  // namespace dtensor::planner
