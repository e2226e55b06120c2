// Sharding propagation cost per op (ns), cached and uncached, and the whole DTensor op overhead
// outside kernel and collectives (µs) for a small op.
#include <fstream>
#include <thread>

#include "benchmark/benchmark.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "kernels/cpu/kernels.h"

namespace dtensor {
namespace {

OpCall mm_2d() {
  init_ops();
  return OpCall::bind(Registry::get().find("mm"), {TensorRef{0}, TensorRef{1}}, {},
                      {{{1024, 512}, DType::kFloat32}, {{512, 2048}, DType::kFloat32}},
                      {{Shard(0), Replicate()}, {Replicate(), Shard(1)}}, {2, 4});
}

OpCall broadcast_add() {
  init_ops();
  return OpCall::bind(Registry::get().find("add"), {TensorRef{0}, TensorRef{1}}, {},
                      {{{64, 128, 256}, DType::kFloat32}, {{256}, DType::kFloat32}},
                      {{Shard(1)}, {Replicate()}}, {8});
}

void BM_Propagate_Cached_mm_2dmesh(benchmark::State& state) {
  OpCall c = mm_2d();
  propagate(c);
  for (auto _ : state) benchmark::DoNotOptimize(propagate(c));
}
void BM_Propagate_Uncached_mm_2dmesh(benchmark::State& state) {
  OpCall c = mm_2d();
  for (auto _ : state) benchmark::DoNotOptimize(propagate_uncached(c));
}
void BM_Propagate_Cached_add_broadcast(benchmark::State& state) {
  OpCall c = broadcast_add();
  propagate(c);
  for (auto _ : state) benchmark::DoNotOptimize(propagate(c));
}
void BM_Propagate_Uncached_add_broadcast(benchmark::State& state) {
  OpCall c = broadcast_add();
  for (auto _ : state) benchmark::DoNotOptimize(propagate_uncached(c));
}

// A whole DTensor add of two [4] tensors on a 1-rank mesh (no collectives) ...
void BM_DTensorOp_add_small(benchmark::State& state) {
  init_ops();
  auto mesh = DeviceMesh::create(threads_backend(make_threads_world(1), 0), {1});
  DTensor a = distribute_tensor(Tensor::full({4}, 1.0), mesh, {Shard(0)});
  DTensor b = distribute_tensor(Tensor::full({4}, 2.0), mesh, {Shard(0)});
  for (auto _ : state) benchmark::DoNotOptimize(call_op1("add", {a, b}));
}
// ... and the same local kernel alone: the difference is the DTensor overhead.
void BM_LocalKernel_add_small(benchmark::State& state) {
  Tensor a = Tensor::full({4}, 1.0), b = Tensor::full({4}, 2.0);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::add(a, b));
}

// Distinct shapes through the cache: entries stay at the capacity.
void BM_PropagationCache_DistinctShapes(benchmark::State& state) {
  init_ops();
  set_propagation_cache_capacity(4096);
  int64_t n = 1;
  for (auto _ : state) {
    OpCall c = OpCall::bind(Registry::get().find("neg"), {TensorRef{0}}, {}, {{{n++ % 1000000 + 1}, DType::kFloat32}},
                            {{Shard(0)}}, {2});
    benchmark::DoNotOptimize(propagate(c));
  }
  state.counters["cache_entries"] = static_cast<double>(propagation_cache_size());
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) state.counters["rss_kB"] = std::stod(line.substr(6));
  set_propagation_cache_capacity(kDefaultPropagationCacheCapacity);
}

BENCHMARK(BM_Propagate_Cached_mm_2dmesh);
BENCHMARK(BM_Propagate_Uncached_mm_2dmesh);
BENCHMARK(BM_Propagate_Cached_add_broadcast);
BENCHMARK(BM_Propagate_Uncached_add_broadcast);
BENCHMARK(BM_DTensorOp_add_small)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LocalKernel_add_small)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PropagationCache_DistinctShapes)->Iterations(200000);

}  // namespace
}  // namespace dtensor

BENCHMARK_MAIN();
