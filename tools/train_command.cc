// `dtensor train`: see tools/train.h. Threads by default; with --backend gloo or nccl and no RANK in
// the environment it launches itself on the mesh's number of local processes (NCCL: one per GPU,
// rank r on cuda:LOCAL_RANK).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dtensor/collectives/env.h"
#include "dtensor/core/compute_threads.h"
#include "dtensor/collectives/threads_backend.h"
#include "propagation/hardware.h"
#include "tools/launcher.h"
#include "tools/subcommands.h"
#include "tools/train.h"
#include "tools/train_elastic.h"
#ifdef DTENSOR_HAVE_NCCL
#include "dtensor/collectives/nccl_backend.h"
#include "dtensor/core/cuda/cuda_util.h"
#endif

namespace dtensor::tools {
namespace {

int world_of(const TrainOptions& o) {
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);  // at most kMaxTrainRanks ranks: the product fits
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return static_cast<int>(n);
}

std::vector<std::string> argv_of(const TrainOptions& o) {
  std::vector<std::string> a = {"/proc/self/exe", "train", "--backend", o.backend, "--mesh", o.mesh, "--text", o.text,
                                "--steps", std::to_string(o.steps), "--batch", std::to_string(o.batch),
                                "--seq", std::to_string(o.seq), "--dim", std::to_string(o.dim), "--layers",
                                std::to_string(o.layers), "--heads", std::to_string(o.heads), "--lr",
                                absl::StrFormat("%.17g", o.lr), "--sample", std::to_string(o.sample_chars), "--log-every",
                                std::to_string(o.log_every), "--seed", std::to_string(o.seed), "--device", o.device};
  if (o.timeout_s > 0) a.insert(a.end(), {"--timeout", absl::StrFormat("%.17g", o.timeout_s)});
  if (o.threads > 0) a.insert(a.end(), {"--threads", std::to_string(o.threads)});
  if (!o.hardware.empty()) a.insert(a.end(), {"--hardware", o.hardware});
  if (o.sequence_parallel) a.push_back("--sequence-parallel");
  if (o.loss_parallel) a.push_back("--loss-parallel");
  if (o.context_parallel) a.push_back("--context-parallel");
  if (o.experts > 0)
    a.insert(a.end(), {"--moe", std::to_string(o.experts), "--top-k", std::to_string(o.top_k), "--moe-aux-coef",
                       absl::StrFormat("%.17g", o.moe_aux_coef)});
  if (o.micro_batches > 0) a.insert(a.end(), {"--micro-batches", std::to_string(o.micro_batches)});
  if (o.virtual_stages != 1) a.insert(a.end(), {"--virtual-stages", std::to_string(o.virtual_stages)});
  if (o.check) a.push_back("--check");
  if (!o.rank_weights.empty()) a.insert(a.end(), {"--rank-weights", o.rank_weights});
  if (!o.save.empty()) a.insert(a.end(), {"--save", o.save});
  if (!o.load.empty()) a.insert(a.end(), {"--load", o.load});
  if (!o.record.empty()) a.insert(a.end(), {"--record", o.record});
  if (o.elastic) a.push_back("--elastic");
  if (o.save_every > 0) a.insert(a.end(), {"--save-every", std::to_string(o.save_every)});
  if (o.max_restarts > 0) a.insert(a.end(), {"--max-restarts", std::to_string(o.max_restarts)});
  return a;
}

// NCCL runs one process per GPU of this machine: says why that cannot be, before any rank starts
// (exit 1, a runtime condition, not a usage error).
void check_nccl_possible(const TrainOptions& o, int world) {
#ifdef DTENSOR_HAVE_NCCL
  const int gpus = cuda::device_count();
  DT_CHECK(gpus >= world, "dtensor train --backend nccl: the mesh ", o.mesh, " has ", world,
           " rank(s), one process per GPU, and this machine has ", gpus, " GPU(s)",
           gpus == 0 ? " (" + cuda::unavailable_reason() + ")" : std::string(), "; accepted: ",
           gpus == 0 ? std::string() : absl::StrCat("a mesh of at most ", gpus, " rank(s), or "),
           "--backend threads or gloo");
#else
  (void)o;
  (void)world;
  DT_FAIL("dtensor train --backend nccl: this dtensor was built without CUDA and NCCL (no toolkit at build "
          "time, or --define=cuda=off); accepted here: --backend threads, gloo");
#endif
}

std::shared_ptr<Backend> init_rank_backend(const TrainOptions& o, Timeout start) {
#ifdef DTENSOR_HAVE_NCCL
  if (o.backend == "nccl") return init_nccl_backend_from_env(start);
#endif
  if (o.backend == "nccl") check_nccl_possible(o, 1);  // throws: no NCCL in this build
  return init_backend_from_env(start);
}

// Trains the same steps on one rank and reports the largest loss difference (tools/train.h).
// A pipeline's run also compared its first step's gradients (TrainResult::gradient_difference).
void check_against_one_rank(const TrainOptions& o, const TrainResult& r) {
  const std::vector<double>& losses = r.losses;
  const double worst = max_relative_loss_difference(o, losses);
  const bool ok = worst <= kCheckTolerance;
  std::cout << "check: largest relative loss difference against one rank over " << losses.size()
            << " steps (float64): " << std::scientific << std::setprecision(2) << worst << std::defaultfloat
            << (ok ? " (ok)" : " (TOO LARGE: above 1e-9; the sharded run computes another function)") << "\n";
  // The gradient line (rank 0's, printed by the pipeline) says how far they were.
  if (!ok || r.gradient_difference > kCheckTolerance) throw CLI::RuntimeError(1);
}

void run_train(const TrainOptions& o) {
  try {
    validate_train_options(o);
  } catch (const Error& e) {  // a flag value that is not accepted: a usage error (exit 2)
    throw CLI::ValidationError("train", e.what());
  }
  if (o.timeout_s > 0) set_default_timeout(Timeout(std::max<int64_t>(1, std::llround(o.timeout_s * 1000))));
  default_timeout();  // a malformed $DTENSOR_TIMEOUT is found here, before any rank starts
  if (!o.hardware.empty()) set_default_hardware(hardware_profile(o.hardware));
  const int world = world_of(o);
  // Thread ranks share this process's cores; process ranks get theirs from the launcher's
  // OPENBLAS_NUM_THREADS (tools/launcher.h) unless --threads says otherwise.
  if (o.threads > 0) {
    set_blas_threads(o.threads);
  } else if (o.backend == "threads" && compute_threads_from_env() == 0) {
    set_blas_threads(threads_per_rank(world));
  }
  if (o.backend == "threads") {
    TrainResult r;
    run_threads(world, [&](std::shared_ptr<Backend> b) {
      TrainResult mine = train_rank(b, o, &std::cout);
      if (b->rank() == 0) r = mine;
    });
    if (o.check) check_against_one_rank(o, r);
    return;
  }
  if (std::getenv("RANK") == nullptr) {
    if (o.backend == "nccl") check_nccl_possible(o, world);
    LaunchOptions lo;
    lo.nprocs = world;
    lo.command = argv_of(o);
    // A rank that fails first is often not the one that knows why (a peer that died is seen by the
    // survivors): give them 2 s to report it before they are terminated.
    lo.failure_grace = std::chrono::seconds(2);
    if (o.elastic) {
      // The survivors of a lost rank go on: no rank is terminated for another's failure. The job
      // succeeds when the ranks that were not killed by a signal all exit 0 (and one did).
      lo.failure_grace = std::chrono::hours(24 * 365);
      lo.max_restarts = o.max_restarts;
      LaunchResult lr = run_ranks(lo);
      int status = 0, ok = 0;
      for (const RankExit& x : lr.ranks) {
        if (x.signal != 0) continue;
        if (x.exit_code == 0) ++ok;
        else if (status == 0) status = x.exit_code;
      }
      if (lr.timed_out || lr.interrupted) status = lr.status;
      if (status == 0 && ok == 0) status = 1;
      if (status != 0) throw CLI::RuntimeError(status);
      return;
    }
    int status = launch(lo);
    if (status != 0) throw CLI::RuntimeError(status);
    return;
  }
  // Starting processes can take a while on a loaded machine: the start waits at least 30 s.
  auto backend = init_rank_backend(o, std::max<Timeout>(default_timeout(), std::chrono::seconds(30)));
  TrainResult r = o.elastic ? train_elastic_rank(backend, o, &std::cout) : train_rank(backend, o, &std::cout);
  std::cout.flush();
  if (o.check && r.lead) check_against_one_rank(o, r);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* sub = app.add_subcommand("train", "Train a character-level GPT with tensor parallelism on a text file");
  sub->add_option("--mesh", o->mesh, "tp=N, dp=M,tp=N, ep=M,tp=N (ep: with --moe), pp=P,tp=N (pipeline stages), cp=N, cp=M,tp=N or dp=L,cp=M,tp=N (cp: context parallel)")->capture_default_str();
  sub->add_option("--micro-batches", o->micro_batches,
                  "with a pp mesh dim: micro-batches per step, a divisor of --batch (default: 2 per stage where "
                  "that divides the batch)")
      ->check(CLI::Range(1, kMaxBatch));
  sub->add_option("--virtual-stages", o->virtual_stages,
                  "with a pp mesh dim: model chunks per rank; > 1 runs interleaved 1F1B (--layers a multiple of "
                  "pp x this, --micro-batches a multiple of pp)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxLayers));
  sub->add_option("--backend", o->backend, "threads (ranks as threads), gloo (ranks as processes) or nccl (one process per GPU, "
                                      "with --device cuda; needs a CUDA build)")
      ->capture_default_str()
      ->check(CLI::IsMember({"threads", "gloo", "nccl"}));
  sub->add_option("--text", o->text, "training text")->capture_default_str()->check(CLI::ExistingFile);
  // Ranges and divisibility are checked together by validate_train_options (tools/train.h).
  sub->add_option("--steps", o->steps)->capture_default_str()->check(CLI::Range(1, kMaxSteps));
  sub->add_option("--batch", o->batch)->capture_default_str()->check(CLI::Range(1, kMaxBatch));
  sub->add_option("--seq", o->seq)->capture_default_str()->check(CLI::Range(1, kMaxSeq));
  sub->add_option("--dim", o->dim)->capture_default_str()->check(CLI::Range(1, kMaxDim));
  sub->add_option("--layers", o->layers)->capture_default_str()->check(CLI::Range(1, kMaxLayers));
  sub->add_option("--heads", o->heads)->capture_default_str()->check(CLI::Range(1, kMaxDim));
  sub->add_option("--lr", o->lr)->capture_default_str()->check(kPositiveFinite);
  sub->add_option("--sample", o->sample_chars, "characters to sample at the end")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxSample));
  sub->add_option("--log-every", o->log_every)->capture_default_str()->check(CLI::Range(1, kMaxSteps));
  sub->add_option("--seed", o->seed)->capture_default_str();
  sub->add_option("--rank-weights", o->rank_weights,
                  "data-parallel batch shares, one positive integer weight per dp rank (e.g. 3,1): "
                  "the batch is sharded S(0)[3:1] so faster ranks take more rows");
  sub->add_option("--save", o->save, "write a sharded checkpoint to this directory at the end");
  sub->add_option("--load", o->load, "start from a checkpoint (saved on any mesh)");
  sub->add_option("--save-every", o->save_every, "with --save: also write the checkpoint every N steps")
      ->check(CLI::Range(1, kMaxSteps));
  sub->add_option("--max-restarts", o->max_restarts,
                  "with --elastic: restart a failed rank's process up to N times; it rejoins at a step boundary "
                  "and the run returns to the launch mesh")
      ->check(CLI::Range(0, 100));
  sub->add_flag("--elastic", o->elastic,
                "Gloo processes, --mesh tp=N or dp=M,tp=N: when a rank dies or stops, the survivors agree on a "
                "new membership, re-plan the mesh, rebuild the state from the surviving replicas (else the last "
                "--save checkpoint) and redo the failed step (docs/ELASTIC.md)");
  sub->add_option("--record", o->record,
                  "write the initial checkpoint (DIR/init) and each step's batch and loss (DIR/steps.jsonl), "
                  "to replay the run elsewhere (bench/train_vs_torch.py)");
  sub->add_option("--hardware", o->hardware,
                  "cost-model hardware profile: a name (dtensor plan --list-hardware) or a JSON file (dtensor "
                  "calibrate --out); default h100-nvlink");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N (needs a CUDA build and a GPU; --backend nccl: cuda, each rank "
                                            "on cuda:LOCAL_RANK)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {  // the spelling; whether the device exists is checked at start
            try {
              check_device_spelling(s);
            } catch (const Error& e) {
              return e.what();
            }
            return {};
          },
          "DEVICE"));
  sub->add_option("--timeout", o->timeout_s,
                  "collective timeout in seconds: a stopped or lost rank is reported within it "
                  "(default: $DTENSOR_TIMEOUT, else 300)")
      ->check(kPositiveFinite & CLI::Range(0.0, 86400.0));
  sub->add_option("--threads", o->threads,
                  "compute (BLAS) threads per rank (default: $OPENBLAS_NUM_THREADS or $OMP_NUM_THREADS, "
                  "else the cores divided by the ranks on this machine)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--moe", o->experts,
                  "mixture of experts: this many experts per block, sharded over the ep mesh dim (0: dense MLP)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  sub->add_option("--top-k", o->top_k, "experts per token with --moe")->capture_default_str()->check(CLI::Range(1, 256));
  sub->add_option("--moe-aux-coef", o->moe_aux_coef, "weight of the load-balancing loss with --moe")
      ->capture_default_str()
      ->check(kFinite & CLI::Range(0.0, 1.0));
  sub->add_flag("--sequence-parallel", o->sequence_parallel, "Megatron sequence parallelism");
  sub->add_flag("--loss-parallel", o->loss_parallel, "cross-entropy over vocabulary-sharded logits");
  sub->add_flag("--context-parallel", o->context_parallel,
                "sequence split over the mesh's cp dim, attention by ring attention (on with any cp dim; "
                "this flag requires one)");
  sub->add_flag("--check", o->check,
                "train in float64, also on one rank, and fail if a step's loss differs by more than 1e-9 (relative)");
  sub->callback([o] { run_train(*o); });
}

}  // namespace dtensor::tools
