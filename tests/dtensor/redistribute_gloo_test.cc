// Redistribution on the Gloo backend, with real processes: the property test of DESIGN §3 (the
// random cases of redistribute_cases.h) on 4 ranks, plus a peer that dies mid-redistribute.
//
// One binary, two roles, as tests/collectives/gloo_test.cc. Without DTENSOR_REDIST_GLOO_SCENARIO in
// the environment it is the GoogleTest driver: each TEST starts 4 ranks of this same binary through
// the launcher library, naming a scenario, and checks how every rank exited. With it, it is a
// worker: it initialises the Gloo backend from the environment the launcher set, runs the scenario
// and exits 0 (pass) or 1 (fail). A failing worker prints the reason on stderr and also writes it
// to <DTENSOR_REDIST_GLOO_REPORT>/rank<r>.txt, which the driver puts in the test failure.
//
// Every rank draws the same cases: the generator is seeded with a constant, and the cases are drawn
// in the same order on every rank before any of them runs.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/dtensor.h"
#include "gtest/gtest.h"
#include "tests/testing/rank_reports.h"
#include "tests/testing/rank_worker.h"
#include "tests/dtensor/redistribute_cases.h"
#include "tools/launcher.h"

namespace dtensor {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::RedistCase;

constexpr char kScenarioVar[] = "DTENSOR_REDIST_GLOO_SCENARIO";
constexpr char kReportVar[] = "DTENSOR_REDIST_GLOO_REPORT";
constexpr int kWorld = 4;
constexpr int kCasesPerMesh = 60;
constexpr uint64_t kSeed = 20261122;
// Generous for the working scenarios (a loaded 2-core machine), short for the failure one.
constexpr Timeout kOkTimeout = milliseconds(30000);
constexpr Timeout kFailTimeout = milliseconds(2000);
// The rank that dies in the failure scenario.
constexpr int kCulprit = 3;

// ------------------------------------------------------------------------------------------------
// Worker side.

// The cases of one mesh; the same on every rank (the seed depends only on the mesh's index).
std::vector<RedistCase> cases_for(const Shape& mesh, int mesh_index) {
  std::mt19937_64 rng(kSeed + static_cast<uint64_t>(mesh_index));
  std::vector<RedistCase> out;
  for (int i = 0; i < kCasesPerMesh; ++i) out.push_back(testing::random_case(rng, mesh));
  return out;
}

// Runs every case of `mesh` on this rank; throws describing the first mismatch. Every case runs the
// same collectives whatever its outcome, so a mismatch on one rank never desynchronises the others.
void run_cases(MeshPtr mesh, int mesh_index) {
  WCHECK(mesh->contains_me());
  const std::vector<RedistCase> cases = cases_for(mesh->shape(), mesh_index);
  std::string first;
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string err = testing::run_case(cases[i], mesh);
    if (!err.empty()) {
      ++failed;
      if (first.empty()) first = absl::StrCat("case ", i, ": ", err);
    }
  }
  WCHECK(failed == 0, failed, " of ", cases.size(), " cases on ", mesh->str(),
         " failed; first: ", first);
}

void scenario_mesh_4(std::shared_ptr<Backend> b) {
  run_cases(DeviceMesh::create(b, {4}, {}, {}, kOkTimeout), 0);
}

void scenario_mesh_2x2(std::shared_ptr<Backend> b) {
  run_cases(DeviceMesh::create(b, {2, 2}, {}, {}, kOkTimeout), 1);
}

// Meshes over a subset of the world, laid over the ranks out of order: [1] on rank 2, [2] on ranks
// 3 and 1, [3] on ranks 2, 0, 1. Every rank creates every mesh (in the same order, so that the
// groups' names match); only members run the cases.
void scenario_submeshes(std::shared_ptr<Backend> b) {
  const std::vector<std::pair<Shape, std::vector<int>>> layouts = {
      {{1}, {2}}, {{2}, {3, 1}}, {{3}, {2, 0, 1}}};
  for (size_t i = 0; i < layouts.size(); ++i) {
    auto mesh = DeviceMesh::create(b, layouts[i].first, {}, layouts[i].second, kOkTimeout);
    if (mesh->contains_me()) run_cases(mesh, static_cast<int>(2 + i));
  }
}

