// Context parallel attention on Gloo processes: ring attention (ops/attention/ring.h) against
// the all-gather variant (the "queries" rows of ops/attention/rules.cc: key and value all-gathered
// from their sequence shards, each rank attends its own query rows to every key), causal, for
// sequence lengths --min-seq to --max-seq (doubling).
//
//   bazel build //bench:ring_attention_gloo_bench //tools:dtensor
//   bazel-bin/tools/dtensor launch -n 4 -- bazel-bin/bench/ring_attention_gloo_bench
//       [--min-seq 1024] [--max-seq 65536] [--heads 4] [--dim 64] [--iters 3] [--backward] [--no-warmup]
//       [--balanced]
//
// Inputs: query, key, value [1, heads, L, dim] float32, sequence-sharded over the ranks (torch.chunk:
// L / n rows each for L a multiple of n). Each variant runs exactly what the engine's step runs:
//   forward   ring:       ring_attention_forward
//             all-gather: key and value redistributed S(2) -> R (DTensor::redistribute), then the
//                         SDPA kernel on the local query rows (query_offset = first global row)
//   backward  ring:       ring_attention_forward (the log-sum-exp, as the step recomputes it) and
//                         ring_attention_backward
//             all-gather: key and value S(2) -> R, the SDPA backward kernel on the local query rows
//                         against all keys, dK and dV P(sum) -> S(2) (reduce-scatter)
// Each timed iteration: barrier (untimed), the variant (timed on each rank), all-reduce(max) of the
// ranks' seconds (untimed): an iteration's time is the slowest rank's. The table gives the median
// over --iters iterations (after one untimed warm-up per length and variant), the bytes this rank
// sent in one iteration (from the group's CommStats), and the ring formula
// (ring_attention_bytes_sent) for comparison. Rank 0 prints; every rank runs the same lengths.
// After each length rank 0 also prints what the cost model picks (dtensor explain) for these
// sequence-sharded inputs, forward and backward, under the cpu-tcp and h100-nvlink profiles.
// --no-warmup skips the untimed first call (for long sequences, where one call takes minutes).
// --balanced adds a row "fwd h-t": ring_attention_forward_balanced (each rank holds sequence chunks
// r and 2n-1-r of 2n, so the causal work is even), its time in the ring column, the all-gather
// forward's beside it, and a line with each variant's CPU time on the busiest and the idlest rank.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dtensor/collectives/env.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "kernels/cpu/attention.h"
#include "nlohmann/json.hpp"
#include "ops/attention/ring.h"
#include "dispatch/explain.h"

namespace dtensor {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int64_t min_seq = 1024, max_seq = 65536, heads = 4, dim = 64;
  int iters = 3;
  bool warmup = true;
  bool backward = false;
  bool balanced = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto num = [&](int64_t lo) {
      DT_CHECK(i + 1 < argc, f, ": needs a value");
      const int64_t v = std::atoll(argv[++i]);
      DT_CHECK(v >= lo, f, " ", argv[i], ": accepted: an integer >= ", lo);
      return v;
    };
    if (f == "--min-seq") a.min_seq = num(1);
    else if (f == "--max-seq") a.max_seq = num(1);
    else if (f == "--heads") a.heads = num(1);
    else if (f == "--dim") a.dim = num(1);
    else if (f == "--iters") a.iters = static_cast<int>(num(1));
    else if (f == "--backward") a.backward = true;
    else if (f == "--no-warmup") a.warmup = false;
    else if (f == "--balanced") a.balanced = true;
    else DT_FAIL("ring_attention_gloo_bench: unknown flag '", f, "'; accepted: --min-seq, --max-seq, --heads, ",
                 "--dim, --iters, --backward, --no-warmup, --balanced");
  }
  return a;
}

