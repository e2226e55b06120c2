// The distributed algorithms of DESIGN §6 against replicate-then-compute on 4 Gloo processes, for
// global float32 tensors of 1 KB to 64 MB (the whole-tensor median: 1 KB to 256 MB) on a 1-d mesh of
// the 4 ranks.
//
//   bazel build //bench:distributed_ops_gloo_bench //tools:dtensor
//   bazel-bin/tools/dtensor launch -n 4 -- bazel-bin/bench/distributed_ops_gloo_bench [gbench flags]
//
// Tensors (size = the global tensor's bytes; every dim a multiple of 4, so shards are even):
//   cumsum, median.dim, max.dim   x = [n, n] with n * n * 4 = size, input placement [S(0)], dim 0
//                                 (the sharded dim is the one scanned / reduced); keepdim false.
//   median                        x = [n, n] as above, input placement [S(0)], the median of the
//                                 whole tensor (radix select: 4 all-reduces of 257 counts).
//   avg_pool2d, max_pool2d_with_indices
//                                 x = [2, 2, h, h] (N, C, H, W) with 16 * h * h = size, input
//                                 placement [S(2)] (sharded on H); kernel 3, stride 1, padding 1, so
//                                 every shard needs one row from each neighbour.
// Data: random_tensor (floats on a 1/64 grid in [-2, 2]), each rank its own block.
//
// What is compared. Both variants start from the same input DTensor (placement above) and end with
// the same output placements: those of the distributed row. Both run through execute_strategy with an
// explicit row of expand_strategies(call, op.meta(call), false), so the cost model plays no part:
//   distributed   the row whose step is the op's distributed algorithm (carry_exchange, select,
//                 candidate_gather, halo_exchange) and whose input is the given placement. Outputs:
//                 cumsum [S(0)], pools [S(2)] (values and indices), median / median.dim / max.dim
//                 [R].
//   replicate     the all-Replicate row: execute_strategy redistributes the input to [R] (an
//                 all_gather of the whole tensor, through a plan made once beforehand), every rank runs
//                 the local kernel on the whole tensor, and when the distributed row's outputs are
//                 sharded (cumsum, pools) each output is redistributed back to them
//                 (DTensor::redistribute R -> S: a local chunk, no communication). That is what
//                 PyTorch DTensor does for these ops (it replicates the active dim).
// Before timing, the replicate benchmark of sizes up to 4 MB also runs the distributed row once and
// checks that the two give the same local blocks (indices exactly, floats within rounding); a
// mismatch aborts the run (tests/ops/distributed_ops_gloo_test.cc checks the algorithms' results).
//
// Bytes: rank 0's mesh->stats().bytes_sent before and after the untimed warm-up call (the bytes of
// one call; counted with CommStats' ring formulas, see dtensor/collectives/process_group.h), and the
// number of collective calls. Rank 0 is an edge of the halo exchange (one neighbour), so for the
// pools it sends half what an inner rank sends.
//
// Lockstep, as bench/redistribute_gloo_bench.cc: every rank runs the same benchmarks in the same order
// with fixed iteration counts (->Iterations(n); do not pass --benchmark_enable_random_interleaving;
// DTENSOR_BENCH_ITERS_SCALE=0.2, the same on every rank, scales them for a quick run). Each benchmark
// first checks that all ranks are running the same one and runs the op once untimed. Each timed
// iteration is: Gloo barrier (untimed), the op (timed on each rank), then a Gloo allreduce(max) of
// the ranks' elapsed seconds (untimed) on a separate Gloo context ("bench/sync" on the job's store);
// the max is the iteration's manual time. The counter median_us and the final table give medians.
// Only rank 0 reports. At the end rank 0 prints a table (size, op, distributed and replicate µs,
// ratio, bytes and calls of each) and the crossover per op: the smallest size from which the
// distributed algorithm is faster at that size and every larger one.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/dtensor.h"
#include "dtensor/partial_split.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace dtensor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr Timeout kTimeout = std::chrono::seconds(120);
constexpr int kWorld = 4;
// Sizes up to this have both variants' outputs compared before timing (above, one more distributed
// call would add seconds).
constexpr int64_t kCheckUpTo = 4 << 20;

