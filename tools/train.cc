#include "tools/train.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/core/compute_threads.h"
#include "kernels/device_dispatch.h"
#include "nn/checkpoint.h"
#include "nn/data.h"
#include "nn/layers.h"
#include "nn/moe.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "propagation/hardware.h"
#include "tools/train_pipeline.h"

namespace dtensor::tools {

namespace {

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  std::ostringstream s;
  s << std::fixed << std::setprecision(u ? 1 : 0) << b << " " << unit[u];
  return s.str();
}

}  // namespace

std::vector<CommStats> dim_comm_stats(const DeviceMesh& mesh) {
  std::vector<CommStats> out;
  for (int d = 0; d < mesh.ndim(); ++d) out.push_back(mesh.group(d).stats());
  return out;
}

void add_dim_comm_since(const DeviceMesh& mesh, const std::vector<CommStats>& before, std::vector<CommStats>& sums) {
  for (int d = 0; d < mesh.ndim(); ++d) {
    const CommStats& now = mesh.group(d).stats();
    CommStats& sum = sums[d];
    sum.calls += now.calls - before[d].calls;
    sum.bytes_sent += now.bytes_sent - before[d].bytes_sent;
    for (int k = 0; k < kNumCommKinds; ++k) sum.calls_by_kind[k] += now.calls_by_kind[k] - before[d].calls_by_kind[k];
  }
}

nn::GPTConfig gpt_config(const TrainOptions& o, int64_t vocab) {
  nn::GPTConfig cfg;
  cfg.vocab = vocab;
  cfg.seq = o.seq;
  cfg.dim = o.dim;
  cfg.heads = o.heads;
  cfg.layers = o.layers;
  cfg.seed = o.seed;
  cfg.experts = o.experts;
  cfg.top_k = o.top_k;
  return cfg;
}

void parse_mesh(const std::string& spec, std::vector<int64_t>* sizes, std::vector<std::string>* names) {
  sizes->clear();
  names->clear();
  const char* forms =
      "accepted forms are tp=N, dp=M,tp=N, ep=M,tp=N, pp=P,tp=N, pp=P, cp=N, cp=M,tp=N or dp=L,cp=M,tp=N";
  int64_t world = 1;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    std::vector<std::string> kv = absl::StrSplit(part, '=');
    int64_t n = 0;
    DT_CHECK(kv.size() == 2 && (kv[0] == "dp" || kv[0] == "ep" || kv[0] == "cp" || kv[0] == "pp" || kv[0] == "tp") &&
                 absl::SimpleAtoi(kv[1], &n) && n >= 1,
             "--mesh '", spec, "': ", forms, " with positive sizes");
    DT_CHECK(n <= kMaxTrainRanks && world * n <= kMaxTrainRanks, "--mesh '", spec, "': ",
             "a world of more than ", kMaxTrainRanks, " ranks; accepted: at most ", kMaxTrainRanks,
             " ranks on one machine");
    world *= n;
    names->push_back(kv[0]);
    sizes->push_back(n);
  }
  // cp (pp) alone is cp=N,tp=1 (pp=P,tp=1): the model code always has a tp dim (of size 1 here,
  // where nothing is split).
  if (names->size() == 1 && (names->front() == "cp" || names->front() == "pp")) {
    names->push_back("tp");
    sizes->push_back(1);
  }
  const std::vector<std::string>& v = *names;
  const bool ok = !v.empty() && v.back() == "tp" &&
                  (v.size() == 1 || (v.size() == 2 && (v[0] == "dp" || v[0] == "ep" || v[0] == "cp" || v[0] == "pp")) ||
                   (v.size() == 3 && v[0] == "dp" && v[1] == "cp"));
  DT_CHECK(ok, "--mesh '", spec, "': ", forms);
}

