// Redistribution on 4 Gloo processes: DTensor::redistribute against the raw Gloo collective that
// does the same data movement, on the same buffers, for global float32 tensors of 1 KB to 64 MB.
//
//   bazel build //bench:redistribute_gloo_bench //tools:dtensor
//   bazel-bin/tools/dtensor launch -n 4 -- bazel-bin/bench/redistribute_gloo_bench [--interleave]
//       [gbench flags]
//
// Global tensor: [n, n] float32 with n * n * 4 = size bytes (n is a multiple of 4: even shards),
// on a 1-d mesh of the 4 ranks. For each size:
//   S(0)->R     redistribute | gloo::allgatherv of the local [n/4, n] shard into an [n, n] buffer
//   P->R        redistribute | gloo::allreduce (sum) of the local [n, n] block into another [n, n]
//                              buffer (setInput + setOutput): like redistribute, it leaves the
//                              Partial input untouched (Gloo copies it into the output as it goes)
//   P->S(0)     redistribute | the same out-of-place gloo::allreduce (Gloo has no reduce-scatter;
//                              an allreduce is what a direct Gloo user calls for it)
//   S(0)->S(1)  redistribute | the shard packed into per-rank blocks (one strided copy, as the
//                              all-to-all needs contiguous blocks: redistribute packs the same way),
//                              then gloo::alltoallv (n/4 * n/4 elements to each rank)
// Every direct buffer is allocated once, before timing.
// The direct calls use their own gloo::rendezvous::Context, connected through a PrefixStore
// ("bench/direct") on the job's store (DTENSOR_STORE), and the plain gloo::sum<float> reduction
// (DTensor's Gloo backend reduces through dtensor's reduce_pair). A third context ("bench/sync",
// on a third TCP device) carries the timing synchronisation, so that neither variant shares a
// context or a device (a device has its own event-loop thread) with it: on a loaded machine the
// time an op waits to be scheduled depends on how long its device's thread has slept, and a
// variant sharing its device with the synchronisation looked several times slower at 1 MB.
//
// Lockstep: every rank runs the same benchmarks in the same order with fixed iteration counts
// (->Iterations(n), scaled down for big sizes; do not pass --benchmark_enable_random_interleaving).
// Each benchmark first checks that all ranks are running the same one, then runs the op once
// untimed (warm-up: connections, first-touch page faults of the pre-allocated buffers). Each timed
// iteration is: Gloo barrier (untimed), the op (timed on each rank), then a Gloo allreduce(max) of
// the ranks' elapsed seconds (untimed); the max is the iteration's manual time (UseManualTime). So
// an iteration's time is the slowest rank's, from a common start. Google Benchmark reports the
// mean over iterations (and bytes/s: the global tensor's bytes once per iteration); the counter
// median_us and the final table give the median, which resists the scheduling outliers of 4
// processes sharing a small machine.
//
// With --interleave, each (size, op) is instead one benchmark whose iterations time both variants
// back to back (each as above), alternating which goes first; the table gives the median of each
// variant's times. On a machine shared with other work this keeps slow drifts of the load out of the
// ratio, which separate benchmarks seconds apart do not.
//
// Only rank 0 reports: the other ranks use a reporter that prints nothing and ignore
// --benchmark_out. At the end rank 0 prints a table: size, op, DTensor time, direct time, ratio
// (all medians).
#include <time.h>
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
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/dtensor.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
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

// Global sizes in bytes and the timed iterations of each (every op, both variants).
struct SizeSpec {
  int64_t bytes;
  int iterations;
};
constexpr SizeSpec kSizes[] = {
    {1 << 10, 500}, {16 << 10, 500}, {256 << 10, 200}, {1 << 20, 80},
    {4 << 20, 30},  {16 << 20, 10},  {64 << 20, 5},
};

enum class Op { kS0toR, kPtoR, kPtoS0, kS0toS1 };
constexpr Op kOps[] = {Op::kS0toR, Op::kPtoR, Op::kPtoS0, Op::kS0toS1};
const char* op_name(Op op) {
  switch (op) {
    case Op::kS0toR: return "S(0)->R";
    case Op::kPtoR: return "P->R";
    case Op::kPtoS0: return "P->S(0)";
    case Op::kS0toS1: return "S(0)->S(1)";
  }
  return "?";
}
const char* op_id(Op op) {
  switch (op) {
    case Op::kS0toR: return "S0_to_R";
    case Op::kPtoR: return "P_to_R";
    case Op::kPtoS0: return "P_to_S0";
    case Op::kS0toS1: return "S0_to_S1";
  }
  return "?";
}

