// Plan time of the offline planner (`dtensor plan`): the cost model (strategies and
// factor tables) plus the search (Lagrangian memory steps, each a min-sum solve with repeated layers
// solved once), for Llama-3 70B (80 layers) on dp=8,tp=8 and on 3-d meshes, and others of the zoo.
// Model graph construction is timed separately. Baselines are not part of the plan time.
//   bazel run -c opt //bench:plan_bench
#include "benchmark/benchmark.h"
#include "planner/models/zoo.h"
#include "planner/search.h"

namespace dtensor::planner {
namespace {

void plan(benchmark::State& state, const std::string& model, const std::string& mesh_text) {
  MeshSpec mesh = MeshSpec::parse(mesh_text);
  ModelGraph g = models::build_model(model, {}, mesh);
  const HardwareProfile& hw = hardware_profile("h100-nvlink");
  PlanOptions o;
  o.compare = false;
  PlanResult last;
  for (auto _ : state) {
    Planner p(g, mesh, hw, o);
    last = p.run();
    benchmark::DoNotOptimize(last.eval.comm_bytes);  // (an integer: this library's DoNotOptimize garbles doubles)
  }
  state.counters["step_ms"] = last.eval.step_time_us / 1e3;
  state.counters["peak_GB"] = static_cast<double>(last.eval.peak_memory_bytes) / 1e9;
  state.counters["solves"] = last.solves;
  state.counters["vertices"] = g.num_vertices();
}

void build(benchmark::State& state, const std::string& model, const std::string& mesh_text) {
  MeshSpec mesh = MeshSpec::parse(mesh_text);
  for (auto _ : state) {
    ModelGraph g = models::build_model(model, {}, mesh);
    benchmark::DoNotOptimize(g.num_vertices());
  }
}

BENCHMARK_CAPTURE(plan, llama3_70b_dp8_tp8, "llama3-70b", "dp=8,tp=8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(plan, llama3_70b_dp2_fsdp4_tp8, "llama3-70b", "dp=2,fsdp=4,tp=8")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(plan, llama3_70b_dp8_cp2_tp4, "llama3-70b", "dp=8,cp=2,tp=4")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(plan, llama3_8b_dp8_tp8, "llama3-8b", "dp=8,tp=8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(plan, mixtral_8x7b_dp8_ep8, "mixtral-8x7b", "dp=8,ep=8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(plan, gpt2_xl_dp8_tp8, "gpt2-xl", "dp=8,tp=8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(plan, resnet50_dp8_tp8, "resnet50", "dp=8,tp=8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(build, llama3_70b, "llama3-70b", "dp=8,tp=8")->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dtensor::planner

BENCHMARK_MAIN();