std::vector<int64_t> parse_rank_weights(const std::string& spec, int64_t dp) {
  if (spec.empty()) return {};
  DT_CHECK(dp > 0, "--rank-weights '", spec, "': weights are per data-parallel rank; give a mesh with a "
           "dp dim (--mesh dp=M,tp=N)");
  std::vector<int64_t> w;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    int64_t v = 0;
    DT_CHECK(absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v) && v >= 1 && v <= kMaxShardWeight,
             "--rank-weights '", spec, "': '", part, "' is not accepted; each weight must be an integer from 1 to ",
             kMaxShardWeight);
    w.push_back(v);
  }
  DT_CHECK(static_cast<int64_t>(w.size()) == dp, "--rank-weights '", spec, "': ", w.size(),
           " weights for dp=", dp, "; give one weight per data-parallel rank");
  return w;
}

SlowRank slow_rank_from_env() {
  const char* env = std::getenv("DTENSOR_SLOW_RANK");
  if (env == nullptr || *env == 0) return {};
  std::vector<std::string> parts = absl::StrSplit(env, ':');
  SlowRank s;
  DT_CHECK(parts.size() == 2 && absl::SimpleAtoi(parts[0], &s.rank) && s.rank >= 0 &&
               absl::SimpleAtod(parts[1], &s.ms_per_row) && std::isfinite(s.ms_per_row) &&
               s.ms_per_row >= 0 && s.ms_per_row <= 1e4,
           "$DTENSOR_SLOW_RANK='", env, "': accepted: RANK:MS (a rank >= 0 and milliseconds per batch row, 0 to 10000)");
  return s;
}

int default_micro_batches(const TrainOptions& o) {
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  const int pp = names[0] == "pp" ? static_cast<int>(sizes[0]) : 1;
  for (int m : {2 * pp, pp})
    if (o.batch % m == 0) return m;
  return o.batch;
}

namespace {

// The pipeline's options (a pp mesh dim) and the flags it does not take.
void validate_pipeline_options(const TrainOptions& o, int64_t pp) {
  DT_CHECK(o.virtual_stages >= 1 && o.virtual_stages <= kMaxLayers, "--virtual-stages ", o.virtual_stages,
           ": accepted: 1 to ", kMaxLayers);
  DT_CHECK(o.micro_batches >= 0 && o.micro_batches <= kMaxBatch, "--micro-batches ", o.micro_batches,
           ": accepted: 1 to ", kMaxBatch);
  if (pp == 0) {
    DT_CHECK(o.micro_batches == 0 && o.virtual_stages == 1, "--micro-batches/--virtual-stages with --mesh ", o.mesh,
             ": they split a pipeline; accepted with a pp mesh dim (--mesh pp=P,tp=N)");
    return;
  }
  const int64_t chunks = pp * o.virtual_stages;
  DT_CHECK(o.layers % chunks == 0, "--layers ", o.layers, " over --mesh ", o.mesh, " with --virtual-stages ",
           o.virtual_stages, ": each of the ", chunks, " model chunks (pp x virtual stages) holds the same layers; "
           "accepted: --layers a multiple of ", chunks);
  const int m = o.micro_batches > 0 ? o.micro_batches : default_micro_batches(o);
  DT_CHECK(o.batch % m == 0, "--micro-batches ", m, " with --batch ", o.batch,
           ": accepted: a number of micro-batches that divides the batch");
  DT_CHECK(o.virtual_stages == 1 || m % pp == 0, "--micro-batches ", m, " with --virtual-stages ", o.virtual_stages,
           " over pp=", pp, ": interleaved 1F1B runs micro-batches in groups of pp; accepted: a multiple of ", pp);
  const char* off = o.experts > 0         ? "--moe"
                    : !o.save.empty()     ? "--save"
                    : !o.load.empty()     ? "--load"
                    : !o.record.empty()   ? "--record"
                    : o.device != "cpu"   ? "--device"
                                          : nullptr;
  DT_CHECK(off == nullptr, "--mesh ", o.mesh, " with ", off ? off : "",
           ": not supported with a pp mesh dim; accepted with pp: the dense GPT on --device cpu, without "
           "checkpoints or a record");
}

}  // namespace