enum class Alg { kCumsum, kMedian, kMax, kAvgPool, kMaxPool, kMedianWhole };
constexpr Alg kAlgs[] = {Alg::kCumsum, Alg::kMedian, Alg::kMax, Alg::kAvgPool, Alg::kMaxPool, Alg::kMedianWhole};

struct AlgInfo {
  const char* op;    // registry name
  const char* id;    // benchmark name part
  const char* step;  // the distributed row's step
};
AlgInfo info(Alg a) {
  switch (a) {
    case Alg::kCumsum: return {"cumsum", "cumsum", "carry_exchange"};
    case Alg::kMedian: return {"median.dim", "median_dim", "select"};
    case Alg::kMax: return {"max.dim", "max_dim", "candidate_gather"};
    case Alg::kAvgPool: return {"avg_pool2d", "avg_pool2d", "halo_exchange"};
    case Alg::kMaxPool: return {"max_pool2d_with_indices", "max_pool2d", "halo_exchange"};
    case Alg::kMedianWhole: return {"median", "median", "select"};
  }
  return {"?", "?", "?"};
}
bool is_pool(Alg a) { return a == Alg::kAvgPool || a == Alg::kMaxPool; }

// Global sizes in bytes and the timed iterations of each (both variants), chosen to keep the whole run
// within a few minutes on a 2-core machine: at 64 MB one iteration of the replicated pools takes
// seconds. The selections run fewer. The whole-tensor median has its own sizes, up to 256 MB (a 1 GB
// replicated copy a rank at the top).
struct SizeSpec {
  int64_t bytes;
  int iterations;
  int median_iterations;
};
constexpr SizeSpec kSizes[] = {
    {1 << 10, 50, 15}, {16 << 10, 50, 15}, {256 << 10, 20, 10}, {1 << 20, 10, 5},
    {4 << 20, 5, 3},   {16 << 20, 3, 2},   {64 << 20, 2, 2},
};
constexpr SizeSpec kWholeMedianSizes[] = {
    {1 << 10, 15, 15}, {64 << 10, 15, 15}, {1 << 20, 5, 5}, {16 << 20, 3, 3}, {64 << 20, 2, 2}, {256 << 20, 2, 2},
};
std::vector<SizeSpec> sizes_of(Alg a) {
  if (a == Alg::kMedianWhole) return {std::begin(kWholeMedianSizes), std::end(kWholeMedianSizes)};
  return {std::begin(kSizes), std::end(kSizes)};
}

std::string size_str(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MB") : absl::StrCat(bytes >> 10, " KB");
}
std::string size_id(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, "MB") : absl::StrCat(bytes >> 10, "KB");
}

// ------------------------------------------------------------------------------------------------
// The job: the DTensor side (backend + mesh) and the timing synchronisation (its own Gloo context).

struct Job {
  int rank = 0;
  std::shared_ptr<Backend> backend;
  MeshPtr mesh;
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::unique_ptr<gloo::rendezvous::PrefixStore> sync_prefix;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> sync;  // barriers and timing reductions
  uint32_t tag = 0;
  double iters_scale = 1.0;
};
Job* job = nullptr;

void sync_barrier() {
  gloo::BarrierOptions opts(job->sync);
  opts.setTag(job->tag++);
  opts.setTimeout(kTimeout);
  gloo::barrier(opts);
}

// Elementwise max over the ranks of `v`, in place.
void sync_max(std::vector<double>& v) {
  gloo::AllreduceOptions opts(job->sync);
  opts.setOutput(v.data(), v.size());
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  opts.setTag(job->tag++);
  opts.setTimeout(kTimeout);
  gloo::allreduce(opts);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "distributed_ops_gloo_bench (rank %d): %s\n", job ? job->rank : -1, what.c_str());
  std::fflush(nullptr);
  _exit(2);
}