std::string size_str(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, "MB") : absl::StrCat(bytes >> 10, "KB");
}

// ------------------------------------------------------------------------------------------------
// The job: the DTensor side (backend + mesh) and the direct side (its own Gloo context).

struct Job {
  int rank = 0;
  std::shared_ptr<Backend> backend;
  MeshPtr mesh;
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefix;
  std::shared_ptr<gloo::transport::Device> device;       // the direct collectives
  std::shared_ptr<gloo::transport::Device> sync_device;  // the synchronisation
  std::unique_ptr<gloo::rendezvous::PrefixStore> sync_prefix;
  std::shared_ptr<gloo::rendezvous::Context> ctx;   // the direct collectives
  std::shared_ptr<gloo::rendezvous::Context> sync;  // barriers and timing reductions
  uint32_t tag = 0;  // per collective on ctx or sync, the same sequence on every rank
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

// Out of place: `in` is read, `out` receives the sum.
void direct_allreduce_sum(const float* in, float* out, size_t n) {
  gloo::AllreduceOptions opts(job->ctx);
  opts.setInput(const_cast<float*>(in), n);
  opts.setOutput(out, n);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  opts.setTag(job->tag++);
  opts.setTimeout(kTimeout);
  gloo::allreduce(opts);
}

void direct_allgather(const float* in, size_t n_in, float* out) {
  gloo::AllgathervOptions opts(job->ctx);
  opts.setInput(const_cast<float*>(in), n_in);
  opts.setOutput(out, std::vector<size_t>(kWorld, n_in));
  opts.setTag(job->tag++);
  opts.setTimeout(kTimeout);
  gloo::allgatherv(opts);
}

void direct_alltoall(const float* in, float* out, int64_t per_rank) {
  gloo::AlltoallvOptions opts(job->ctx);
  std::vector<int64_t> counts(kWorld, per_rank);
  opts.setInput(const_cast<float*>(in), counts);
  opts.setOutput(out, counts);
  opts.setTag(job->tag++);
  opts.setTimeout(kTimeout);
  gloo::alltoallv(opts);
}

// Aborts unless every rank is running the benchmark named `name` (lockstep check).
void check_lockstep(const std::string& name) {
  const double h = static_cast<double>(std::hash<std::string>{}(name) & 0xffffffffu);
  std::vector<double> v = {h, -h};
  sync_max(v);
  if (v[0] != h || v[1] != -h) {
    std::fprintf(stderr, "rank %d: ranks are not running the same benchmark (here: %s); run every "
                 "rank with the same flags and without random interleaving\n", job->rank,
                 name.c_str());
    std::fflush(nullptr);
    _exit(2);
  }
}

// Median wall and CPU seconds of a variant (see time_once), by (bytes, op, direct?), kept on rank 0
// for the final table.
struct Medians {
  double wall = 0, cpu = 0;
};
std::map<std::tuple<int64_t, int, bool>, Medians> results;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Seconds of CPU time this process (all its threads: the caller and Gloo's device threads) used.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One timed iteration of `body`: barrier, the op; the slowest rank's wall seconds and the CPU
// seconds of all ranks together. Gloo waits by blocking (epoll, condition variables), so the CPU
// time is the memory and network-stack work the op did: it barely depends on how long the op
// waited to be scheduled, which dominates wall time on a loaded machine.
struct Sample {
  double wall = 0, cpu = 0;
};
Sample time_once(const std::function<void()>& body) {
  sync_barrier();
  const double cpu0 = process_cpu_seconds();
  const auto start = Clock::now();
  body();
  // [wall, cpu of rank 0, ..., cpu of rank 3]: the max of each is the wall max and each rank's cpu.
  std::vector<double> t(1 + kWorld, 0.0);
  t[0] = std::chrono::duration<double>(Clock::now() - start).count();
  t[1 + job->rank] = process_cpu_seconds() - cpu0;
  sync_max(t);
  Sample out{t[0], 0};
  for (int r = 0; r < kWorld; ++r) out.cpu += t[1 + r];
  return out;
}

// Medians of a variant's samples.
Medians medians(const std::vector<Sample>& v) {
  std::vector<double> w, c;
  for (const Sample& x : v) {
    w.push_back(x.wall);
    c.push_back(x.cpu);
  }
  return {median(w), median(c)};
}

// The timing loop described in the file comment.
void measure(benchmark::State& state, const std::string& name, int64_t bytes, Op op,
             bool direct, const std::function<void()>& body) {
  check_lockstep(name);
  body();  // warm-up, untimed
  std::vector<Sample> times;
  for (auto _ : state) {
    times.push_back(time_once(body));
    state.SetIterationTime(times.back().wall);
  }
  const Medians m = medians(times);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["median_us"] = m.wall * 1e6;
  state.counters["cpu_median_us"] = m.cpu * 1e6;
  results[{bytes, static_cast<int>(op), direct}] = m;
}

// --interleave: one iteration times both variants, DTensor first on even iterations and the direct
// call first on odd ones, so that both see the same load; the iteration's time is their sum.
void measure_pair(benchmark::State& state, const std::string& name, int64_t bytes, Op op,
                  const std::function<void()>& dtensor, const std::function<void()>& direct) {
  check_lockstep(name);
  dtensor();  // warm-up, untimed
  direct();
  std::vector<Sample> td, tg;
  for (auto _ : state) {
    if (td.size() % 2 == 0) {
      td.push_back(time_once(dtensor));
      tg.push_back(time_once(direct));
    } else {
      tg.push_back(time_once(direct));
      td.push_back(time_once(dtensor));
    }
    state.SetIterationTime(td.back().wall + tg.back().wall);
  }
  const Medians d = medians(td), g = medians(tg);
  state.counters["dtensor_median_us"] = d.wall * 1e6;
  state.counters["direct_median_us"] = g.wall * 1e6;
  state.counters["ratio"] = d.wall / g.wall;
  state.counters["cpu_ratio"] = d.cpu / g.cpu;
  results[{bytes, static_cast<int>(op), false}] = d;
  results[{bytes, static_cast<int>(op), true}] = g;
}

// The op of one variant on its own buffers (allocated here, before any timing).
std::function<void()> make_body(int64_t bytes, Op op, bool direct) {
  const int64_t n = static_cast<int64_t>(std::llround(std::sqrt(bytes / 4.0)));
  const int64_t rows = n / kWorld;  // rows of an S(0) shard
  switch (op) {
    case Op::kS0toR: {
      DTensor x = from_local(Tensor::zeros({rows, n}), job->mesh, {Shard(0)});
      if (!direct) return [x] { benchmark::DoNotOptimize(x.redistribute({Replicate()}, kTimeout)); };
      Tensor out = Tensor::zeros({n, n});
      return [x, out, rows, n] {
        direct_allgather(x.local_tensor().data<float>(), rows * n, out.data<float>());
      };
    }
    case Op::kPtoR:
    case Op::kPtoS0: {
      DTensor x = from_local(Tensor::zeros({n, n}), job->mesh, {Partial()});
      const Placements dst = {op == Op::kPtoR ? Replicate() : Shard(0)};
      if (!direct) return [x, dst] { benchmark::DoNotOptimize(x.redistribute(dst, kTimeout)); };
      Tensor out = Tensor::zeros({n, n});
      return [x, out, n] {
        direct_allreduce_sum(x.local_tensor().data<float>(), out.data<float>(), n * n);
      };
    }
    case Op::kS0toS1: {
      DTensor x = from_local(Tensor::zeros({rows, n}), job->mesh, {Shard(0)});
      if (!direct) return [x] { benchmark::DoNotOptimize(x.redistribute({Shard(1)}, kTimeout)); };
      // The piece for rank r (the shard's columns r*rows..(r+1)*rows-1) at offset r*rows*rows.
      const Tensor pieces = x.local_tensor().view({rows, kWorld, rows}).transpose(0, 1);
      Tensor packed = Tensor::zeros({kWorld, rows, rows});
      Tensor out = Tensor::zeros({rows * n});
      return [pieces, packed, out, rows]() mutable {
        packed.copy_(pieces);
        direct_alltoall(packed.data<float>(), out.data<float>(), rows * rows);
      };
    }
  }
  return [] {};
}

bool size_ok(benchmark::State& state, int64_t bytes) {
  const int64_t n = static_cast<int64_t>(std::llround(std::sqrt(bytes / 4.0)));
  if (n * n * 4 != bytes || n % kWorld != 0) {
    state.SkipWithError("size is not 4 * n * n bytes with n a multiple of 4");
    return false;
  }
  return true;
}

void bench(benchmark::State& state, const std::string& name, int64_t bytes, Op op, bool direct) {
  if (!size_ok(state, bytes)) return;
  measure(state, name, bytes, op, direct, make_body(bytes, op, direct));
}

void bench_pair(benchmark::State& state, const std::string& name, int64_t bytes, Op op) {
  if (!size_ok(state, bytes)) return;
  measure_pair(state, name, bytes, op, make_body(bytes, op, false), make_body(bytes, op, true));
}

void register_all(bool interleave) {
  for (const SizeSpec& s : kSizes) {
    for (Op op : kOps) {
      if (interleave) {
        std::string name = absl::StrCat(op_id(op), "/", size_str(s.bytes), "/interleaved");
        benchmark::RegisterBenchmark(name.c_str(), bench_pair, name, s.bytes, op)
            ->Iterations(s.iterations)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        continue;
      }
      for (bool direct : {false, true}) {
        std::string name =
            absl::StrCat(op_id(op), "/", size_str(s.bytes), direct ? "/direct" : "/dtensor");
        benchmark::RegisterBenchmark(name.c_str(), bench, name, s.bytes, op, direct)
            ->Iterations(s.iterations)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

void print_table() {
  std::printf("\nMedian per iteration, redistribute vs the direct Gloo call: wall time (slowest rank)"
              " and CPU time (all ranks):\n");
  std::printf("%-6s %-11s %14s %14s %7s %14s %14s %7s\n", "size", "op", "dtensor (us)", "direct (us)",
              "ratio", "dtensor cpu", "direct cpu", "ratio");
  for (const SizeSpec& s : kSizes) {
    for (Op op : kOps) {
      auto d = results.find({s.bytes, static_cast<int>(op), false});
      auto g = results.find({s.bytes, static_cast<int>(op), true});
      if (d == results.end() || g == results.end()) continue;
      const Medians& a = d->second;
      const Medians& b = g->second;
      std::printf("%-6s %-11s %14.1f %14.1f %7.2f %14.1f %14.1f %7.2f\n", size_str(s.bytes).c_str(),
                  op_name(op), a.wall * 1e6, b.wall * 1e6, a.wall / b.wall, a.cpu * 1e6, b.cpu * 1e6,
                  a.cpu / b.cpu);
    }
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
  j.backend = init_backend_from_env(kTimeout);
  j.rank = j.backend->rank();
  if (j.backend->world_size() != kWorld) {
    std::fprintf(stderr, "redistribute_gloo_bench: needs %d ranks (dtensor launch -n %d), got %d\n",
                 kWorld, kWorld, j.backend->world_size());
    return 2;
  }
  j.mesh = DeviceMesh::create(j.backend, {kWorld}, {}, {}, kTimeout);

  // The direct side's own context, on the same store under a distinct prefix.
  j.store = open_store(read_process_env().store);
  j.prefix = std::make_unique<gloo::rendezvous::PrefixStore>("bench/direct", *j.store);
  gloo::transport::tcp::attr attr;
  const char* host = std::getenv("DTENSOR_GLOO_HOST");
  attr.hostname = host && *host ? host : "127.0.0.1";
  j.device = gloo::transport::tcp::CreateDevice(attr);
  j.ctx = std::make_shared<gloo::rendezvous::Context>(j.rank, kWorld);
  j.ctx->setTimeout(kTimeout);
  j.ctx->connectFullMesh(*j.prefix, j.device);
  j.sync_prefix = std::make_unique<gloo::rendezvous::PrefixStore>("bench/sync", *j.store);
  j.sync = std::make_shared<gloo::rendezvous::Context>(j.rank, kWorld);
  j.sync->setTimeout(kTimeout);
  j.sync_device = gloo::transport::tcp::CreateDevice(attr);
  j.sync->connectFullMesh(*j.sync_prefix, j.sync_device);

  // Ranks other than 0 neither print nor write --benchmark_out.
  // --interleave is ours; the other flags go to Google Benchmark.
  bool interleave = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--interleave") == 0) {
      interleave = true;
    } else if (j.rank == 0 || std::strncmp(argv[i], "--benchmark_out", 15) != 0) {
      args.push_back(argv[i]);
    }
  }
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  register_all(interleave);
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
  j.ctx.reset();
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
    std::fprintf(stderr, "redistribute_gloo_bench (rank %s): %s\n",
                 std::getenv("RANK") ? std::getenv("RANK") : "?", e.what());
    return 1;
  }
}