void validate_train_options(const TrainOptions& o) {
  slow_rank_from_env();  // a malformed value is a usage error before any rank starts
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  const auto weights = parse_rank_weights(o.rank_weights, names[0] == "dp" ? sizes[0] : 0);
  validate_pipeline_options(o, names[0] == "pp" ? sizes[0] : 0);
  if (!weights.empty()) {
    int64_t total = 0, low = weights[0];
    for (int64_t x : weights) total += x, low = std::min(low, x);
    // Every dp rank needs at least one row: the smallest share of the batch must round to >= 1.
    DT_CHECK(o.batch * low >= total, "--rank-weights ", o.rank_weights, " with --batch ", o.batch,
             ": the lightest rank would get no rows (", o.batch, " * ", low, " / ", total,
             " < 1); raise --batch or the weight");
  }
  DT_CHECK(o.backend == "threads" || o.backend == "gloo" || o.backend == "nccl", "--backend '", o.backend,
           "': accepted: threads, gloo, nccl");
  // NCCL moves device memory only, and each process owns the GPU of its local rank.
  DT_CHECK(o.backend != "nccl" || o.device == "cuda", "--backend nccl --device ", o.device,
           ": NCCL ranks are processes, each on the GPU of its local rank; accepted with --backend nccl: "
           "--device cuda");
  if (!o.hardware.empty()) hardware_profile(o.hardware);  // throws naming the known profiles
  auto in_range = [](const char* flag, int64_t v, int64_t lo, int64_t hi) {
    DT_CHECK(v >= lo && v <= hi, flag, " ", v, ": accepted: ", lo, " to ", hi);
  };
  in_range("--steps", o.steps, 1, kMaxSteps);
  in_range("--batch", o.batch, 1, kMaxBatch);
  in_range("--seq", o.seq, 1, kMaxSeq);
  in_range("--dim", o.dim, 1, kMaxDim);
  in_range("--layers", o.layers, 1, kMaxLayers);
  in_range("--heads", o.heads, 1, o.dim);
  in_range("--log-every", o.log_every, 1, kMaxSteps);
  in_range("--sample", o.sample_chars, 0, kMaxSample);
  DT_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr ", o.lr, ": accepted: a finite number > 0");
  DT_CHECK(o.dim % o.heads == 0, "--dim ", o.dim, " must be a multiple of --heads ", o.heads);
  if (names.front() == "ep")
    DT_CHECK(o.experts > 0, "--mesh ", o.mesh, ": an ep dim needs --moe (experts to shard)");
  if (o.experts > 0) {
    in_range("--top-k", o.top_k, 1, o.experts);
    DT_CHECK(names.front() != "ep" || (o.experts % sizes.front() == 0 && o.batch % sizes.front() == 0), "--mesh ",
             o.mesh, ": ep=", sizes.front(), " must divide --experts (", o.experts, ") and --batch (", o.batch, ")");
  }
  const auto cp_at = std::find(names.begin(), names.end(), "cp");
  DT_CHECK(!o.context_parallel || cp_at != names.end(), "--context-parallel --mesh ", o.mesh,
           ": context parallel splits the sequence over a cp mesh dim; accepted: --mesh cp=N, cp=M,tp=N or "
           "dp=L,cp=M,tp=N");
  if (cp_at != names.end()) {
    // Not tried: routing tokens to experts from sequence shards (nn/moe.h expects batch rows).
    DT_CHECK(o.experts == 0, "--mesh ", o.mesh, " --moe ", o.experts,
             ": context parallel with mixture-of-experts blocks is not supported; accepted: a cp dim or --moe");
  }
  DT_CHECK(o.save_every >= 0 && o.save_every <= kMaxSteps, "--save-every ", o.save_every, ": accepted: 1 to ",
           kMaxSteps);
  DT_CHECK(o.save_every == 0 || !o.save.empty(), "--save-every ", o.save_every,
           " without --save: accepted with --save DIR (the checkpoint directory it writes)");
  DT_CHECK(o.max_restarts >= 0 && o.max_restarts <= 100, "--max-restarts ", o.max_restarts, ": accepted: 0 to 100");
  DT_CHECK(o.max_restarts == 0 || o.elastic, "--max-restarts ", o.max_restarts,
           " without --elastic: a restarted rank can only rejoin an elastic run; accepted with --elastic");
  if (o.elastic) {
    // What tools/train_elastic.h rebuilds: the dense GPT's parameters and AdamW state over dp and tp.
    DT_CHECK(o.backend == "gloo", "--elastic --backend ", o.backend,
             ": an elastic run survives a lost process; accepted with --elastic: --backend gloo");
    DT_CHECK(names.size() == 1 || (names.size() == 2 && names[0] == "dp"), "--elastic --mesh ", o.mesh,
             ": accepted with --elastic: --mesh tp=N or dp=M,tp=N (no pp, cp or ep dim)");
    DT_CHECK(o.experts == 0 && o.record.empty() && o.device == "cpu", "--elastic",
             o.experts > 0 ? " --moe" : "", !o.record.empty() ? " --record" : "",
             o.device != "cpu" ? " --device " + o.device : std::string(),
             ": not supported; accepted with --elastic: the dense GPT on --device cpu, without --record");
  }
  const int64_t tp = sizes.back();
  DT_CHECK(o.heads % tp == 0 && o.dim % tp == 0, "--mesh ", o.mesh, ": tp=", tp, " must divide --heads (",
           o.heads, ") and --dim (", o.dim, ")");
  // A rough upper bound of what one process holds (all ranks of the threads backend live in it):
  // weights, gradients and two AdamW moments, the tape's activations, and the attention scores.
  // Expert weights (E experts of 8 dim^2 each per layer, where a dense layer holds one) cost more:
  // each rank first builds the whole model, and grouped_mm's backward keeps per-expert copies;
  // measured on --dim 512 with 8 and 32 experts: 35 bytes per expert parameter with two ranks in
  // the process, 50 with four, i.e. about 4 (5 + 2 ranks) bytes.
  const double d2 = 1.0 * o.dim * o.dim;
  int64_t world = 1;
  for (int64_t n : sizes) world *= n;
  const double ranks_here = o.backend == "threads" ? static_cast<double>(world) : 1.0;
  const double expert_params = o.experts > 0 ? 8.0 * d2 * o.experts * o.layers : 0.0;
  const double params = o.layers * (4.0 * d2 + (o.experts > 0 ? 1.0 * o.experts * o.dim : 8.0 * d2)) +
                        2.0 * 256 * o.dim + 1.0 * o.seq * o.dim;
  const double moe_acts = o.experts > 0 ? 1.0 * o.top_k * (16.0 * o.dim + o.experts) : 0.0;
  const double acts = 1.0 * o.batch * o.seq * o.layers * (24.0 * o.dim + 3.0 * o.heads * o.seq + moe_acts);
  const double need = (4.0 * (4.0 * params + acts) + expert_params * 4.0 * (5.0 + 2.0 * ranks_here)) *
                      (o.backend == "threads" ? 1.0 : 1.0 / sizes.back());
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  DT_CHECK(have <= 0 || need <= have, "the model (--dim ", o.dim, ", --layers ", o.layers, ", --seq ", o.seq,
           ", --batch ", o.batch, o.experts > 0 ? absl::StrCat(", --moe ", o.experts) : "", ") needs about ",
           human_bytes(need), " of memory; this machine has ", human_bytes(have));
}