// Aborts unless every rank is running the benchmark named `name` (lockstep check).
void check_lockstep(const std::string& name) {
  const double h = static_cast<double>(std::hash<std::string>{}(name) & 0xffffffffu);
  std::vector<double> v = {h, -h};
  sync_max(v);
  if (v[0] != h || v[1] != -h)
    die("ranks are not running the same benchmark (here: " + name +
        "); run every rank with the same flags and without random interleaving");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Result {
  double median_s = 0;
  int64_t bytes = 0;  // rank 0, one call
  int64_t calls = 0;
};
// By (bytes, alg, replicate?), on rank 0 for the final table.
std::map<std::tuple<int64_t, int, bool>, Result> results;

// ------------------------------------------------------------------------------------------------
// One (op, size) setup: the bound call, its two rows, the input.

struct Setup {
  OpCall call;
  std::vector<TensorMeta> meta;
  Strategy dist, repl;
  std::vector<std::shared_ptr<const RedistributePlan>> repl_plans;
  DTensor x;
};

Shape global_shape(Alg a, int64_t bytes) {
  if (is_pool(a)) {
    const int64_t h = std::llround(std::sqrt(bytes / 16.0));
    if (16 * h * h != bytes || h % kWorld) die("size is not 16 * h * h bytes with h a multiple of 4");
    return {2, 2, h, h};
  }
  const int64_t n = std::llround(std::sqrt(bytes / 4.0));
  if (4 * n * n != bytes || n % kWorld) die("size is not 4 * n * n bytes with n a multiple of 4");
  return {n, n};
}

bool all_replicate(const Strategy& s) {
  for (const auto& v : {s.inputs, s.outputs})
    for (const auto& p : v)
      for (const Placement& x : p)
        if (!x.is_replicate()) return false;
  return true;
}

Setup make_setup(Alg a, int64_t bytes) {
  const AlgInfo ai = info(a);
  const OpDef& op = Registry::get().find(ai.op);
  const Shape shape = global_shape(a, bytes);
  const int32_t sharded = is_pool(a) ? 2 : 0;
  const Placements in_pl = {Shard(sharded)};
  std::vector<ArgValue> pos = {TensorRef{0}};
  if (is_pool(a)) {
    for (int64_t v : {3, 1, 1}) pos.push_back(IValue(std::vector<int64_t>{v}));  // kernel, stride, padding
  } else if (a != Alg::kMedianWhole) {
    pos.push_back(IValue(int64_t{0}));  // dim
  }
  Setup s{OpCall::bind(op, pos, {}, {TensorMeta{shape, DType::kFloat32}}, {in_pl}, job->mesh->shape()),
          {}, {}, {}, {}, {}};
  s.meta = op.meta(s.call);
  bool have_dist = false, have_repl = false;
  for (const Strategy& st : expand_strategies(s.call, s.meta, /*check_shardable=*/false)) {
    if (st.step() != 0 && st.inputs[0] == in_pl && op.steps.at(st.step() - 1).name == ai.step && !have_dist) {
      s.dist = st;
      have_dist = true;
    } else if (st.step() == 0 && all_replicate(st) && !have_repl) {
      s.repl = st;
      have_repl = true;
    }
  }
  if (!have_dist || !have_repl) die(absl::StrCat(s.call.str(), ": no distributed or no all-R row"));
  auto [local_shape, offset] = local_block(shape, in_pl, job->mesh->shape(), job->mesh->coordinate());
  Tensor local = random_tensor(local_shape, DType::kFloat32, 1000003 * static_cast<uint64_t>(job->rank + 1) + bytes);
  s.x = from_local(local, job->mesh, in_pl);
  s.repl_plans = {plan_redistribute(s.x.spec(), s.repl.inputs[0])};
  return s;
}

std::vector<DTensor> run_dist(const Setup& s) { return execute_strategy(s.call, s.dist, s.meta, {s.x}, kTimeout); }

std::vector<DTensor> run_repl(const Setup& s) {
  std::vector<DTensor> outs = execute_strategy(s.call, s.repl, s.meta, {s.x}, kTimeout, &s.repl_plans);
  for (size_t o = 0; o < outs.size(); ++o)
    if (outs[o].placements() != s.dist.outputs[o]) outs[o] = outs[o].redistribute(s.dist.outputs[o], kTimeout);
  return outs;
}

// Both variants' local blocks agree: same placements, indices exactly, floats within rounding (the
// carry of a scan adds in another order).
void check_same(const Setup& s, const std::vector<DTensor>& d, const std::vector<DTensor>& r) {
  for (size_t o = 0; o < d.size(); ++o) {
    const Tensor& a = d[o].local_tensor();
    const Tensor& b = r[o].local_tensor();
    std::string err;
    if (d[o].placements() != r[o].placements()) err = "placements differ";
    else if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) err = a.str() + " vs " + b.str();
    else if (!is_floating(a.dtype())) {
      if (!equal(a, b)) err = "indices differ";
    } else if (a.numel() > 0) {
      const double diff = max_abs_diff(a, b);
      const double scale = max_abs_diff(b, Tensor::zeros(b.sizes(), b.dtype()));
      if (!(diff <= 1e-4 * (scale + 1.0))) err = absl::StrCat("max abs diff ", diff, " (max |value| ", scale, ")");
    }
    if (!err.empty()) die(absl::StrCat(s.call.str(), ": distributed and replicate outputs differ, output ", o, ": ", err));
  }
}