// What the cost model picks (dtensor explain) for sequence-sharded query/key/value of global shape
// [1, heads, L, dim] on a 1-d mesh of n ranks under `hardware`: forward and backward, "ring" for the
// ring_attention step, else the redistributions of key/value (e.g. "all_gather").
std::string explain_pick(int n, int64_t heads, int64_t L, int64_t dim, const std::string& hardware) {
  using json = nlohmann::json;
  const json t = {{"shape", {1, heads, L, dim}}, {"dtype", "float32"}, {"placements", {"S(2)"}}};
  ExplainOptions eo;
  eo.hardware = hardware;
  auto pick = [&](const std::string& op, const json& args) {
    const json req = {{"mesh", {n}}, {"op", op}, {"args", args}, {"kwargs", {{"is_causal", true}}}};
    const json ans = json::parse(explain_line(req.dump(), eo));
    if (ans.contains("error")) return "error: " + ans["error"].get<std::string>();
    if (ans.contains("step")) return ans["step"].get<std::string>();
    std::string kinds;
    for (const auto& c : ans["collectives"]) kinds += (kinds.empty() ? "" : "+") + c["kind"].get<std::string>();
    return kinds.empty() ? std::string("local") : kinds;
  };
  return "forward " + pick("scaled_dot_product_attention", {t, t, t}) + ", backward " +
         pick("_scaled_dot_product_attention_backward", {t, t, t, t, t});
}