namespace {

// N for "cuda:N", -1 for "cpu" and "cuda"; throws naming what is accepted for any other spelling.
// N is bounded so that it fits Device's int index (cuda:4294967296 must not wrap to cuda:0).
int64_t spelled_index(const std::string& spec) {
  constexpr int64_t kMaxDeviceIndex = (int64_t{1} << 16) - 1;
  int64_t index = -1;
  DT_CHECK(spec == "cpu" || spec == "cuda" ||
               (spec.rfind("cuda:", 0) == 0 && absl::SimpleAtoi(spec.substr(5), &index) && index >= 0 &&
                index <= kMaxDeviceIndex),
           "--device '", spec, "': accepted: cpu, cuda, cuda:N with 0 <= N <= ", kMaxDeviceIndex);
  return index;
}

}  // namespace

void check_device_spelling(const std::string& spec) { spelled_index(spec); }

Device parse_device(const std::string& spec, const std::string& backend) {
  int64_t index = spelled_index(spec);
  if (spec == "cpu") return cpu();
  if (spec == "cuda") {
    // Thread ranks share one GPU; process ranks take the GPU of their local rank.
    index = 0;
    const char* lr = std::getenv("LOCAL_RANK");
    if (backend != "threads" && lr != nullptr) DT_CHECK(absl::SimpleAtoi(lr, &index), "LOCAL_RANK='", lr, "'");
  }
  DT_CHECK(Storage::has_allocator(DeviceType::kCUDA), "--device ", spec,
           ": this dtensor was built without CUDA (no toolkit at build time, or --define=cuda=off); "
           "accepted here: cpu");
  return Device{DeviceType::kCUDA, static_cast<int>(index)};
}

