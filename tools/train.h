// The main job, `dtensor train`: a GPT-style character-level model trained on a real text file with
// tensor parallelism (and data, expert or context parallelism on another mesh dim) over threads,
// Gloo processes or NCCL processes (one per GPU).
#pragma once

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"
#include "nn/layers.h"

namespace dtensor {
class DeviceMesh;
}  // namespace dtensor

namespace dtensor::tools {

struct TrainOptions {
  std::string mesh = "tp=4";  // "tp=N", "dp=M,tp=N", "ep=M,tp=N", "pp=P,tp=N" or with a cp dim (parse_mesh)
  std::string backend = "threads";  // or "gloo", or "nccl" (with device "cuda")
  std::string text = "/usr/share/common-licenses/GPL-3";
  int steps = 400;
  int batch = 8;
  int seq = 64;
  int dim = 64;
  int layers = 2;
  int heads = 4;
  double lr = 3e-3;
  bool sequence_parallel = false;
  bool loss_parallel = false;  // keep the logits sharded over the vocabulary into the loss
  // Context parallel is on whenever the mesh has a cp dim (--mesh cp=N, cp=M,tp=N, dp=L,cp=M,tp=N):
  // token ids and targets are sharded on the sequence dim over cp, so attention's query, key and
  // value are too and the engine runs ring attention (ops/attention/ring.h). This flag only
  // states the intent: set without a cp dim, validate_train_options rejects it.
  bool context_parallel = false;
  // Mixture of experts (nn/moe.h): > 0 replaces every block's MLP by this many experts (top_k of
  // them per token), sharded over the mesh dim "ep" (--mesh ep=M,tp=N); the loss adds moe_aux_coef
  // times the load-balancing loss.
  int experts = 0;
  int top_k = 2;
  double moe_aux_coef = 0.01;
  // Pipeline parallel (a pp mesh dim, tools/train_pipeline.h): the batch in this many micro-batches
  // (0: default_micro_batches), each rank holding this many model chunks (virtual stages; > 1:
  // interleaved 1F1B). Without a pp dim both must stay at their defaults.
  int micro_batches = 0;
  int virtual_stages = 1;
  bool check = false;  // train in float64, also on one rank, and compare losses (kCheckTolerance)
  int sample_chars = 200;
  int log_every = 10;
  uint64_t seed = 1234;
  std::string save;  // checkpoint directory to write at the end
  std::string load;  // checkpoint directory to start from
  // Directory for a record of the run that another implementation can replay exactly
  // (bench/train_vs_torch.py): RECORD/init, a checkpoint (nn/checkpoint.h) of the parameters and
  // optimizer state before the first step, and RECORD/steps.jsonl, one line per step from rank 0:
  // {"step": N, "loss": L (%.17g), "tokens": [[...], ...]} with the batch's [batch, seq + 1] ids.
  std::string record;
  // cpu, cuda (thread ranks: cuda:0; process ranks: cuda:LOCAL_RANK) or cuda:N. On a device the
  // parameters, activations and optimizer state live there and the ops run their CUDA kernels.
  std::string device = "cpu";
  // Collective timeout in seconds for every rank (0: $DTENSOR_TIMEOUT, else 300 s). A rank that stops
  // or dies is reported by the others, naming it, within this time.
  double timeout_s = 0;
  // Compute (BLAS) threads per rank (0: $OPENBLAS_NUM_THREADS / $OMP_NUM_THREADS, else the cores
  // divided by the ranks on this machine: dtensor/core/compute_threads.h).
  int threads = 0;
  // Cost-model hardware profile for every op's sharding choice (propagation/hardware.h): a built-in
  // name or a profile JSON file (dtensor calibrate --out); empty: the default (h100-nvlink).
  std::string hardware;
  // Data-parallel batch shares by weight, one positive integer per dp rank ("3,1"): the batch is
  // sharded by weight (a weighted shard, DESIGN §2) so a faster rank takes more rows: rank r gets
  // weighted_range(batch, weights, r) rows, and the placement's weights are those row counts (8 rows
  // by 2,1 -> 5 and 3 rows, S(0)[5:3]). Empty: even.
  std::string rank_weights;
  // Elastic run (tools/train_elastic.h; Gloo processes, --mesh tp=N or dp=M,tp=N): a rank that dies
  // or stops ends a generation, the survivors agree on the next one, re-plan the layout, rebuild the
  // model and optimizer state from the surviving replicas (or the last --save checkpoint) and redo
  // the failed step.
  bool elastic = false;
  // With --save: also write the checkpoint every this many steps (0: only at the end).
  int save_every = 0;
  // With --elastic: the launcher (dtensor train without RANK) restarts a failed rank's process up to
  // this many times; the restarted process rejoins at the members' next step boundary, receives its
  // shards from them (no disk) and the run returns to the launch mesh.
  int max_restarts = 0;
};

struct TrainResult {
  std::vector<double> losses;
  double tokens_per_s = 0;
  int64_t bytes_per_step = 0;  // bytes rank 0 sent per step (forward + backward + optimizer)
  // Rank 0's collectives over all training steps (calls by kind, bytes), per mesh dim (the order of
  // --mesh; "cp=N" is cp=N,tp=1).
  std::vector<CommStats> comm_by_dim;
  std::string sample;
  // With a pp dim: the pipeline's bubble, measured (time all ranks waited in send/recv over their
  // pipeline time, steps after the first), the planner's prediction (planner/pipeline.h) and the
  // schedule's own timeline with backward = 2 forwards (nn/pipeline_schedule.h); -1 without pp.
  double bubble_measured = -1, bubble_predicted = -1, bubble_simulated = -1;
  // With a pp dim and --check: the largest difference between the first step's gradients and one
  // rank's (relative to each parameter's largest gradient, over all ranks); -1 otherwise.
  double gradient_difference = -1;
  // This rank wrote the log and reports the run (--check): rank 0, or in an elastic run the lowest
  // member of the last generation.
  bool lead = false;
};

// "cpu", "cuda" or "cuda:N" (see TrainOptions::device); throws dtensor::Error naming what is
// accepted, or saying that the build has no CUDA.
Device parse_device(const std::string& spec, const std::string& backend);
// The spelling rule of parse_device alone (no build or device check), for the command line's
// validator: throws dtensor::Error naming what is accepted.
void check_device_spelling(const std::string& spec);
// Most ranks `dtensor train` runs on one machine (threads or local processes), and the largest
// accepted values of its size flags (each also >= 1; --sample >= 0).
inline constexpr int64_t kMaxTrainRanks = 1024;
inline constexpr int kMaxSteps = 1 << 30, kMaxBatch = 1 << 20, kMaxSeq = 1 << 20, kMaxDim = 1 << 16,
                     kMaxLayers = 1024, kMaxSample = 1 << 20;

// Per mesh dim, the collective statistics of its group now (one CommStats per dim, in mesh order).
std::vector<CommStats> dim_comm_stats(const DeviceMesh& mesh);
// Adds to sums[d] (TrainResult::comm_by_dim, one per mesh dim) what mesh dim d's group did since
// `before` (dim_comm_stats taken at the step's start): calls, bytes sent and calls by kind.
void add_dim_comm_since(const DeviceMesh& mesh, const std::vector<CommStats>& before, std::vector<CommStats>& sums);

// The model of a run: --seq, --dim, --heads, --layers, --seed, --moe and --top-k, over the text's
// `vocab` characters (the one place the options become an nn::GPTConfig: the plain, pipeline and
// elastic runs build the same model).
nn::GPTConfig gpt_config(const TrainOptions& o, int64_t vocab);

// Parses "dp=2,tp=2" into sizes and names; throws dtensor::Error naming what is accepted (forms:
// tp=N, dp=M,tp=N, ep=M,tp=N, pp=P,tp=N, pp=P, cp=N, cp=M,tp=N, dp=L,cp=M,tp=N; positive sizes, at
// most kMaxTrainRanks ranks). "cp=N" comes back as cp=N,tp=1, "pp=P" as pp=P,tp=1.
void parse_mesh(const std::string& spec, std::vector<int64_t>* sizes, std::vector<std::string>* names);

// --micro-batches when not given: 2 per stage when that divides --batch, else 1 per stage, else
// the batch's rows (one micro-batch a row).
int default_micro_batches(const TrainOptions& o);

// Checks every option before any rank starts: ranges (steps, batch, seq, dim, layers, heads,
// log-every, sample >= 1 or 0 where it means "none"; lr finite and > 0), divisibility (heads | dim,
// tp | heads and dim), a known --hardware, --context-parallel only with a cp mesh dim and a cp dim
// not with --moe, with a pp dim: --layers a multiple of pp x --virtual-stages, --micro-batches
// dividing --batch (and a multiple of pp when interleaved), none of --moe, --save, --load, --record
// or a device other than cpu; with --elastic: --backend gloo, --mesh tp=N or dp=M,tp=N, none of --moe,
// --record or a device other than cpu; --save-every only with --save, --max-restarts only with
// --elastic; and an estimate of the memory the model needs against the machine's. Throws
// dtensor::Error naming the flag, its value and what is accepted. Any --seq is accepted with cp:
// uneven sequence chunks follow torch.chunk (15 over 4: 4,4,4,3), even where a rank gets none.
void validate_train_options(const TrainOptions& o);

// For benchmarks of uneven hardware: $DTENSOR_SLOW_RANK="R:MS" makes global rank R sleep MS
// milliseconds per local batch row every step (after its backward), emulating a slower device whose
// extra time grows with its share of the batch. It sleeps rather than spins so that, on a shared
// machine, the emulated device takes no CPU from the others. Unset or empty: rank -1 (none). Throws
// dtensor::Error naming the variable for a malformed value.
struct SlowRank {
  int64_t rank = -1;
  double ms_per_row = 0;
};
SlowRank slow_rank_from_env();

// The weights of --rank-weights for a mesh whose dp size is `dp` (0: no dp mesh dim). Empty for an
// empty spec. Throws dtensor::Error naming the flag for a weight that is not an integer in
// [1, kMaxShardWeight], a count other than dp, or weights without a dp mesh dim.
std::vector<int64_t> parse_rank_weights(const std::string& spec, int64_t dp);

// `--check` trains in float64 on the mesh and on one rank. The two runs compute the same function
// and differ only in summation order (sharded matmuls and all-reduces add in another order): about
// 1e-16 per step, grown by training's sensitivity to about 1e-13 over 400 steps. 1e-9 leaves room
// for that and none for a sharding bug (an inconsistent replica or a wrong rule moves the loss by
// 1e-3 or more). In float32 the same order effect alone reaches 1e-4 over 400 steps, which is why
// the check does not compare float32 runs.
inline constexpr double kCheckTolerance = 1e-9;

// Trains o's steps on one thread rank (float64, like the --check run) and returns the largest
// relative difference between `losses` (the sharded run's, per step) and the one-rank losses.
double max_relative_loss_difference(const TrainOptions& o, const std::vector<double>& losses);

// The next token of the sample `dtensor train` prints: drawn from softmax(logits / 0.8) with `rng`
// (every rank drawing from the same stream with the same logits picks the same token).
int64_t sample_token(const std::vector<double>& logits, std::mt19937_64& rng);

// Runs training on this rank (collective over the backend's world, whose size must equal the
// mesh's). Rank 0 writes progress to `log` (may be null).
TrainResult train_rank(std::shared_ptr<Backend> backend, const TrainOptions& o, std::ostream* log);

}  // namespace dtensor::tools
