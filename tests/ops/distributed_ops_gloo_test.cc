// The distributed algorithms of DESIGN §6 on real processes: every strategy with a distributed step
// (carry_exchange, select, candidate_gather, halo_exchange, softmax_stats, loss_parallel) of the
// scan, selection and pooling families, of softmax / log_softmax / logsumexp / cross_entropy and of
// any other op that has a step (the pooling backward ops' halo exchange), plus a few rows without a
// step, run on 4 Gloo processes on the meshes [4] and [2, 2], must give the single-device op's
// result: indices and integers exactly, floats within the dtype's tolerance.
//
// The cases are every sample of each op (OpDef::samples, data from OpDef::make_input, as the
// ground-truth validator draws them; their odd sizes give uneven and empty shards) plus, per family,
// a few extra cases with the active dim smaller than the mesh (so that some ranks hold nothing).
// For every case and every picked strategy each rank builds its block of the inputs by
// adversarial_local_block (Partial inputs split adversarially), runs execute_strategy (the step's
// collectives on the Gloo groups of the mesh) and gathers every output's full_tensor(). The all-R
// row gets its inputs laid out as the first step row's inputs, so that execute_strategy's own
// redistribution (replicate-then-compute) runs too.
//
// One binary, two roles, as tests/dtensor/redistribute_gloo_test.cc. Without
// DTENSOR_DIST_OPS_GLOO_SCENARIO in the environment it is the GoogleTest driver: each TEST starts 4
// ranks of this binary through the launcher library, naming a scenario "<mesh>/<group>", and checks
// how every rank exited. With it, it is a worker: it runs the scenario and exits 0 (every output
// matched) or 1. Every rank computes the same full tensors and the same reference, so all ranks find
// the same mismatches and stay in lockstep; a worker goes through all its cases and then fails with
// the count and the first mismatch (on stderr and in <DTENSOR_DIST_OPS_GLOO_REPORT>/rank<r>.txt). An
// exception (a step that throws, a collective that times out) ends the worker at once. Rank 0 also
// writes a summary line (cases, strategies checked, step rows, step rows with an empty shard) to
// summary.txt, which the driver checks so that the test cannot pass vacuously.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/dtensor.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "tests/testing/rank_reports.h"
#include "tests/testing/rank_worker.h"
#include "ops/common/defs.h"
#include "tools/launcher.h"
#include "tests/ops/simulated_mesh.h"