TrainResult train_rank(std::shared_ptr<Backend> backend, const TrainOptions& o, std::ostream* log) {
  const Device device = parse_device(o.device, backend->kind());
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  if (names[0] == "pp") {
    TrainResult pr = train_pipeline_rank(backend, o, log);
    pr.lead = backend->rank() == 0;
    return pr;
  }
  Shape shape(sizes.begin(), sizes.end());
  DT_CHECK(numel(shape) == backend->world_size(), "dtensor train: mesh ", o.mesh, " needs ", numel(shape),
           " ranks, the world has ", backend->world_size());
  // Every rank writes its shard at the end: find an unwritable --save now, not after the run.
  if (!o.save.empty()) {
    const std::string why = nn::checkpoint_dir_write_error(o.save);
    DT_CHECK(why.empty(), "dtensor train: --save ", o.save, ": cannot write: ", why);
  }
  if (!o.record.empty()) {
    const std::string why = nn::checkpoint_dir_write_error(o.record + "/init");
    DT_CHECK(why.empty(), "dtensor train: --record ", o.record, ": cannot write: ", why);
  }
  auto mesh = DeviceMesh::create(backend, shape, names);
  const int tp = mesh->dim_index("tp");
  const bool context_parallel = std::find(names.begin(), names.end(), "cp") != names.end();
  const bool lead = backend->rank() == 0;
  std::ostream* out = lead ? log : nullptr;

  nn::CharDataset data = nn::CharDataset::from_file(o.text, o.seq + 2);
  const nn::GPTConfig cfg = gpt_config(o, data.vocab());
  DT_CHECK(o.heads % sizes.back() == 0 && o.dim % sizes.back() == 0, "dtensor train: tp=", sizes.back(),
           " must divide heads (", o.heads, ") and dim (", o.dim, ")");
  nn::GPT model(cfg);
  // --check compares with one rank in float64, where only summation order separates the two runs.
  const DType dtype = o.check ? DType::kFloat64 : DType::kFloat32;
  nn::parallelize(model, mesh,
                  o.experts > 0 ? nn::moe_plan(o.sequence_parallel, o.loss_parallel)
                                : nn::megatron_plan(o.sequence_parallel, o.loss_parallel),
                  tp, dtype, device);
  nn::AdamW opt(model.named_parameters(), {o.lr});
  int64_t start_step = 0;
  nn::NamedTensors state = model.named_parameters();
  for (auto& s : opt.state()) state.push_back(s);
  if (!o.load.empty()) {
    start_step = nn::load_checkpoint(o.load, state);
    opt.set_steps(start_step);
  }
  if (out) {
    *out << "dtensor train: GPT " << o.layers << " layers, dim " << o.dim << ", " << o.heads << " heads, vocab "
         << cfg.vocab << (o.experts > 0 ? absl::StrCat(", ", o.experts, " experts (top-", o.top_k, ")") : "")
         << ", seq " << o.seq << ", batch " << o.batch << ", " << dtype_name(dtype) << "; mesh "
         << o.mesh << " ("
         << backend->kind() << " backend, " << device.str() << (o.sequence_parallel ? ", sequence parallel" : "")
         << (o.loss_parallel ? ", loss parallel" : "")
         << (context_parallel ? ", context parallel" : "") << "; " << blas_threads()
         << " compute thread(s) per rank)\n";
    *out << "text: " << o.text << " (" << data.size() << " characters)\n";
    *out << "parallel plan (parameter, global shape, placements over [" << absl::StrJoin(names, ", ") << "], style):\n";
    for (auto& [path, m] : model.named_modules())
      for (auto& [pn, p] : m->named_parameters())
        if (pn.find('.') == std::string::npos)
          *out << "  " << std::left << std::setw(32) << (path.empty() ? pn : path + "." + pn) << std::setw(12)
               << shape_str(p->shape()) << std::setw(14) << placements_str(p->placements())
               << (m->style() ? m->style()->str() : "replicated") << "\n";
  }
  std::ofstream trace;
  if (!o.record.empty()) {
    nn::save_checkpoint(o.record + "/init", state, start_step);  // collective: every rank
    if (lead) {
      trace.open(o.record + "/steps.jsonl", std::ios::trunc);
      DT_CHECK(trace.good(), "dtensor train: --record: cannot write ", o.record, "/steps.jsonl");
    }
  }
  Placements data_pl(mesh->ndim(), Replicate());
  if (names[0] == "dp" || names[0] == "ep") {
    // Batch rows by weight. The placement's weights are the row counts themselves, which split the
    // batch exactly, so the views that merge batch and sequence carry them (propagation needs an
    // exact split there) and no activation is re-split.
    const std::vector<int64_t> w = parse_rank_weights(o.rank_weights, sizes[0]);
    std::vector<int64_t> rows(w.size());
    for (size_t r = 0; r < w.size(); ++r) rows[r] = weighted_range(o.batch, w, static_cast<int64_t>(r)).second;
    data_pl[0] = rows.empty() ? Shard(0) : Shard(0, rows);
  }
  // Context parallel: token ids and targets split on the sequence dim; the model's positions, its
  // activations and attention's query/key/value follow (ring attention), the loss sums per rank.
  if (context_parallel) data_pl[mesh->dim_index("cp")] = Shard(1);
  const SlowRank slow = slow_rank_from_env();
  TrainResult r;
  r.lead = lead;
  r.comm_by_dim.resize(mesh->ndim());
  double seconds = 0;
  int64_t bytes = 0;
  for (int s = 0; s < o.steps; ++s) {
    const int64_t step = start_step + s;
    auto t0 = std::chrono::steady_clock::now();
    CommStats before = mesh->stats();
    const std::vector<CommStats> dim_before = dim_comm_stats(*mesh);
    Tensor host_tok = data.batch(o.batch, o.seq, o.seed * 7919 + static_cast<uint64_t>(step));
    Tensor tok = host_tok.to(device);
    DTensor x = distribute_tensor(tok.narrow(1, 0, o.seq).contiguous(), mesh, data_pl);
    DTensor y = distribute_tensor(tok.narrow(1, 1, o.seq).contiguous(), mesh, data_pl);
    DTensor loss = nn::GPT::loss(model(x), y);
    if (auto aux = model.aux_loss()) loss = F::add(loss, F::mul(*aux, o.moe_aux_coef));
    backward(loss);
    if (slow.rank == backend->rank() && slow.ms_per_row > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow.ms_per_row * x.local_tensor().size(0)));
    opt.step();
    opt.zero_grad();
    double l = loss.full_tensor().item();
    CommStats after = mesh->stats();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes += after.bytes_sent - before.bytes_sent;
    add_dim_comm_since(*mesh, dim_before, r.comm_by_dim);
    r.losses.push_back(l);
    if (trace.is_open()) {  // outside the timed span: recording does not slow the figures down
      std::vector<int64_t> ids = host_tok.to_vector<int64_t>();
      trace << "{\"step\": " << step + 1 << ", \"loss\": " << absl::StrFormat("%.17g", l) << ", \"tokens\": [";
      for (size_t i = 0; i < ids.size(); ++i)
        trace << (i % (o.seq + 1) == 0 ? (i ? "], [" : "[") : ", ") << ids[i];
      trace << "]]}\n";
    }
    if (o.save_every > 0 && (s + 1) % o.save_every == 0 && s + 1 < o.steps)
      nn::save_checkpoint(o.save, state, step + 1);  // collective: every rank
    if (out && (s % o.log_every == 0 || s + 1 == o.steps))
      *out << "step " << std::setw(4) << step + 1 << "  loss " << std::fixed << std::setprecision(4) << l
           << "  tokens/s " << std::setprecision(0) << (s + 1) * o.batch * o.seq / seconds << "  comm "
           << human_bytes(static_cast<double>(bytes) / (s + 1)) << "/step\n";
  }
  r.tokens_per_s = o.steps > 0 ? o.steps * o.batch * o.seq / seconds : 0;
  r.bytes_per_step = o.steps > 0 ? bytes / o.steps : 0;
  if (out)
    *out << "done: " << o.steps << " steps, " << std::setprecision(0) << r.tokens_per_s << " tokens/s, "
         << r.bytes_per_step << " bytes sent per step by rank 0, final loss " << std::setprecision(4)
         << (r.losses.empty() ? 0.0 : r.losses.back()) << "\n";
  if (out && !device.is_cpu()) {
    // What left the device: kernel functions without a CUDA version, distributed steps.
    std::vector<std::string> parts;
    for (auto& [name, n] : kernels::host_fallback_counts()) parts.push_back(absl::StrCat(name, " x", n));
    // Counted per process: every thread rank's, or rank 0's own when ranks are processes.
    *out << "host fallbacks (" << (backend->kind() == "threads" ? "all ranks" : "rank 0") << "): " << (parts.empty() ? "none" : absl::StrJoin(parts, ", ")) << "\n";
  }
  if (trace.is_open()) {
    trace.close();
    DT_CHECK(!trace.fail(), "dtensor train: --record: writing ", o.record, "/steps.jsonl failed");
  }
  if (!o.save.empty()) {
    nn::save_checkpoint(o.save, state, start_step + o.steps);
    if (out) *out << "checkpoint written to " << o.save << "\n";
  }
  // Sample text: temperature 0.8, the same random stream on every rank (the logits are replicated).
  if (o.sample_chars > 0) {
    NoGradGuard ng;
    std::vector<int64_t> ctx = data.encode("GNU ");
    std::mt19937_64 rng(o.seed);
    Placements rep(mesh->ndim(), Replicate());
    for (int i = 0; i < o.sample_chars; ++i) {
      int64_t n = std::min<int64_t>(static_cast<int64_t>(ctx.size()), o.seq);
      std::vector<int64_t> window(ctx.end() - n, ctx.end());
      DTensor ids = distribute_tensor(Tensor::from_vector(window, {1, n}).to(device), mesh, rep);
      ctx.push_back(sample_token(model(ids).full_tensor().select(0, 0).select(0, n - 1).to_vector<double>(), rng));
    }
    r.sample = data.decode(ctx);
    if (out) *out << "sample: " << r.sample << "\n";
  }
  return r;
}

