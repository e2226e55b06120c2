// Fixed cost of one redistribution call on the threads backend (µs), for tiny tensors where the data
// movement is negligible: plan cache lookup + local steps + rendezvous of the collective.
#include <thread>

#include "benchmark/benchmark.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/dtensor.h"

namespace dtensor {
namespace {

// Runs `body(dtensor)` in the benchmark loop on rank 0 and the same number of times on the other
// ranks' threads, so every collective has all its members.
void run_bench(benchmark::State& state, int world, Placements src, Placements dst) {
  auto w = make_threads_world(world);
  const int64_t iters = state.max_iterations;
  std::vector<std::thread> others;
  auto make = [&](int r) {
    auto mesh = DeviceMesh::create(threads_backend(w, r), {world});
    return distribute_tensor(Tensor::arange(64).view({8, 8}), mesh, src);
  };
  for (int r = 1; r < world; ++r) {
    others.emplace_back([&, r] {
      DTensor d = make(r);
      for (int64_t i = 0; i < iters; ++i) benchmark::DoNotOptimize(d.redistribute(dst));
    });
  }
  DTensor d = make(0);
  for (auto _ : state) benchmark::DoNotOptimize(d.redistribute(dst));
  for (auto& t : others) t.join();
}

void BM_Redistribute_Local_R_to_S0_1rank(benchmark::State& s) {
  run_bench(s, 1, {Replicate()}, {Shard(0)});
}
void BM_Redistribute_Noop_S0_1rank(benchmark::State& s) { run_bench(s, 1, {Shard(0)}, {Shard(0)}); }
void BM_Redistribute_S0_to_R_2ranks(benchmark::State& s) {
  run_bench(s, 2, {Shard(0)}, {Replicate()});
}
void BM_Redistribute_P_to_R_2ranks(benchmark::State& s) { run_bench(s, 2, {Partial()}, {Replicate()}); }
void BM_Redistribute_S0_to_S1_2ranks(benchmark::State& s) {
  run_bench(s, 2, {Shard(0)}, {Shard(1)});
}

// The raw collective with no planning, for comparison with the redistribute calls above.
void BM_AllReduce_Direct_2ranks(benchmark::State& state) {
  auto w = make_threads_world(2);
  const int64_t iters = state.max_iterations;
  std::thread other([&] {
    auto pg = threads_backend(w, 1)->new_group({0, 1}, "b");
    Tensor t = Tensor::zeros({8, 8});
    for (int64_t i = 0; i < iters; ++i) pg->all_reduce(t, ReduceOp::kSum);
  });
  auto pg = threads_backend(w, 0)->new_group({0, 1}, "b");
  Tensor t = Tensor::zeros({8, 8});
  for (auto _ : state) pg->all_reduce(t, ReduceOp::kSum);
  other.join();
}

BENCHMARK(BM_Redistribute_Noop_S0_1rank)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Redistribute_Local_R_to_S0_1rank)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Redistribute_S0_to_R_2ranks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Redistribute_P_to_R_2ranks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Redistribute_S0_to_S1_2ranks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllReduce_Direct_2ranks)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dtensor

BENCHMARK_MAIN();