void bench(benchmark::State& state, const std::string& name, Alg a, int64_t bytes, bool replicate) {
  check_lockstep(name);
  const Setup s = make_setup(a, bytes);
  std::function<void()> body = replicate ? std::function<void()>([&] { benchmark::DoNotOptimize(run_repl(s)); })
                                         : std::function<void()>([&] { benchmark::DoNotOptimize(run_dist(s)); });
  // Warm-up, untimed, with the bytes of one call.
  const CommStats before = job->mesh->stats();
  std::vector<DTensor> warm = replicate ? run_repl(s) : run_dist(s);
  const CommStats after = job->mesh->stats();
  if (replicate && bytes <= kCheckUpTo) check_same(s, run_dist(s), warm);
  warm.clear();
  std::vector<double> times;
  for (auto _ : state) {
    sync_barrier();
    const auto start = Clock::now();
    body();
    std::vector<double> t = {std::chrono::duration<double>(Clock::now() - start).count()};
    sync_max(t);
    state.SetIterationTime(t[0]);
    times.push_back(t[0]);
  }
  Result r{median(times), after.bytes_sent - before.bytes_sent, after.calls - before.calls};
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["median_us"] = r.median_s * 1e6;
  state.counters["bytes_rank0"] = static_cast<double>(r.bytes);
  state.counters["calls"] = static_cast<double>(r.calls);
  results[{bytes, static_cast<int>(a), replicate}] = r;
}