int64_t sample_token(const std::vector<double>& logits, std::mt19937_64& rng) {
  double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
  std::vector<double> p(logits.size());
  for (size_t k = 0; k < p.size(); ++k) z += p[k] = std::exp((logits[k] - mx) / 0.8);
  double u = std::uniform_real_distribution<double>(0, z)(rng);
  size_t pick = 0;
  for (; pick + 1 < p.size() && u > p[pick]; ++pick) u -= p[pick];
  return static_cast<int64_t>(pick);
}

double max_relative_loss_difference(const TrainOptions& o, const std::vector<double>& losses) {
  TrainOptions one = o;
  one.mesh = "tp=1";
  one.micro_batches = 0;  // the whole batch at once: the pipeline's micro-batch losses average to its loss
  one.virtual_stages = 1;
  one.rank_weights.clear();
  one.elastic = false;  // the reference is the plain loop on one rank
  one.save_every = 0;
  one.check = true;  // float64, as the run it is compared with
  one.sample_chars = 0;
  one.save.clear();
  one.record.clear();  // the record is the sharded run's
  TrainResult ref;
  run_threads(1, [&](std::shared_ptr<Backend> b) { ref = train_rank(b, one, nullptr); });
  DT_CHECK(ref.losses.size() == losses.size(), "train --check: ", losses.size(), " losses against ",
           ref.losses.size(), " steps on one rank");
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const double d = std::abs(losses[i] - ref.losses[i]) / std::max(1e-12, std::abs(ref.losses[i]));
    worst = std::max(worst, std::isnan(d) ? HUGE_VAL : d);
  }
  return worst;
}

}  // namespace dtensor::tools