namespace dtensor {
namespace {

using std::chrono::milliseconds;
using testing::bind_on;
using testing::make_globals;
using Clock = std::chrono::steady_clock;

constexpr char kScenarioVar[] = "DTENSOR_DIST_OPS_GLOO_SCENARIO";
constexpr char kReportVar[] = "DTENSOR_DIST_OPS_GLOO_REPORT";
constexpr int kWorld = 4;
constexpr uint64_t kSeed = 20261122;
// Rows without a step checked per case, besides the all-R row.
constexpr int kPlainRowsPerCase = 3;
// Generous for a loaded 2-core machine; a desynchronised worker still ends well before the driver's
// limit.
constexpr Timeout kTimeout = milliseconds(30000);

// ------------------------------------------------------------------------------------------------
// The cases.

enum class Group { kScan, kSelection, kPooling, kSoftmax, kOtherSteps };
const std::vector<std::pair<std::string, Group>> kGroups = {
    {"scan", Group::kScan},
    {"selection", Group::kSelection},
    {"pooling", Group::kPooling},
    {"softmax", Group::kSoftmax},
    {"other_steps", Group::kOtherSteps},
};

bool is_softmax_op(const std::string& name) {
  return name == "softmax" || name == "log_softmax" || name == "logsumexp" || name == "cross_entropy";
}

bool in_group(const OpDef& op, Group g) {
  switch (g) {
    case Group::kScan: return op.family == "scan";
    case Group::kSelection: return op.family == "selection";
    case Group::kPooling: return op.family == "pooling";
    case Group::kSoftmax: return is_softmax_op(op.name());
    case Group::kOtherSteps:
      return !op.steps.empty() && op.family != "scan" && op.family != "selection" &&
             op.family != "pooling" && !is_softmax_op(op.name());
  }
  return false;
}

struct Case {
  const OpDef* op;
  Sample sample;
  std::string label;  // "sample 2" or "extra 1"
};

// Extra cases whose active dim (the one the step keeps sharded) is smaller than a mesh dim, so that
// some ranks hold an empty shard of it: sizes 2 and 3 (empty on the mesh [4]) and 1 (empty on
// either mesh; the steps run over one mesh dim of 2 on [2, 2]).
std::vector<std::pair<std::string, Sample>> extra_samples(Group g) {
  using ops::I;
  using ops::L;
  using ops::sample;
  using ops::T;
  using ops::V;
  const IValue none = std::monostate{};
  switch (g) {
    case Group::kScan:
      return {{"cumsum", sample({{3, 5}}, {T(0), I(0)})},
              {"cummax", sample({{6, 2}}, {T(0), I(1)})},
              {"logcumsumexp", sample({{2, 3, 3}}, {T(0), I(-1)})},
              {"cumprod", sample({{1, 4}}, {T(0), I(0)})},
              {"cummin", sample({{3, 1, 2}}, {T(0), I(1)})}};
    case Group::kSelection:
      return {{"median.dim", sample({{3, 6}}, {T(0), I(0)})},
              {"nanmedian.dim", sample({{5, 2}}, {T(0), I(1), V(true)})},
              {"kthvalue", sample({{3, 4}}, {T(0), I(2), I(0)})},
              {"max.dim", sample({{2, 5}}, {T(0), I(0), V(true)})},
              {"argmin", sample({{3, 2}}, {T(0), I(1)})},
              {"median", sample({{3}}, {T(0)})},
              {"median.dim", sample({{1, 4}}, {T(0), I(0)})},
              {"min.dim", sample({{4, 1}}, {T(0), I(1)})},
              {"kthvalue", sample({{2, 1, 3}}, {T(0), I(1), I(1), V(true)})},
              // The radix select's other key widths (64-, 16-bit), k at 1 and at n.
              {"median.dim", sample({{7, 2}}, {T(0), I(0)}, {}, {DType::kInt64})},
              {"kthvalue", sample({{6, 3}}, {T(0), I(6), I(0)}, {}, {DType::kFloat64})},
              {"kthvalue", sample({{5}}, {T(0), I(1), I(0)}, {}, {DType::kBFloat16})},
              {"nanmedian", sample({{5, 3}}, {T(0)}, {}, {DType::kFloat64})},
              {"median", sample({{9}}, {T(0)}, {}, {DType::kInt32})}};
    case Group::kPooling:
      // Kernel 3, stride 1, padding 1: every output row needs both neighbours' rows.
      return {{"avg_pool2d", sample({{2, 3, 3, 5}}, {T(0), L({3}), L({1}), L({1})})},
              {"max_pool2d_with_indices", sample({{2, 3, 3, 5}}, {T(0), L({3}), L({1}), L({1})})},
              {"avg_pool1d", sample({{2, 3, 2}}, {T(0), L({2}), L({1}), L({1})})},
              {"max_pool2d_with_indices", sample({{2, 2, 1, 5}}, {T(0), L({3}), L({1}), L({1})})},
              {"avg_pool2d", sample({{2, 2, 5, 1}}, {T(0), L({3}), L({1}), L({1})})}};
    case Group::kSoftmax:
      return {{"softmax", sample({{3, 2}}, {T(0), I(1)})},
              {"log_softmax", sample({{3, 3}}, {T(0), I(0)})},
              {"logsumexp", sample({{4, 3}}, {T(0), L({1})})},
              {"cross_entropy", sample({{5, 3}, {5}}, {T(0), T(1)}, {{"reduction", V(std::string("sum"))}},
                                       {DType::kFloat32, DType::kInt64})},
              {"log_softmax", sample({{2, 1}}, {T(0), I(1)})},
              {"cross_entropy", sample({{3, 1}, {3}}, {T(0), T(1)}, {{"reduction", V(std::string("none"))}},
                                       {DType::kFloat32, DType::kInt64})}};
    case Group::kOtherSteps:
      // The pooling backward ops' halo exchange, with one input row (and one output row).
      return {{"avg_pool2d_backward",
               sample({{2, 2, 1, 5}, {2, 2, 1, 5}},
                      {T(0), T(1), L({3}), L({1}), L({1}), V(false), V(true), V(none)})},
              {"max_pool2d_with_indices_backward",
               sample({{2, 2, 1, 5}, {2, 2, 1, 5}, {2, 2, 1, 5}},
                      {T(0), T(1), L({3}), L({1}), L({1}), L({1}), V(false), T(2)}, {},
                      {DType::kFloat32, DType::kFloat32, DType::kInt64})}};
  }
  return {};
}

std::vector<Case> cases_for(Group g) {
  std::vector<Case> out;
  for (const std::string& name : Registry::get().names()) {
    const OpDef& op = Registry::get().find(name);
    if (!in_group(op, g) || !op.kernel) continue;  // the planned family has no kernel
    WCHECK(op.samples, name, " has no samples");
    int i = 0;
    for (const Sample& s : op.samples()) out.push_back({&op, s, absl::StrCat("sample ", i++)});
  }
  int i = 0;
  for (auto& [name, s] : extra_samples(g)) out.push_back({&Registry::get().find(name), s, absl::StrCat("extra ", i++)});
  return out;
}

bool all_replicate(const Strategy& s) {
  for (const auto& p : s.inputs)
    for (const Placement& x : p)
      if (!x.is_replicate()) return false;
  for (const auto& p : s.outputs)
    for (const Placement& x : p)
      if (!x.is_replicate()) return false;
  return true;
}

// The strategies to check: every row with a step, the all-R row, and kPlainRowsPerCase other rows
// without a step, spread evenly over the expansion order (deterministic).
std::vector<Strategy> pick_strategies(const std::vector<Strategy>& all) {
  std::vector<Strategy> picked, plain;
  const Strategy* all_r = nullptr;
  for (const Strategy& s : all) {
    if (s.step() != 0) picked.push_back(s);
    else if (all_replicate(s)) all_r = &s;
    else plain.push_back(s);
  }
  if (all_r) picked.push_back(*all_r);
  if (!plain.empty()) {
    const size_t n = std::min<size_t>(plain.size(), kPlainRowsPerCase);
    for (size_t i = 0; i < n; ++i) picked.push_back(plain[i * plain.size() / n]);
  }
  return picked;
}

// True when some rank's block of some input of `s` is empty along a dim that is not empty globally.
bool has_empty_shard(const OpCall& call, const Strategy& s) {
  const Shape& mesh = call.mesh_shape();
  for (int t = 0; t < call.num_tensors(); ++t) {
    const Shape& g = call.tensor(t).shape;
    for (int64_t flat = 0; flat < numel(mesh); ++flat) {
      std::vector<int64_t> coord(mesh.size());
      int64_t rem = flat;
      for (int i = static_cast<int>(mesh.size()) - 1; i >= 0; --i) {
        coord[i] = rem % mesh[i];
        rem /= mesh[i];
      }
      Shape b = local_block(g, s.inputs[t], mesh, coord).first;
      for (size_t d = 0; d < g.size(); ++d)
        if (g[d] > 0 && b[d] == 0) return true;
    }
  }
  return false;
}

double tolerance(DType t) {
  switch (t) {
    case DType::kFloat64: return 1e-9;
    case DType::kFloat32: return 1e-4;
    case DType::kBFloat16:
    case DType::kFloat16: return 1e-2;
    default: return 0;
  }
}

std::string coord_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> c(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    c[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return absl::StrCat("[", absl::StrJoin(c, ", "), "]");
}

// Empty when `got` equals `want`: same shape and dtype; integers and bools exactly; floats with
// |got - want| <= tol * (|want| + 1), NaN only against NaN, infinities exactly.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return absl::StrCat("got ", got.str(), ", want ", want.str());
  const double tol = tolerance(want.dtype());
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  if (tol == 0) {
    auto gi = got.to_vector<int64_t>(), wi = want.to_vector<int64_t>();
    for (size_t k = 0; k < gi.size(); ++k)
      if (gi[k] != wi[k])
        return absl::StrCat("element ", coord_str(static_cast<int64_t>(k), want.sizes()), ": got ", gi[k],
                            ", want ", wi[k]);
    return "";
  }
  for (size_t k = 0; k < g.size(); ++k) {
    bool ok;
    if (std::isnan(g[k]) || std::isnan(w[k])) ok = std::isnan(g[k]) && std::isnan(w[k]);
    else if (std::isinf(g[k]) || std::isinf(w[k])) ok = g[k] == w[k];
    else ok = std::abs(g[k] - w[k]) <= tol * (std::abs(w[k]) + 1.0);
    if (!ok)
      return absl::StrCat("element ", coord_str(static_cast<int64_t>(k), want.sizes()), ": got ", g[k], ", want ",
                          w[k], " (", dtype_name(want.dtype()), ", max abs diff ", max_abs_diff(got, want), ")");
  }
  return "";
}

struct Tally {
  int cases = 0, checked = 0, with_step = 0, step_empty_shard = 0, wrong = 0;
  std::vector<std::string> mismatches;
};

// Runs every picked strategy of one case on this rank (collective) and compares the outputs.
void run_case(const Case& c, const MeshPtr& mesh, uint64_t seed, Tally& tally) {
  const OpCall call = bind_on(*c.op, c.sample, mesh->shape());
  const std::vector<TensorMeta> meta = call.op().meta(call);
  const std::vector<Strategy> picked = pick_strategies(expand_strategies(call, meta, /*check_shardable=*/false));
  const std::vector<Tensor> globals = make_globals(call, seed);
  const std::vector<Tensor> want = run_single_device(call, globals);
  // Where the all-R row takes its inputs from: the first step row's layout (so the inputs are
  // redistributed inside execute_strategy), else all-R.
  const Strategy* first_step = nullptr;
  for (const Strategy& s : picked)
    if (s.step() != 0) {
      first_step = &s;
      break;
    }
  ++tally.cases;
  for (const Strategy& s : picked) {
    const bool is_all_r = s.step() == 0 && all_replicate(s);
    const std::vector<Placements>& layout = is_all_r && first_step ? first_step->inputs : s.inputs;
    std::vector<DTensor> inputs;
    for (int t = 0; t < call.num_tensors(); ++t) {
      DTensorSpec spec(mesh, layout[t], call.tensor(t).shape, call.tensor(t).dtype);
      inputs.emplace_back(spec, adversarial_local_block(globals[t], spec.placements, mesh->shape(),
                                                        mesh->coordinate(), seed + t));
    }
    std::string where = absl::StrCat(c.op->name(), " ", c.label, " on mesh [", absl::StrJoin(mesh->shape(), ", "),
                                     "]: ", call.str(), " strategy ", s.str());
    if (s.step() != 0) absl::StrAppend(&where, " (step ", c.op->steps.at(s.step() - 1).name, ")");
    if (&layout != &s.inputs) {
      absl::StrAppend(&where, " from inputs ",
                      absl::StrJoin(layout, ", ", [](std::string* o, const Placements& p) {
                        o->append(placements_str(p));
                      }));
    }
    std::vector<DTensor> outs;
    try {
      outs = execute_strategy(call, s, meta, inputs, kTimeout);
    } catch (const std::exception& e) {
      throw std::runtime_error(absl::StrCat(where, ": threw: ", e.what()));
    }
    WCHECK(outs.size() == want.size(), where, ": ", outs.size(), " outputs, want ", want.size());
    std::string err;
    for (size_t o = 0; o < outs.size(); ++o) {
      Tensor full;
      try {
        full = outs[o].full_tensor(kTimeout);
      } catch (const std::exception& e) {
        throw std::runtime_error(absl::StrCat(where, ": full_tensor of output ", o, " threw: ", e.what()));
      }
      std::string e = compare(full, want[o]);
      if (err.empty() && !e.empty()) err = absl::StrCat("output ", o, " ", e);
    }
    ++tally.checked;
    if (s.step() != 0) {
      ++tally.with_step;
      if (has_empty_shard(call, s)) ++tally.step_empty_shard;
    }
    if (!err.empty()) {
      ++tally.wrong;
      tally.mismatches.push_back(absl::StrCat(where, ": ", err));
    }
  }
}

// scenario: "<mesh>/<group>", mesh "4" or "2x2".
int worker_main(const std::string& scenario) {
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1");
  try {
    std::vector<std::string> parts = absl::StrSplit(scenario, '/');
    WCHECK(parts.size() == 2, "bad scenario ", scenario);
    Shape mesh_shape;
    if (parts[0] == "4") mesh_shape = {4};
    else if (parts[0] == "2x2") mesh_shape = {2, 2};
    WCHECK(!mesh_shape.empty(), "unknown mesh ", parts[0]);
    auto g = std::find_if(kGroups.begin(), kGroups.end(), [&](const auto& x) { return x.first == parts[1]; });
    WCHECK(g != kGroups.end(), "unknown group ", parts[1]);
    init_ops();
    auto backend = init_backend_from_env(kTimeout);
    WCHECK(backend->rank() == rank && backend->world_size() == kWorld && backend->kind() == "gloo");
    MeshPtr mesh = DeviceMesh::create(backend, mesh_shape, {}, {}, kTimeout);
    const auto start = Clock::now();
    Tally tally;
    const std::vector<Case> cases = cases_for(g->second);
    for (size_t i = 0; i < cases.size(); ++i) run_case(cases[i], mesh, kSeed + 7919 * i, tally);
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    const std::string summary =
        absl::StrCat("cases=", tally.cases, " checked=", tally.checked, " with_step=", tally.with_step,
                     " step_empty_shard=", tally.step_empty_shard, " wrong=", tally.wrong, " ms=", took);
    if (rank == 0) {
      std::fprintf(stderr, "scenario %s: %s\n", scenario.c_str(), summary.c_str());
      if (const char* dir = std::getenv(kReportVar)) std::ofstream(absl::StrCat(dir, "/summary.txt")) << summary << "\n";
    }
    if (tally.wrong > 0) {
      // Every rank finds the same mismatches; rank 0 lists them (the first 30).
      if (rank == 0)
        for (size_t i = 0; i < std::min<size_t>(tally.mismatches.size(), 30); ++i)
          std::fprintf(stderr, "WRONG: %s\n", tally.mismatches[i].c_str());
      WCHECK(false, tally.wrong, " of ", tally.checked, " strategies wrong; first: ", tally.mismatches[0]);
    }
    // Nobody tears down connections while another rank still uses them.
    mesh->group(0).barrier(kTimeout);
    return 0;
  } catch (const std::exception& e) {
    rank_worker::report_failure(kReportVar, rank, scenario, e.what());
    return 1;
  }
}

// ------------------------------------------------------------------------------------------------
// Driver side.

using rank_worker::exits_str;
using rank_worker::read_file;
using rank_worker::report_dir;
using rank_worker::reports_str;
using rank_worker::tmp_root;

// A summary field ("with_step=12") as a number; -1 when absent.
int64_t field(const std::string& summary, const std::string& name) {
  for (absl::string_view kv : absl::StrSplit(summary, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == name) return std::atoll(p.second.c_str());
  }
  return -1;
}

// Runs a scenario on 4 ranks; every rank must exit 0. Returns rank 0's summary line.
std::string expect_all_pass(const std::string& scenario) {
  const std::string reports = report_dir("dist_ops_gloo_");
  tools::LaunchOptions o;
  o.nprocs = kWorld;
  o.command = {rank_worker::self_exe()};
  o.env = {{kScenarioVar, scenario}, {kReportVar, reports}};
  o.timeout = milliseconds(120000);  // never hang the test
  o.failure_grace = milliseconds(1000);
  o.kill_grace = milliseconds(2000);
  o.tmp_root = tmp_root();
  const auto start = Clock::now();
  tools::LaunchResult r = tools::run_ranks(o);
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  std::fprintf(stderr, "scenario %s: %lld ms\n", scenario.c_str(), static_cast<long long>(took));
  EXPECT_EQ(r.status, 0) << exits_str(r) << reports_str(reports, kWorld);
  EXPECT_FALSE(r.timed_out);
  for (const auto& x : r.ranks) EXPECT_TRUE(x.ok()) << "rank " << x.rank << ": " << exits_str(r);
  return read_file(reports + "/summary.txt");
}

class DistributedOpsGloo : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(DistributedOpsGloo, StepRowsMatchTheSingleDeviceOp) {
  const auto& [mesh, group] = GetParam();
  const std::string summary = expect_all_pass(mesh + "/" + group);
  if (HasFailure()) return;
  ASSERT_FALSE(summary.empty()) << "rank 0 wrote no summary";
  EXPECT_GT(field(summary, "cases"), 0) << summary;
  EXPECT_GT(field(summary, "with_step"), 0) << "no strategy with a distributed step ran: " << summary;
  EXPECT_EQ(field(summary, "wrong"), 0) << summary;
  // Every family's distributed step also ran with a rank holding an empty shard.
  EXPECT_GT(field(summary, "step_empty_shard"), 0) << summary;
}

std::vector<std::pair<std::string, std::string>> all_scenarios() {
  std::vector<std::pair<std::string, std::string>> v;
  for (const char* m : {"4", "2x2"})
    for (const auto& g : kGroups) v.push_back({m, g.first});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Meshes, DistributedOpsGloo, ::testing::ValuesIn(all_scenarios()),
                         [](const auto& info) {
                           return absl::StrCat("mesh", info.param.first, "_", info.param.second);
                         });

// The cases cover every family named in the file comment, and the extra cases bind.
TEST(DistributedOpsGlooCases, EveryGroupHasCasesThatBind) {
  init_ops();
  for (const auto& [name, g] : kGroups) {
    auto cases = cases_for(g);
    EXPECT_FALSE(cases.empty()) << name;
    for (const Case& c : cases) {
      for (const Shape& mesh : {Shape{4}, Shape{2, 2}}) {
        OpCall call = bind_on(*c.op, c.sample, mesh);
        EXPECT_NO_THROW(call.op().meta(call)) << c.op->name() << " " << c.label;
      }
    }
  }
  // The softmax group is exactly the four ops with the softmax statistics / loss-parallel steps.
  std::vector<std::string> names;
  for (const Case& c : cases_for(Group::kSoftmax))
    if (names.empty() || names.back() != c.op->name()) names.push_back(c.op->name());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"cross_entropy", "log_softmax", "logsumexp", "softmax"}));
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv(dtensor::kScenarioVar)) {
    return dtensor::worker_main(scenario);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
