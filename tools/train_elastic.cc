#include "tools/train_elastic.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/collectives/membership.h"
#include "dtensor/core/compute_threads.h"
#include "nn/checkpoint.h"
#include "nn/data.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "planner/models/zoo.h"
#include "planner/search.h"
#include "propagation/hardware.h"

namespace dtensor::tools {

std::string ElasticLayout::str() const {
  std::string s = absl::StrCat("dp=", dp, ",tp=", tp);
  if (dp > 1) absl::StrAppend(&s, ", batch rows ", absl::StrJoin(rows, ","), weighted ? absl::StrCat(" (S(0)[", absl::StrJoin(rows, ":"), "])") : " (S(0))");
  return s;
}

ElasticLayout choose_elastic_layout(int64_t ranks, int64_t tp, const TrainOptions& o,
                                    const std::vector<int64_t>& rank_weights) {
  DT_CHECK(ranks >= 1 && tp >= 1, "elastic layout: ", ranks, " ranks, tp=", tp);
  ElasticLayout l;
  for (int64_t t = std::min(tp, ranks); t >= 1; --t) {
    if (ranks % t != 0 || o.heads % t != 0 || o.dim % t != 0 || ranks / t > o.batch) continue;
    l.tp = t;
    l.dp = ranks / t;
    break;
  }
  DT_CHECK(l.tp * l.dp == ranks, "elastic layout: no tp size divides ", ranks, " ranks, --heads ", o.heads,
           " and --dim ", o.dim, " with at most --batch ", o.batch, " dp ranks; accepted: a larger --batch");
  if (l.tp == tp) {
    l.reason = absl::StrCat("tp=", tp, " divides ", ranks, " ranks: kept");
  } else {
    l.reason = absl::StrCat("tp=", tp, " does not divide ", ranks, " ranks (or leaves a dp rank no batch row); tp=", l.tp,
                            " is the largest below it dividing the ranks, --heads ", o.heads, " and --dim ", o.dim);
  }
  std::vector<int64_t> w = rank_weights;
  if (static_cast<int64_t>(w.size()) != l.dp) w.assign(l.dp, 1);
  for (int64_t r = 0; r < l.dp; ++r) l.rows.push_back(weighted_range(o.batch, w, r).second);
  l.weighted = std::any_of(l.rows.begin(), l.rows.end(), [&](int64_t n) { return n != l.rows[0]; }) ||
               !rank_weights.empty();
  if (l.dp > 1)
    absl::StrAppend(&l.reason, l.weighted ? absl::StrCat("; dp=", l.dp, " batch shares by weight ", absl::StrJoin(w, ","))
                                          : absl::StrCat("; dp=", l.dp, " splits the batch evenly"));
  return l;
}

double predicted_step_us(const TrainOptions& o, int64_t vocab, int64_t dp, int64_t tp) {
  planner::MeshSpec mesh{{dp, tp}, {"dp", "tp"}};
  planner::models::ModelOptions mo;
  mo.batch = o.batch;
  mo.seq = o.seq;
  mo.layers = o.layers;
  mo.hidden = o.dim;
  mo.heads = o.heads;
  mo.vocab = vocab;
  const planner::ModelGraph g = planner::models::build_model("char-gpt", mo, mesh);
  const HardwareProfile& hw = o.hardware.empty() ? default_hardware() : hardware_profile(o.hardware);
  const planner::PlanResult r = planner::plan_model(g, mesh, hw);
  for (const planner::Baseline& b : r.baselines)
    if (b.name == "megatron" && b.valid) return b.eval.step_time_us;
  DT_FAIL("elastic: the planner has no Megatron-LM plan of this GPT on dp=", dp, ",tp=", tp);
}

ElasticLayout plan_elastic_layout(int64_t ranks, const std::vector<int64_t>& launch, const TrainOptions& o,
                                  int64_t vocab) {
  int64_t launch_ranks = 1;
  for (int64_t n : launch) launch_ranks *= n;
  const int64_t launch_tp = launch.back();
  const auto us_str = [](double us) { return absl::StrFormat("%.1f us", us); };
  const double launch_us = predicted_step_us(o, vocab, launch_ranks / launch_tp, launch_tp);
  if (ranks == launch_ranks) {  // every launch rank is back: the launch mesh (the run returns to it)
    ElasticLayout l = choose_elastic_layout(ranks, launch_tp, o);
    l.reason = absl::StrCat("every launch rank is a member: the launch mesh (predicted ", us_str(launch_us), " a step)");
    return l;
  }
  int64_t best = 0;
  double best_us = 0;
  std::vector<std::string> tried;
  for (int64_t t = 1; t <= ranks; ++t) {
    if (ranks % t != 0 || o.heads % t != 0 || o.dim % t != 0 || ranks / t > o.batch) continue;
    const double us = predicted_step_us(o, vocab, ranks / t, t);
    tried.push_back(absl::StrCat("dp=", ranks / t, ",tp=", t, " ", us_str(us)));
    if (best == 0 || us < best_us * (1 - 1e-9) || (us <= best_us * (1 + 1e-9) && t > best)) {
      best = t;
      best_us = us;
    }
  }
  DT_CHECK(best > 0, "elastic layout: no tp size divides ", ranks, " ranks, --heads ", o.heads, " and --dim ", o.dim,
           " with at most --batch ", o.batch, " dp ranks; accepted: a larger --batch");
  ElasticLayout l = choose_elastic_layout(ranks, best, o);  // tp = best divides: kept; the rows as the rule gives them
  const std::string rows = l.reason.substr(std::min(l.reason.find(';'), l.reason.size()));
  l.reason = absl::StrCat("the fastest predicted step (the planner's Megatron-LM plan, the run's own layout) of ",
                          absl::StrJoin(tried, ", "), "; ties: the larger tp; the launch mesh on ", launch_ranks,
                          " ranks: ", us_str(launch_us), rows);
  return l;
}

KillAt kill_at_from_env() {
  const char* env = std::getenv("DTENSOR_TEST_KILL_AT");
  KillAt k;
  if (env == nullptr || *env == 0) return k;
  std::vector<std::string> parts = absl::StrSplit(env, ':');
  bool ok = parts.size() == 2 && absl::SimpleAtoi(parts[1], &k.step) && k.step >= 0;
  if (ok) {
    for (absl::string_view r : absl::StrSplit(parts[0], ',')) {
      int v = -1;
      ok = ok && absl::SimpleAtoi(r, &v) && v >= 0;
      k.ranks.push_back(v);
    }
  }
  DT_CHECK(ok, "$DTENSOR_TEST_KILL_AT='", env, "': accepted: RANK[,RANK...]:STEP (test-only: those launch ranks "
           "SIGKILL themselves after STEP completed steps)");
  return k;
}

namespace {

void kill_in_recovery_from_env(int me) {
  const char* env = std::getenv("DTENSOR_TEST_KILL_IN_RECOVERY");
  if (env == nullptr || *env == 0) return;
  int r = -1;
  DT_CHECK(absl::SimpleAtoi(env, &r) && r >= 0, "$DTENSOR_TEST_KILL_IN_RECOVERY='", env,
           "': accepted: a launch rank (test-only: it SIGKILLs itself as its first recovery's redistribution starts)");
  if (r == me) raise(SIGKILL);
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A generation's view of the job's backend: every group it creates is named under the generation's
// prefix ("g1/mesh0/dim1/0-1"), and its meshes are numbered from 0 in each generation.
class GenerationBackend : public Backend {
 public:
  GenerationBackend(std::shared_ptr<Backend> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  int rank() const override { return base_->rank(); }
  int world_size() const override { return base_->world_size(); }
  std::string kind() const override { return base_->kind(); }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name,
                                          Timeout timeout) override {
    return base_->new_group(ranks, prefix_ + name, timeout);
  }

 private:
  std::shared_ptr<Backend> base_;
  std::string prefix_;
};

// One generation's model: the mesh, the GPT and AdamW on it, and the data placement.
struct Replica {
  Generation gen;
  ElasticLayout layout;
  std::shared_ptr<DeviceMesh> mesh;
  std::shared_ptr<ProcessGroup> all;  // every member: the step-boundary agreement on joiners
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<nn::AdamW> opt;
  nn::NamedTensors state;  // parameters, then AdamW's exp_avg / exp_avg_sq
  Placements data_pl;
};

// What recovery needs of an ended generation's replica: each tensor's layout and this rank's block.
// Taking it lets the replica (its mesh and process groups) go at once, which closes this rank's
// connections of the ended generation: a peer still blocked in one of its collectives fails at once
// ("connection closed") instead of at its timeout.
struct OldEntry {
  std::string name;
  Shape shape;
  Placements placements;
  Tensor local;
};
struct OldState {
  Generation gen;
  ElasticLayout layout;
  Shape mesh_shape;
  std::vector<int> ranks;  // of the mesh, row-major
  std::vector<int64_t> coord;
  std::vector<OldEntry> entries;
  int64_t opt_steps = 0;
};

OldState take_state(Replica& r) {
  OldState s;
  s.gen = r.gen;
  s.layout = r.layout;
  s.mesh_shape = r.mesh->shape();
  s.ranks = r.mesh->ranks();
  s.coord = r.mesh->coordinate();
  for (auto& [name, t] : r.state) s.entries.push_back({name, t->shape(), t->placements(), t->local_tensor()});
  s.opt_steps = r.opt->steps();
  r = Replica{};
  return s;
}

struct Run {
  std::shared_ptr<Backend> backend;
  const TrainOptions& o;
  nn::GPTConfig cfg;
  DType dtype;
  Timeout timeout;
};

Replica build_replica(const Run& run, const Generation& gen, const ElasticLayout& layout) {
  Replica r;
  r.gen = gen;
  r.layout = layout;
  auto gb = std::make_shared<GenerationBackend>(run.backend, gen.group_prefix());
  r.mesh = DeviceMesh::create(gb, {layout.dp, layout.tp}, {"dp", "tp"}, gen.members, run.timeout);
  if (run.o.max_restarts > 0) r.all = gb->new_group(gen.members, "all", run.timeout);
  r.model = std::make_unique<nn::GPT>(run.cfg);
  nn::parallelize(*r.model, r.mesh, nn::megatron_plan(run.o.sequence_parallel, run.o.loss_parallel), 1, run.dtype,
                  cpu());
  r.opt = std::make_unique<nn::AdamW>(r.model->named_parameters(), nn::AdamWOptions{run.o.lr});
  r.state = r.model->named_parameters();
  for (auto& s : r.opt->state()) r.state.push_back(s);
  r.data_pl = Placements{layout.weighted ? Shard(0, layout.rows) : Shard(0), Replicate()};
  return r;
}

// The source of each block of one tensor in the old layout: the lowest-index mesh position holding
// it whose rank is eligible. `lost` describes the first block without one.
struct Sources {
  bool mine = false;  // this rank sends its own block
  std::string lost;   // "" when every block has a source
};

Sources block_sources(const OldEntry& t, const OldState& old, const std::vector<int>& eligible, int me) {
  const Shape& mshape = old.mesh_shape;
  std::map<std::pair<Shape, Shape>, std::vector<int>> holders;  // (offset, shape) -> ranks, mesh order
  std::vector<std::pair<Shape, Shape>> order;
  for (int64_t flat = 0; flat < numel(mshape); ++flat) {
    std::vector<int64_t> coord(mshape.size());
    int64_t rem = flat;
    for (int d = static_cast<int>(mshape.size()) - 1; d >= 0; --d) coord[d] = rem % mshape[d], rem /= mshape[d];
    auto [shape, offset] = local_block(t.shape, t.placements, mshape, coord);
    auto key = std::make_pair(offset, shape);
    if (!holders.count(key)) order.push_back(key);
    holders[key].push_back(old.ranks[flat]);
  }
  Sources s;
  for (const auto& key : order) {
    const std::vector<int>& h = holders[key];
    auto src = std::find_if(h.begin(), h.end(), [&](int r) {
      return std::find(eligible.begin(), eligible.end(), r) != eligible.end();
    });
    if (src == h.end()) {
      if (s.lost.empty() && numel(key.second) > 0) {
        std::vector<std::string> span;
        for (size_t d = 0; d < key.first.size(); ++d)
          span.push_back(absl::StrCat(key.first[d], ":", key.first[d] + key.second[d]));
        s.lost = absl::StrCat("'", t.name, "' ", placements_str(t.placements), " block [", absl::StrJoin(span, ", "),
                              "], held only by rank(s) ", absl::StrJoin(h, ", "), ", all lost");
      }
      continue;
    }
    if (*src == me) s.mine = true;
  }
  return s;
}

// The members of a new generation agree on each one's completed steps (-1: a rejoining process,
// which holds no state) and the run's first step: one all_reduce (max) over the generation's group.
// Returns world + 1 numbers: the steps per launch rank (-1 for ranks outside), then the first step.
std::vector<int64_t> exchange_steps(ProcessGroup& all, int world, int me, int64_t step, int64_t start_step,
                                    Timeout timeout) {
  Tensor t = Tensor::zeros({world + 1}, DType::kFloat64);
  t.data<double>()[me] = static_cast<double>(step + 1);
  t.data<double>()[world] = static_cast<double>(start_step + 1);
  all.all_reduce(t, ReduceOp::kMax, timeout);
  std::vector<int64_t> out;
  for (double v : t.to_vector<double>()) out.push_back(static_cast<int64_t>(v) - 1);
  return out;
}

struct Recovered {
  Replica replica;
  int64_t step = 0;
  int64_t start_step = 0;
  bool from_checkpoint = false;
};

// From `old` (whose generation ended on this rank at `step` completed steps: a CommError, or joiners
// waiting at a step boundary) to the next generation's replica; old == null for a restarted process
// (it rejoins, holds no state and receives all of it). Throws CommError when this rank was left out,
// Error when the state cannot be rebuilt.
Recovered recover(const Run& run, Membership& membership, const OldState* old, int64_t step, int64_t start_step,
                  double detect_s, std::ostream* log) {
  const auto t_start = Clock::now();
  const TrainOptions& o = run.o;
  const int me = run.backend->rank();
  const int world = run.backend->world_size();
  MembershipOptions mo;
  mo.settle = run.timeout + std::chrono::milliseconds(1000);
  mo.timeout = std::max<Timeout>(run.timeout, std::chrono::milliseconds(10000));
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  Generation ended;
  if (old != nullptr) ended = old->gen;
  for (int attempt = 0;; ++attempt) {
    const auto t_rdv = Clock::now();
    // Throws when this rank was left out (or, rejoining, not taken in).
    Generation g = attempt == 0 && old == nullptr ? membership.rejoin(mo) : membership.next(ended, mo);
    try {
      auto all = run.backend->new_group(g.members, g.group_prefix() + "recover", run.timeout);
      std::vector<int64_t> steps =
          exchange_steps(*all, world, me, old != nullptr ? step : -1, old != nullptr ? start_step : -1, run.timeout);
      int64_t low = -1;
      for (int m : g.members)
        if (steps[m] >= 0) low = low < 0 ? steps[m] : std::min(low, steps[m]);
      DT_CHECK(low >= 0, "dtensor train --elastic: generation ", g.number, " (members ", absl::StrJoin(g.members, ","),
               ") has no member that holds the model: all were restarted");
      std::vector<int> eligible, joined;
      for (int m : g.members) {
        if (steps[m] == low) eligible.push_back(m);
        if (steps[m] < 0) joined.push_back(m);
      }
      const double rdv_s = since(t_rdv);

      const auto t_plan = Clock::now();
      // The launch's tp first: a run that gets its ranks back returns to its mesh.
      ElasticLayout layout = plan_elastic_layout(static_cast<int64_t>(g.members.size()), sizes, o, run.cfg.vocab);
      const double plan_s = since(t_plan);

      const auto t_reshard = Clock::now();
      Recovered rec{build_replica(run, g, layout), low, steps[world], false};
      std::string lost;
      std::vector<bool> mine(rec.replica.state.size());
      if (old != nullptr) {
        DT_CHECK(old->entries.size() == rec.replica.state.size(), "elastic: ", old->entries.size(),
                 " tensors before, ", rec.replica.state.size(), " now");
        for (size_t i = 0; i < old->entries.size(); ++i) {
          DT_CHECK(rec.replica.state[i].first == old->entries[i].name &&
                       rec.replica.state[i].second->shape() == old->entries[i].shape,
                   "elastic: the new model's tensor ", i, " is '", rec.replica.state[i].first, "', the old one's '",
                   old->entries[i].name, "'");
          Sources s = block_sources(old->entries[i], *old, eligible, me);
          mine[i] = s.mine;
          if (lost.empty()) lost = s.lost;
        }
      }
      // Whether some member found a block no survivor holds (a rejoining process cannot tell).
      Tensor any_lost = Tensor::full({1}, lost.empty() ? 0.0 : 1.0, DType::kFloat64);
      all->all_reduce(any_lost, ReduceOp::kMax, run.timeout);
      std::string how;
      if (any_lost.item() == 0) {
        // Every block has one source: the sum over the members is the full tensor.
        int64_t total = 0;
        for (auto& [name, t] : rec.replica.state) total += numel(t->shape());
        Tensor buf = Tensor::zeros({total}, run.dtype);
        int64_t at = 0;
        for (size_t i = 0; i < rec.replica.state.size(); ++i) {
          const Shape& shape_i = rec.replica.state[i].second->shape();
          if (mine[i]) {
            const OldEntry& t = old->entries[i];
            auto [shape, offset] = local_block(t.shape, t.placements, old->mesh_shape, old->coord);
            Tensor dst = buf.narrow(0, at, numel(t.shape)).view(t.shape);
            for (size_t d = 0; d < shape.size(); ++d) dst = dst.narrow(static_cast<int64_t>(d), offset[d], shape[d]);
            dst.copy_(t.local);
          }
          at += numel(shape_i);
        }
        // Test-only: $DTENSOR_TEST_KILL_IN_RECOVERY=R: launch rank R, a survivor, SIGKILLs itself here in
        // its first recovery, as the redistribution starts (a kill during a redistribution).
        if (old != nullptr && attempt == 0) kill_in_recovery_from_env(me);
        all->all_reduce(buf, ReduceOp::kSum, run.timeout);
        at = 0;
        for (size_t i = 0; i < rec.replica.state.size(); ++i) {
          auto& [name, t] = rec.replica.state[i];
          Tensor full = buf.narrow(0, at, numel(t->shape())).view(t->shape());
          Tensor(t->local_tensor()).copy_(distribute_tensor(full, t->mesh(), t->placements()).local_tensor());
          at += numel(t->shape());
        }
        rec.replica.opt->set_steps(low);  // AdamW's count is the run's completed steps
        how = absl::StrCat(joined.empty() ? "rebuilt from the surviving replicas (" : "sent from the members' replicas (",
                           total, " values, no disk read)");
      } else {
        const bool have = !o.save.empty() && (std::filesystem::exists(o.save + "/LATEST") ||
                                              std::filesystem::exists(o.save + "/metadata.json"));
        DT_CHECK(have, "dtensor train --elastic: generation ", g.number, " (members ", absl::StrJoin(g.members, ","),
                 ") cannot rebuild the model: no surviving rank holds ",
                 lost.empty() ? std::string("a block (found by another member)") : lost,
                 "; and there is no checkpoint to replay from (give --save DIR --save-every N)");
        rec.step = nn::load_checkpoint(o.save, rec.replica.state);
        rec.replica.opt->set_steps(rec.step);
        rec.from_checkpoint = true;
        how = absl::StrCat("no surviving rank holds ", lost, ": loaded the last checkpoint ", o.save, " (step ",
                           rec.step, ") and replaying from step ", rec.step + 1);
      }
      const double reshard_s = since(t_reshard);
      // The largest time of each part over the members.
      const double total_s = detect_s + since(t_start);
      Tensor times = Tensor::from_vector(std::vector<double>{detect_s, rdv_s, plan_s, reshard_s, total_s}, {5});
      all->all_reduce(times, ReduceOp::kMax, run.timeout);
      std::vector<double> tv = times.to_vector<double>();
      if (log && g.members.front() == me) {
        std::vector<int> lost_ranks;
        for (int r : ended.members)
          if (g.index_of(r) < 0) lost_ranks.push_back(r);
        *log << "elastic: generation " << g.number << ", members " << absl::StrJoin(g.members, ",");
        if (!lost_ranks.empty()) *log << " (lost " << absl::StrJoin(lost_ranks, ",") << ")";
        if (!joined.empty()) *log << " (rejoined " << absl::StrJoin(joined, ",") << ")";
        *log << ", " << (lost_ranks.empty() ? "next step " : "redoing step ") << rec.step + 1 << "\n"
             << "elastic: mesh " << layout.str() << ": " << layout.reason << "\n"
             << "elastic: state " << how << "\n"
             << absl::StrFormat("elastic: recovery: detection %.3f s, rendezvous %.3f s, re-plan %.4f s, reshard %.3f s; "
                                "failed step's start (a join: the step boundary) to the new layout %.3f s (each the largest over the members)\n",
                                tv[0], tv[1], tv[2], tv[3], tv[4]);
        log->flush();
      }
      return rec;
    } catch (const CommError& e) {
      // A member of g failed during the recovery: g ends too; agree on the next one. (A rejoining
      // process still holds nothing: old stays null.)
      if (attempt >= 3) throw;
      if (log) *log << "elastic: rank " << me << ": generation " << g.number << " failed during recovery (" << e.what()
                    << "); agreeing on the next\n";
      ended = g;
      detect_s = 0;
    }
  }
}

double train_step(const Run& run, Replica& r, const nn::CharDataset& data, int64_t step) {
  const TrainOptions& o = run.o;
  Tensor tok = data.batch(o.batch, o.seq, o.seed * 7919 + static_cast<uint64_t>(step));
  DTensor x = distribute_tensor(tok.narrow(1, 0, o.seq).contiguous(), r.mesh, r.data_pl);
  DTensor y = distribute_tensor(tok.narrow(1, 1, o.seq).contiguous(), r.mesh, r.data_pl);
  DTensor loss = nn::GPT::loss((*r.model)(x), y);
  backward(loss);
  // The last collective of the step comes before the update: a step that fails leaves this rank's
  // state as it was before the step.
  const double l = loss.full_tensor(run.timeout).item();
  r.opt->step();
  r.opt->zero_grad();
  return l;
}

}  // namespace

TrainResult train_elastic_rank(std::shared_ptr<Backend> backend, const TrainOptions& o, std::ostream* log) {
  DT_CHECK(backend->kind() == "gloo", "dtensor train --elastic: needs Gloo processes, not ", backend->kind());
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  int64_t world = 1;
  for (int64_t s : sizes) world *= s;
  DT_CHECK(world == backend->world_size(), "dtensor train: mesh ", o.mesh, " needs ", world, " ranks, the world has ",
           backend->world_size());
  if (!o.save.empty()) {
    const std::string why = nn::checkpoint_dir_write_error(o.save);
    DT_CHECK(why.empty(), "dtensor train: --save ", o.save, ": cannot write: ", why);
  }
  const ProcessEnv env = read_process_env();
  Membership membership(open_store(env.store), backend->rank(), backend->world_size());
  const KillAt kill = kill_at_from_env();
  const int me = backend->rank();

  nn::CharDataset data = nn::CharDataset::from_file(o.text, o.seq + 2);
  Run run{backend, o, {}, o.check ? DType::kFloat64 : DType::kFloat32, default_timeout()};
  run.cfg = gpt_config(o, data.vocab());  // --moe is refused with --elastic (validate_train_options)

  // Generation 0: the launch mesh (dp=M,tp=N as given; tp=N is dp=1,tp=N).
  ElasticLayout first;
  first.tp = sizes.back();
  first.dp = names.size() == 2 ? sizes[0] : 1;
  const std::vector<int64_t> w = parse_rank_weights(o.rank_weights, names.size() == 2 ? sizes[0] : 0);
  {
    std::vector<int64_t> ww = w.empty() ? std::vector<int64_t>(first.dp, 1) : w;
    for (int64_t r = 0; r < first.dp; ++r) first.rows.push_back(weighted_range(o.batch, ww, r).second);
    first.weighted = !w.empty();
    first.reason = "as given (--mesh)";
  }
  Replica rep;
  int64_t start_step = 0, step = 0;
  bool joined_late = false;
  if (env.restart > 0) {
    // A restarted process: it rejoins, and the members send it the state at their next step boundary.
    // Test-only: $DTENSOR_TEST_REJOIN_AFTER=G waits until generation G was decided (without it), so
    // that it joins at a step boundary rather than the survivors' own agreement.
    if (const char* after = std::getenv("DTENSOR_TEST_REJOIN_AFTER")) {
      int64_t g = 0;
      DT_CHECK(absl::SimpleAtoi(after, &g) && g >= 0, "$DTENSOR_TEST_REJOIN_AFTER='", after,
               "': accepted: a generation number >= 0 (test-only)");
      const auto until = Clock::now() + std::chrono::seconds(60);
      while (membership.newest_decided() < g && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    Recovered rec = recover(run, membership, nullptr, -1, -1, 0, log);
    rep = std::move(rec.replica);
    start_step = rec.start_step;
    step = rec.step;
    joined_late = true;
  } else {
    rep = build_replica(run, membership.first(), first);
    if (!o.load.empty()) {
      start_step = nn::load_checkpoint(o.load, rep.state);
      rep.opt->set_steps(start_step);
    }
    step = start_step;
  }
  std::ostream* out = rep.gen.members.front() == me ? log : nullptr;
  if (out && !joined_late) {
    *out << "dtensor train --elastic: GPT " << o.layers << " layers, dim " << o.dim << ", " << o.heads
         << " heads, vocab " << run.cfg.vocab << ", seq " << o.seq << ", batch " << o.batch << ", "
         << dtype_name(run.dtype) << "; generation 0: mesh " << first.str() << " over " << world
         << " gloo processes (" << blas_threads() << " compute thread(s) per rank); collective timeout "
         << absl::StrFormat("%.1f", std::chrono::duration<double>(run.timeout).count()) << " s\n";
  }
  TrainResult result;
  const int64_t end = start_step + o.steps;
  double seconds = 0;
  // Ends this rank's replica (after a CommError, or for joiners at a step boundary) and moves to the
  // next generation's.
  auto next_generation = [&](double detect_s) {
    OldState old = take_state(rep);  // closes this rank's groups of the ended generation
    Recovered rec = recover(run, membership, &old, step, start_step, detect_s, log);
    DT_CHECK(rec.step >= start_step, "dtensor train --elastic: the checkpoint in ", o.save, " is of step ", rec.step,
             ", before this run's first step ", start_step + 1, "; cannot replay");
    rep = std::move(rec.replica);
    step = rec.step;
    out = rep.gen.members.front() == me ? log : nullptr;
  };
  while (step < end) {
    if (rep.gen.number == 0 && kill.step == step &&
        std::find(kill.ranks.begin(), kill.ranks.end(), me) != kill.ranks.end()) {
      std::cout.flush();
      raise(SIGKILL);
    }
    const auto t0 = Clock::now();
    bool grow = false;
    try {
      const double l = train_step(run, rep, data, step);
      seconds += since(t0);
      result.losses.resize(std::max<int64_t>(0, step - start_step));
      result.losses.push_back(l);
      ++step;
      if (out && ((step - start_step - 1) % o.log_every == 0 || step == end))
        *out << "step " << std::setw(4) << step << "  loss " << std::fixed << std::setprecision(4) << l
             << "  tokens/s " << std::setprecision(0) << (step - start_step) * o.batch * o.seq / seconds
             << std::defaultfloat << "  (generation " << rep.gen.number << ", mesh dp=" << rep.layout.dp
             << ",tp=" << rep.layout.tp << ")\n";
      if (o.save_every > 0 && (step - start_step) % o.save_every == 0 && step < end) {
        nn::save_checkpoint(o.save, rep.state, step);
        if (out) *out << "checkpoint (step " << step << ") written to " << o.save << "\n";
      }
      if (rep.all != nullptr && step < end) {
        // A step boundary: take in a restarted rank that asked to join (agreed by every member).
        Tensor seen = Tensor::full({1}, membership.joiners_waiting(rep.gen) ? 1.0 : 0.0, DType::kFloat64);
        rep.all->all_reduce(seen, ReduceOp::kMax, run.timeout);
        grow = seen.item() > 0;
      }
    } catch (const CommError& e) {
      const double detect_s = since(t0);
      if (log) {
        *log << "elastic: rank " << me << ": generation " << rep.gen.number << " ended at step " << step + 1 << ": "
             << e.what() << "\n";
        log->flush();
      }
      next_generation(detect_s);
      continue;
    }
    if (grow) next_generation(0);
  }
  // A rank that joined late holds only the later losses: the reporting rank is one that trained from
  // the start (with --check, the lowest member normally is).
  result.lead = rep.gen.members.front() == me && !joined_late;
  result.tokens_per_s = seconds > 0 ? o.steps * o.batch * o.seq / seconds : 0;
  if (out)
    *out << "done: " << o.steps << " steps, final generation " << rep.gen.number << " (members "
         << absl::StrJoin(rep.gen.members, ",") << ", mesh " << rep.layout.str() << "), final loss " << std::fixed
         << std::setprecision(4) << (result.losses.empty() ? 0.0 : result.losses.back()) << std::defaultfloat << "\n";
  if (!o.save.empty()) {
    nn::save_checkpoint(o.save, rep.state, step);
    if (out) *out << "checkpoint written to " << o.save << "\n";
  }
  if (o.sample_chars > 0) {
    NoGradGuard ng;
    std::vector<int64_t> ctx = data.encode("GNU ");
    std::mt19937_64 rng(o.seed);
    Placements rp(2, Replicate());
    for (int i = 0; i < o.sample_chars; ++i) {
      int64_t n = std::min<int64_t>(static_cast<int64_t>(ctx.size()), o.seq);
      std::vector<int64_t> window(ctx.end() - n, ctx.end());
      DTensor ids = distribute_tensor(Tensor::from_vector(window, {1, n}), rep.mesh, rp);
      ctx.push_back(sample_token((*rep.model)(ids).full_tensor().select(0, 0).select(0, n - 1).to_vector<double>(), rng));
    }
    result.sample = data.decode(ctx);
    if (out) *out << "sample: " << result.sample << "\n";
  }
  return result;
}

}  // namespace dtensor::tools