void register_all() {
  for (Alg a : kAlgs) {
    for (const SizeSpec& sz : sizes_of(a)) {
      const int base = a == Alg::kMedian || a == Alg::kMedianWhole ? sz.median_iterations : sz.iterations;
      const int iters = std::max(2, static_cast<int>(std::lround(base * job->iters_scale)));
      for (bool replicate : {false, true}) {
        std::string name = absl::StrCat(info(a).id, "/", size_id(sz.bytes), replicate ? "/replicate" : "/distributed");
        benchmark::RegisterBenchmark(name.c_str(), bench, name, a, sz.bytes, replicate)
            ->Iterations(iters)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

std::string thousands(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

void print_table() {
  std::printf("\nMedian per iteration (slowest rank); bytes and collective calls sent by rank 0 in one call:\n");
  std::printf("%-6s %-42s %15s %15s %7s %14s %14s %6s %6s\n", "size", "op (algorithm)", "distributed us",
              "replicate us", "ratio", "dist bytes", "repl bytes", "dcalls", "rcalls");
  std::map<int, std::string> crossover, bytes_crossover;
  for (Alg a : kAlgs) {
    std::string cross = "none", bcross = "none";
    bool all_time = true, all_bytes = true;  // distributed better at every size from here up
    const std::vector<SizeSpec> sizes = sizes_of(a);
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
      auto d = results.find({it->bytes, static_cast<int>(a), false});
      auto r = results.find({it->bytes, static_cast<int>(a), true});
      if (d == results.end() || r == results.end()) {
        all_time = all_bytes = false;
        continue;
      }
      all_time &= d->second.median_s < r->second.median_s;
      all_bytes &= d->second.bytes < r->second.bytes;
      if (all_time) cross = size_str(it->bytes);
      if (all_bytes) bcross = size_str(it->bytes);
    }
    crossover[static_cast<int>(a)] = cross;
    bytes_crossover[static_cast<int>(a)] = bcross;
    for (const SizeSpec& sz : sizes) {
      auto d = results.find({sz.bytes, static_cast<int>(a), false});
      auto r = results.find({sz.bytes, static_cast<int>(a), true});
      if (d == results.end() || r == results.end()) continue;
      const std::string label = absl::StrCat(info(a).op, " (", info(a).step, ")");
      std::printf("%-6s %-42s %15.1f %15.1f %7.2f %14s %14s %6lld %6lld\n", size_str(sz.bytes).c_str(),
                  label.c_str(), d->second.median_s * 1e6,
                  r->second.median_s * 1e6, d->second.median_s / r->second.median_s,
                  thousands(d->second.bytes).c_str(), thousands(r->second.bytes).c_str(),
                  static_cast<long long>(d->second.calls), static_cast<long long>(r->second.calls));
    }
  }
  std::printf("\nCrossover (smallest size from which the distributed algorithm wins at every larger size too):\n");
  std::printf("%-24s %-16s %-16s\n", "op", "time", "bytes");
  for (Alg a : kAlgs) {
    bool ran = false;  // not filtered out by --benchmark_filter
    for (const SizeSpec& sz : sizes_of(a)) ran |= results.count({sz.bytes, static_cast<int>(a), false}) > 0;
    if (ran)
      std::printf("%-24s %-16s %-16s\n", info(a).op, crossover[static_cast<int>(a)].c_str(),
                  bytes_crossover[static_cast<int>(a)].c_str());
  }
  std::fflush(stdout);
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

int run(int argc, char** argv) {
  Job j;
  job = &j;
  init_ops();
  j.backend = init_backend_from_env(kTimeout);
  j.rank = j.backend->rank();
  if (j.backend->world_size() != kWorld) {
    std::fprintf(stderr, "distributed_ops_gloo_bench: needs %d ranks (dtensor launch -n %d), got %d\n", kWorld,
                 kWorld, j.backend->world_size());
    return 2;
  }
  if (const char* s = std::getenv("DTENSOR_BENCH_ITERS_SCALE")) j.iters_scale = std::atof(s);
  if (!(j.iters_scale > 0)) j.iters_scale = 1.0;
  j.mesh = DeviceMesh::create(j.backend, {kWorld}, {}, {}, kTimeout);

  // The timing synchronisation's own context, on the same store under a distinct prefix.
  j.store = open_store(read_process_env().store);
  j.sync_prefix = std::make_unique<gloo::rendezvous::PrefixStore>("bench/sync", *j.store);
  gloo::transport::tcp::attr attr;
  const char* host = std::getenv("DTENSOR_GLOO_HOST");
  attr.hostname = host && *host ? host : "127.0.0.1";
  j.device = gloo::transport::tcp::CreateDevice(attr);
  j.sync = std::make_shared<gloo::rendezvous::Context>(j.rank, kWorld);
  j.sync->setTimeout(kTimeout);
  j.sync->connectFullMesh(*j.sync_prefix, j.device);

  // Ranks other than 0 neither print nor write --benchmark_out.
  std::vector<char*> args(argv, argv + argc);
  if (j.rank != 0) {
    std::vector<char*> kept;
    for (char* a : args)
      if (std::strncmp(a, "--benchmark_out", 15) != 0) kept.push_back(a);
    args = kept;
  }
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  register_all();
  if (j.rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
    print_table();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  sync_barrier();  // nobody tears down connections while another rank still uses them
  j.sync.reset();
  j.mesh.reset();
  j.backend.reset();
  job = nullptr;
  return 0;
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  try {
    return dtensor::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_ops_gloo_bench (rank %s): %s\n", std::getenv("RANK") ? std::getenv("RANK") : "?",
                 e.what());
    return 1;
  }
}