// Rank 3 dies between two redistributions: the others' next redistribute (an all_gather) fails
// within the short timeout with a CommError naming rank 3.
void scenario_peer_dies(std::shared_ptr<Backend> b) {
  MeshPtr mesh = DeviceMesh::create(b, {4}, {}, {}, kOkTimeout);
  Tensor global = Tensor::arange(64 * 8).view({64, 8});
  DTensor x = distribute_tensor(global, mesh, {Shard(0)});
  // One redistribution that every rank completes.
  DTensor y = x.redistribute({Shard(1)}, kOkTimeout);
  WCHECK(equal(y.full_tensor(kOkTimeout), global));
  mesh->group(0).barrier(kOkTimeout);
  if (b->rank() == kCulprit) {
    std::fflush(nullptr);
    _exit(1);
  }
  const auto start = Clock::now();
  try {
    x.redistribute({Replicate()}, kFailTimeout);
  } catch (const CommError& e) {
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    const std::string msg = e.what();
    std::fprintf(stderr, "rank %d got the expected CommError after %lld ms: %s\n", b->rank(),
                 static_cast<long long>(took), msg.c_str());
    for (const char* needle : {"all_gather", "peer rank 3 (pid ", "is no longer running"}) {
      WCHECK(msg.find(needle) != std::string::npos, "message lacks '", needle, "': ", msg);
    }
    WCHECK(took < kFailTimeout.count() + 3000, "took ", took, " ms");
    return;
  }
  WCHECK(false, "no CommError after rank 3 died");
}

int worker_main(const std::string& scenario) {
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1");
  try {
    const std::map<std::string, std::function<void(std::shared_ptr<Backend>)>> scenarios = {
        {"mesh_4", scenario_mesh_4},
        {"mesh_2x2", scenario_mesh_2x2},
        {"submeshes", scenario_submeshes},
        {"peer_dies", scenario_peer_dies},
    };
    auto it = scenarios.find(scenario);
    WCHECK(it != scenarios.end(), "unknown scenario ", scenario);
    auto backend = init_backend_from_env(kOkTimeout);
    WCHECK(backend->rank() == rank && backend->world_size() == kWorld && backend->kind() == "gloo");
    it->second(backend);
    return 0;
  } catch (const std::exception& e) {
    rank_worker::report_failure(kReportVar, rank, scenario, e.what());
    return 1;
  }
}

// ------------------------------------------------------------------------------------------------
// Driver side.

using rank_worker::exits_str;
using rank_worker::report_dir;
using rank_worker::reports_str;
using rank_worker::tmp_root;

tools::LaunchOptions options_for(const std::string& scenario, const std::string& reports) {
  tools::LaunchOptions o;
  o.nprocs = kWorld;
  o.command = {rank_worker::self_exe()};
  o.env = {{kScenarioVar, scenario}, {kReportVar, reports}};
  o.timeout = milliseconds(120000);  // never hang the test
  o.kill_grace = milliseconds(2000);
  o.tmp_root = tmp_root();
  return o;
}

void expect_all_pass(const std::string& scenario) {
  const std::string reports = report_dir(absl::StrCat("redist_gloo_", scenario, "_"));
  auto start = Clock::now();
  tools::LaunchResult r = tools::run_ranks(options_for(scenario, reports));
  auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  std::fprintf(stderr, "scenario %s: %lld ms\n", scenario.c_str(), static_cast<long long>(took));
  EXPECT_EQ(r.status, 0) << exits_str(r) << reports_str(reports, kWorld);
  EXPECT_FALSE(r.timed_out);
  for (const auto& x : r.ranks) EXPECT_TRUE(x.ok()) << "rank " << x.rank << ": " << exits_str(r);
}

TEST(RedistributeGloo, PropertyRandomCasesOnMesh4) { expect_all_pass("mesh_4"); }
TEST(RedistributeGloo, PropertyRandomCasesOnMesh2x2) { expect_all_pass("mesh_2x2"); }
TEST(RedistributeGloo, PropertyRandomCasesOnSubMeshes) { expect_all_pass("submeshes"); }

// The cases are the same on every rank and in every run.
TEST(RedistributeGloo, CasesAreDeterministic) {
  auto a = cases_for({2, 2}, 1), b = cases_for({2, 2}, 1);
  ASSERT_EQ(a.size(), static_cast<size_t>(kCasesPerMesh));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].str(), b[i].str());
}

TEST(RedistributeGlooFailure, PeerDiesMidRedistribute) {
  const std::string reports = report_dir("redist_gloo_peer_dies_");
  tools::LaunchOptions o = options_for("peer_dies", reports);
  o.failure_grace = milliseconds(30000);  // let the survivors report on their own
  auto start = Clock::now();
  tools::LaunchResult r = tools::run_ranks(o);
  auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  EXPECT_EQ(r.first_failed, kCulprit) << exits_str(r) << reports_str(reports, kWorld);
  EXPECT_EQ(r.status, 1) << exits_str(r);
  EXPECT_EQ(r.ranks[kCulprit].exit_code, 1);
  for (int i = 0; i < kWorld; ++i) {
    if (i != kCulprit) {
      EXPECT_TRUE(r.ranks[i].ok()) << exits_str(r) << reports_str(reports, kWorld);
      EXPECT_FALSE(r.ranks[i].terminated);
    }
  }
  EXPECT_LT(took, 20000);
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
