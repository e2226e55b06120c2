#include "tools/train_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dtensor/core/compute_threads.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/dtensor_spec.h"
#include "nn/data.h"
#include "nn/optim.h"
#include "nn/pipeline_schedule.h"
#include "planner/pipeline.h"

namespace dtensor::tools {

PipelineGPT::PipelineGPT(MeshPtr mesh, const nn::GPTConfig& cfg, bool sequence_parallel, bool loss_parallel,
                         DType dtype, Device device, int micro_batches, int virtual_stages)
    : mesh_(std::move(mesh)),
      stages_(static_cast<int>(mesh_->size(mesh_->dim_index("pp")))),
      virtual_stages_(virtual_stages),
      micro_batches_(micro_batches),
      sequence_parallel_(sequence_parallel),
      dtype_(dtype),
      device_(device) {
  const int chunks = stages_ * virtual_stages_;
  DT_CHECK(virtual_stages_ >= 1 && cfg.layers % chunks == 0, "pipeline: ", cfg.layers, " layers over pp=", stages_,
           " x ", virtual_stages_, " virtual stage(s); accepted: a layer count that is a multiple of ", chunks,
           " (every model chunk holds the same layers)");
  layers_per_chunk_ = static_cast<int>(cfg.layers / chunks);
  program_ = nn::pipeline_program(nn::pipeline_schedule(stages_, virtual_stages_, micro_batches_), stages_,
                                  virtual_stages_, micro_batches_);
  tp_mesh_ = mesh_->submesh({"tp"});
  model_ = std::make_unique<nn::GPT>(cfg);
  nn::parallelize(*model_, tp_mesh_, nn::megatron_plan(sequence_parallel, loss_parallel), 0, dtype, device);
  const int me = static_cast<int>(mesh_->coordinate(mesh_->dim_index("pp")));
  for (auto& [path, p] : model_->named_parameters()) {
    const int c = chunk_of(path);
    DT_CHECK(c >= 0, "pipeline: no chunk holds the parameter ", path);
    if (c % stages_ == me) owned_.emplace_back(path, p);
  }
}

int PipelineGPT::chunk_of(const std::string& path) const {
  const int chunks = stages_ * virtual_stages_;
  if (absl::StartsWith(path, "tok_emb.") || absl::StartsWith(path, "pos_emb.")) return 0;
  if (absl::StartsWith(path, "ln_f.") || absl::StartsWith(path, "lm_head.")) return chunks - 1;
  int64_t layer = -1;
  if (absl::StartsWith(path, "blocks.")) {
    const std::string rest = path.substr(7);
    layer = std::stoll(rest.substr(0, rest.find('.')));
  }
  return layer < 0 ? -1 : static_cast<int>(layer / layers_per_chunk_);
}

double PipelineGPT::forward_backward(const Tensor& tokens, nn::PipelineStepTimes* times) {
  const int64_t B = tokens.size(0), T = tokens.size(1) - 1;
  DT_CHECK(B % micro_batches_ == 0, "pipeline: a batch of ", B, " rows in ", micro_batches_,
           " micro-batches; accepted: micro-batches that divide the batch");
  const int64_t rows = B / micro_batches_;
  const int chunks = stages_ * virtual_stages_;
  const Placements rep{Replicate()};
  auto part = [&](int mb, int64_t from) {  // ids (from 0) or targets (from 1) of micro-batch mb
    return distribute_tensor(tokens.narrow(0, mb * rows, rows).narrow(1, from, T).contiguous(), tp_mesh_, rep);
  };
  nn::ActivationLayout act{tp_mesh_, {rows, T, model_->config().dim},
                           {sequence_parallel_ ? Shard(1) : Replicate()}, dtype_, device_};
  auto forward = [&](int mb, int chunk, const std::optional<DTensor>& in) {
    DTensor x = chunk == 0 ? model_->embed(part(mb, 0)) : *in;
    for (int i = 0; i < layers_per_chunk_; ++i) x = model_->block(chunk * layers_per_chunk_ + i, x);
    return chunk + 1 == chunks ? nn::GPT::loss(model_->head(x), part(mb, 1)) : x;
  };
  ProcessGroup& pp = mesh_->group(mesh_->dim_index("pp"));
  const double loss = nn::run_pipeline(program_[pp.rank()], pp, stages_, virtual_stages_, micro_batches_, act,
                                       forward, times);
  // The last stage has the loss; every rank reports it.
  Tensor l = Tensor::from_vector(std::vector<double>{loss}, {1});
  pp.broadcast(l, (chunks - 1) % stages_);
  return l.item();
}

std::vector<double> PipelineGPT::next_token_logits(const Tensor& ids) {
  NoGradGuard no_grad;
  const int64_t n = ids.size(1);
  const int chunks = stages_ * virtual_stages_;
  ProcessGroup& pp = mesh_->group(mesh_->dim_index("pp"));
  const Placements act{sequence_parallel_ ? Shard(1) : Replicate()};
  const Shape local = DTensorSpec(tp_mesh_, act, {1, n, model_->config().dim}, dtype_).local_shape();
  std::optional<DTensor> x;  // the activation entering the next chunk, where this rank runs it
  Tensor logits = Tensor::zeros({model_->config().vocab}, DType::kFloat64);
  for (int c = 0; c < chunks; ++c) {
    const int at = c % stages_, next = (c + 1) % stages_;
    if (at != pp.rank()) {
      if (next == pp.rank() && c + 1 < chunks) {  // the next chunk is ours: its input comes from `at`
        Tensor buf = Tensor::empty(local, dtype_, device_);
        pp.recv(buf, at, c);
        x = dtensor::from_local(buf, tp_mesh_, act, Shape{1, n, model_->config().dim});
      }
      continue;
    }
    DTensor h = c == 0 ? model_->embed(distribute_tensor(ids.to(device_), tp_mesh_, {Replicate()})) : *x;
    for (int i = 0; i < layers_per_chunk_; ++i) h = model_->block(c * layers_per_chunk_ + i, h);
    if (c + 1 == chunks) {
      logits = model_->head(h).full_tensor().select(0, 0).select(0, n - 1).to(cpu()).to(DType::kFloat64).contiguous();
    } else {
      if (h.placements() != act) h = h.redistribute(act);
      if (next == pp.rank()) x = h;  // one stage: the next chunk is here too
      else pp.send(h.local_tensor().contiguous(), next, c);
    }
  }
  pp.broadcast(logits, (chunks - 1) % stages_);
  return logits.to_vector<double>();
}

double planner_bubble_fraction(int stages, int micro_batches, int virtual_stages) {
  // planner/pipeline.h's schedule figures for a pipeline whose stage takes no time: only its
  // bubble fraction is read (with_virtual_stages re-prices a plan for v virtual stages).
  planner::PipelinePlan plan;
  plan.spec = {stages, micro_batches, 1};
  const int layers = stages * virtual_stages;
  plan.layers_per_stage = virtual_stages;  // ceil(layers / (p v)) v
  auto v = planner::with_virtual_stages(plan, layers, virtual_stages);
  DT_CHECK(v.has_value(), "pipeline: the planner has no schedule for ", stages, " stages x ", virtual_stages,
           " virtual stages");
  return v->bubble_fraction;
}

namespace {

// --check's gradient comparison: the one-rank model's gradients of the same batch (float64, the
// whole batch at once), by parameter path, as full tensors.
std::map<std::string, std::vector<double>> one_rank_gradients(const nn::GPTConfig& cfg, const Tensor& tokens) {
  std::map<std::string, std::vector<double>> out;
  run_threads(1, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {1}, {"tp"});
    nn::GPT model(cfg);
    nn::parallelize(model, mesh, nn::megatron_plan(false, false), 0, DType::kFloat64, cpu());
    const int64_t T = tokens.size(1) - 1;
    const Placements rep{Replicate()};
    DTensor x = distribute_tensor(tokens.narrow(1, 0, T).contiguous(), mesh, rep);
    DTensor y = distribute_tensor(tokens.narrow(1, 1, T).contiguous(), mesh, rep);
    backward(nn::GPT::loss(model(x), y));
    for (auto& [path, p] : model.named_parameters())
      if (auto g = grad(*p)) out[path] = g->full_tensor().to_vector<double>();
  });
  return out;
}