Tensor random(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

struct Timing {
  double median_ms = 0;
  int64_t bytes = 0;  // this rank, one iteration
  // CPU time of the busiest and the idlest rank in the last iteration (all threads of the process):
  // how evenly the work is spread, which wall time hides when 4 ranks share 2 cores.
  double cpu_max_ms = 0, cpu_min_ms = 0;
};

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Runs `fn` once untimed (unless !warmup), then `iters` times in lockstep; see the file comment.
bool g_warmup = true;
Timing measure(ProcessGroup& pg, int iters, const std::function<void()>& fn) {
  if (g_warmup) fn();
  std::vector<double> ms;
  Timing out;
  for (int i = 0; i < iters; ++i) {
    pg.barrier();
    const int64_t before = pg.stats().bytes_sent;
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    fn();
    Tensor t = Tensor::from_vector(std::vector<double>{std::chrono::duration<double, std::milli>(Clock::now() - t0).count()}, {1});
    const double cpu = process_cpu_ms() - c0;
    out.bytes = pg.stats().bytes_sent - before;
    pg.all_reduce(t, ReduceOp::kMax);
    ms.push_back(t.item());
    Tensor hi = Tensor::from_vector(std::vector<double>{cpu}, {1}), lo = hi.clone();
    pg.all_reduce(hi, ReduceOp::kMax);
    pg.all_reduce(lo, ReduceOp::kMin);
    out.cpu_max_ms = hi.item();
    out.cpu_min_ms = lo.item();
  }
  std::sort(ms.begin(), ms.end());
  out.median_ms = ms[ms.size() / 2];
  return out;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  g_warmup = a.warmup;
  auto backend = init_backend_from_env();
  const int n = backend->world_size(), rank = backend->rank();
  auto mesh = DeviceMesh::create(backend, {n}, {"cp"});
  ProcessGroup& pg = mesh->group(0);
  const Placements seq_shard{Shard(2)}, rep{Replicate()};
  if (rank == 0)
    std::printf("ring attention vs all-gather, %d Gloo processes, [1, %lld, L, %lld] float32, causal, %s; "
                "median of %d (ms, slowest rank); bytes sent by rank 0 per call\n",
                n, static_cast<long long>(a.heads), static_cast<long long>(a.dim),
                a.backward ? "forward and backward" : "forward", a.iters);
  if (rank == 0)
    std::printf("%8s %-9s %12s %12s %8s %14s %14s %14s\n", "L", "pass", "ring ms", "gather ms", "ring/ag",
                "ring bytes", "gather bytes", "ring formula");
  for (int64_t L = a.min_seq; L <= a.max_seq; L *= 2) {
    const auto [start, len] = chunk_range(L, n, rank);
    const Shape local{1, a.heads, len, a.dim}, global{1, a.heads, L, a.dim};
    const uint64_t seed = static_cast<uint64_t>(L) * 16 + static_cast<uint64_t>(rank);
    const Tensor q = random(local, seed * 4), k = random(local, seed * 4 + 1), v = random(local, seed * 4 + 2),
                 g = random(local, seed * 4 + 3);
    const DTensor kd = from_local(k, mesh, seq_shard, global), vd = from_local(v, mesh, seq_shard, global);
    auto gathered = [&] {
      return std::make_pair(kd.redistribute(rep).local_tensor(), vd.redistribute(rep).local_tensor());
    };
    Tensor out;
    const Timing ring_f = measure(pg, a.iters, [&] { out = ops::ring_attention_forward(pg, q, k, v, L, true).out; });
    const Timing ag_f = measure(pg, a.iters, [&] {
      auto [K, V] = gathered();
      kernels::scaled_dot_product_attention(q, K, V, std::nullopt, true, std::nullopt, start);
    });
    auto row = [&](const char* pass, const Timing& r, const Timing& ag, int64_t formula) {
      if (rank == 0)
        std::printf("%8lld %-9s %12.1f %12.1f %8.2f %14lld %14lld %14lld\n", static_cast<long long>(L), pass,
                    r.median_ms, ag.median_ms, r.median_ms / ag.median_ms, static_cast<long long>(r.bytes),
                    static_cast<long long>(ag.bytes), static_cast<long long>(formula));
    };
    row("forward", ring_f, ag_f, ops::ring_attention_bytes_sent(a.heads, L, a.dim, a.dim, 4, n, 0, false));
    if (a.balanced) {
      auto [head, tail] = ops::ring_attention_balanced_rows(L, n, rank);
      const Shape bl{1, a.heads, head.second + tail.second, a.dim};
      const Tensor qb = random(bl, seed * 4 + 5), kb = random(bl, seed * 4 + 6), vb = random(bl, seed * 4 + 7);
      const Timing bal = measure(pg, a.iters, [&] { ops::ring_attention_forward_balanced(pg, qb, kb, vb, L); });
      row("fwd h-t", bal, ag_f, ops::ring_attention_bytes_sent(a.heads, L, a.dim, a.dim, 4, n, 0, false));
      if (rank == 0)
        std::printf("%8lld cpu ms per rank, busiest/idlest: ring %.0f/%.0f, h-t %.0f/%.0f, all-gather %.0f/%.0f\n",
                    static_cast<long long>(L), ring_f.cpu_max_ms, ring_f.cpu_min_ms, bal.cpu_max_ms, bal.cpu_min_ms,
                    ag_f.cpu_max_ms, ag_f.cpu_min_ms);
    }
    if (a.backward) {
      const Timing ring_b = measure(pg, a.iters, [&] {
        ops::RingAttentionOut f = ops::ring_attention_forward(pg, q, k, v, L, true);
        ops::ring_attention_backward(pg, g, q, k, v, f.out, f.lse, L, true);
      });
      const Timing ag_b = measure(pg, a.iters, [&] {
        auto [K, V] = gathered();
        kernels::AttentionGrads gr =
            kernels::scaled_dot_product_attention_backward(g, q, K, V, out, true, std::nullopt, std::nullopt, start);
        from_local(gr.key, mesh, {Partial()}, global).redistribute(seq_shard);
        from_local(gr.value, mesh, {Partial()}, global).redistribute(seq_shard);
      });
      row("backward", ring_b, ag_b,
          ops::ring_attention_bytes_sent(a.heads, L, a.dim, a.dim, 4, n, 0, false) +
              ops::ring_attention_bytes_sent(a.heads, L, a.dim, a.dim, 4, n, 0, true));
    }
    if (rank == 0)
      for (const char* hw : {"cpu-tcp", "h100-nvlink"})
        std::printf("%8lld explain (%s): %s\n", static_cast<long long>(L), hw,
                    explain_pick(n, a.heads, L, a.dim, hw).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  try {
    return dtensor::run(argc, argv);
  } catch (const dtensor::Error& e) {
    std::fprintf(stderr, "ring_attention_gloo_bench: error: %s\n", e.what());
    return 1;
  }
}