// The largest difference between this rank's accumulated gradients and the one-rank ones, relative
// to the largest one-rank gradient of any parameter (not each parameter's own: some gradients are
// zero in exact arithmetic, e.g. the key bias's, under softmax's shift invariance, and hold only
// rounding noise). Collective over the stage's tp ranks.
double largest_gradient_difference(PipelineGPT& model, const std::map<std::string, std::vector<double>>& ref) {
  double scale = 1e-300, worst = 0;
  for (auto& [path, g] : ref)
    for (double x : g) scale = std::max(scale, std::abs(x));
  for (auto& [path, p] : model.parameters()) {
    std::optional<DTensor> g = grad(*p);
    const std::vector<double> mine = g ? g->full_tensor().to_vector<double>() : std::vector<double>();
    auto it = ref.find(path);
    if (it == ref.end() || it->second.size() != mine.size()) return HUGE_VAL;  // a gradient one side lacks
    for (size_t i = 0; i < mine.size(); ++i) {
      const double d = std::abs(mine[i] - it->second[i]) / scale;
      worst = std::max(worst, std::isnan(d) ? HUGE_VAL : d);
    }
  }
  return worst;
}

std::string human_rate(double tokens_per_s) { return absl::StrCat(static_cast<int64_t>(tokens_per_s)); }

}  // namespace

TrainResult train_pipeline_rank(std::shared_ptr<Backend> backend, const TrainOptions& o, std::ostream* log) {
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  Shape shape(sizes.begin(), sizes.end());
  DT_CHECK(numel(shape) == backend->world_size(), "dtensor train: mesh ", o.mesh, " needs ", numel(shape),
           " ranks, the world has ", backend->world_size());
  auto mesh = DeviceMesh::create(backend, shape, names);
  const int pp = static_cast<int>(sizes[0]);
  const int m = o.micro_batches > 0 ? o.micro_batches : default_micro_batches(o);
  const int v = o.virtual_stages;
  std::ostream* out = backend->rank() == 0 ? log : nullptr;
  nn::CharDataset data = nn::CharDataset::from_file(o.text, o.seq + 2);
  const nn::GPTConfig cfg = gpt_config(o, data.vocab());  // --moe is refused with pp (validate_train_options)
  const DType dtype = o.check ? DType::kFloat64 : DType::kFloat32;
  const Device device = parse_device(o.device, backend->kind());
  PipelineGPT model(mesh, cfg, o.sequence_parallel, o.loss_parallel, dtype, device, m, v);
  nn::AdamW opt(model.parameters(), {o.lr});
  const nn::PipelineTimeline sim = nn::simulate_pipeline(nn::pipeline_schedule(pp, v, m), pp, v, m);
  TrainResult r;
  r.bubble_predicted = planner_bubble_fraction(pp, m, v);
  r.bubble_simulated = sim.bubble_fraction;
  if (out) {
    *out << "dtensor train: GPT " << o.layers << " layers, dim " << o.dim << ", " << o.heads << " heads, vocab "
         << cfg.vocab << ", seq " << o.seq << ", batch " << o.batch << ", " << dtype_name(dtype) << "; mesh " << o.mesh
         << " (" << backend->kind() << " backend, " << device.str() << (o.sequence_parallel ? ", sequence parallel" : "")
         << (o.loss_parallel ? ", loss parallel" : "") << "; " << blas_threads() << " compute thread(s) per rank)\n";
    *out << "pipeline: " << pp << " stages x " << v << " virtual stage(s) = " << pp * v << " chunks of "
         << o.layers / (pp * v) << " layer(s), " << m << " micro-batches of " << o.batch / m << " rows, "
         << (v == 1 ? "1F1B" : "interleaved 1F1B") << "; rank 0 trains " << model.parameters().size()
         << " of the model's " << model.model().named_parameters().size() << " parameters\n";
  }
  r.comm_by_dim.resize(mesh->ndim());
  double seconds = 0, p2p_s = 0, pipe_s = 0;
  int64_t bytes = 0;
  for (int s = 0; s < o.steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    CommStats before = mesh->stats();
    const std::vector<CommStats> dim_before = dim_comm_stats(*mesh);
    Tensor tok = data.batch(o.batch, o.seq, o.seed * 7919 + static_cast<uint64_t>(s)).to(device);
    nn::PipelineStepTimes times;
    const double l = model.forward_backward(tok, &times);
    if (o.check && s == 0) {
      Tensor g = Tensor::from_vector(
          std::vector<double>{largest_gradient_difference(model, one_rank_gradients(cfg, tok))}, {1});
      for (int d = 0; d < mesh->ndim(); ++d) mesh->group(d).all_reduce(g, ReduceOp::kMax);
      r.gradient_difference = g.item();
    }
    opt.step();
    opt.zero_grad();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The first step warms up (allocations, connections): the bubble is measured on the others.
    if (s > 0 || o.steps == 1) {
      p2p_s += times.p2p_s;
      pipe_s += times.total_s;
    }
    bytes += mesh->stats().bytes_sent - before.bytes_sent;
    add_dim_comm_since(*mesh, dim_before, r.comm_by_dim);
    r.losses.push_back(l);
    if (out && (s % o.log_every == 0 || s + 1 == o.steps))
      *out << "step " << std::setw(4) << s + 1 << "  loss " << std::fixed << std::setprecision(4) << l
           << "  tokens/s " << human_rate((s + 1) * o.batch * o.seq / seconds) << "\n";
  }
  // Every rank's time waiting in send/recv over its pipeline time, summed over the ranks.
  Tensor fig = Tensor::from_vector(std::vector<double>{p2p_s, pipe_s}, {2});
  for (int d = 0; d < mesh->ndim(); ++d) mesh->group(d).all_reduce(fig, ReduceOp::kSum);
  const std::vector<double> f = fig.to_vector<double>();
  r.bubble_measured = f[1] > 0 ? f[0] / f[1] : 0;
  r.tokens_per_s = o.steps * o.batch * o.seq / seconds;
  r.bytes_per_step = bytes / o.steps;
  if (out) {
    *out << "done: " << o.steps << " steps, " << human_rate(r.tokens_per_s) << " tokens/s, " << r.bytes_per_step
         << " bytes sent per step by rank 0, final loss " << std::fixed << std::setprecision(4) << r.losses.back()
         << "\n";
    *out << "bubble: measured " << std::setprecision(3) << r.bubble_measured
         << " (time waiting in send/recv / pipeline time, all ranks, steps 2.." << o.steps << "); planner "
         << r.bubble_predicted << " ((p - 1) / v over m + (p - 1) / v); schedule with backward = 2 forwards "
         << r.bubble_simulated << "\n";
    if (o.check)
      *out << "check: largest relative gradient difference against one rank at step 1 (float64, every "
              "parameter, all ranks): "
           << std::scientific << std::setprecision(2) << r.gradient_difference << std::defaultfloat
           << (r.gradient_difference <= kCheckTolerance ? " (ok)" : " (TOO LARGE: above 1e-9)") << "\n";
  }
  // Sample text as train_rank does, the logits of each step through the stages in turn.
  if (o.sample_chars > 0) {
    std::vector<int64_t> ctx = data.encode("GNU ");
    std::mt19937_64 rng(o.seed);
    for (int i = 0; i < o.sample_chars; ++i) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(ctx.size()), o.seq);
      std::vector<int64_t> window(ctx.end() - n, ctx.end());
      ctx.push_back(sample_token(model.next_token_logits(Tensor::from_vector(window, {1, n})), rng));
    }
    r.sample = data.decode(ctx);
    if (out) *out << "sample: " << r.sample << "\n";
  }
  return r;
}

}  // namespace dtensor::tools
