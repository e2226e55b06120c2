#include "propagation/propagate.h"

#include <algorithm>
#include <list>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace dtensor {
namespace {

bool mixes_partial_ops(const Placements& p) {
  const Placement* first = nullptr;
  for (const Placement& x : p) {
    if (!x.is_partial()) continue;
    if (first && first->reduce != x.reduce) return true;
    first = &x;
  }
  return false;
}

// torch's is_tensor_shardable: no tensor dim split into more pieces than it has elements.
bool shardable(const Shape& shape, const Placements& p, const Shape& mesh) {
  absl::InlinedVector<int64_t, 6> pieces(shape.size(), 1);
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i].is_shard()) pieces[p[i].dim] *= mesh[i];
  for (size_t d = 0; d < shape.size(); ++d)
    if (pieces[d] > 1 && pieces[d] > shape[d]) return false;
  return true;
}

// A dim of size n splits by weights w with no remainder: every part is exactly n * w_r / W.
bool exact_by_weights(int64_t n, const std::vector<int64_t>& w) {
  int64_t total = 0;
  for (int64_t x : w) total += x;
  for (int64_t x : w)
    if (n * x % total != 0) return false;
  return true;
}

// Dims flagged in `mask` split evenly over the mesh dims that shard them; a dim with a weighted shard
// (never nested: see weights_fit) must split by its weights with no remainder. Both make the parts
// of a merged or split dim (views) line up.
bool even(const Shape& shape, const Placements& p, const Shape& mesh, uint32_t mask) {
  if (mask == 0) return true;
  absl::InlinedVector<int64_t, 6> pieces(shape.size(), 1);
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_shard()) continue;
    if (p[i].is_weighted() && (mask >> p[i].dim & 1u) && !exact_by_weights(shape[p[i].dim], p[i].weights()))
      return false;
    if (!p[i].is_weighted()) pieces[p[i].dim] *= mesh[i];
  }
  for (size_t d = 0; d < shape.size(); ++d)
    if ((mask >> d & 1u) && shape[d] % pieces[d] != 0) return false;
  return true;
}

// The strategy's own step as one collective record: `rounds` collectives over the product group
// of its mesh dims on the slowest of their links (mesh_dim: the first of them).
CollectiveRecord step_record(const OpCall& call, const Strategy& s, const std::vector<LinkModel>& links) {
  const StepDef& sd = call.op().steps.at(s.step() - 1);
  auto dims = s.step_mesh_dims();
  StepTraffic t = sd.traffic(call, s, dims);
  int64_t group = 1;
  LinkModel link = links[dims[0]];
  for (int i : dims) {
    group *= call.mesh_shape()[i];
    if (links[i].model(t.collective).bandwidth_GBps < link.model(t.collective).bandwidth_GBps) link = links[i];
  }
  const int rounds = std::max(t.rounds, 1);
  // A step with nothing to send (halo windows aligned with shard boundaries) costs nothing.
  double time = t.bytes == 0 ? 0.0 : (t.overlapped ? 1 : rounds) * collective_time_us(t.collective, t.bytes / rounds, group, link);
  return {t.collective, dims[0], t.bytes, time};
}

struct Candidate {
  Strategy strategy;
  double cost = 0;
  int64_t bytes = 0;
  bool redistributes = false;
  std::vector<int> shard_key;
  int order = 0;
};

bool better(const Candidate& a, const Candidate& b) {
  double tol = 1e-9 * std::max(1.0, std::max(a.cost, b.cost));
  if (std::abs(a.cost - b.cost) > tol) return a.cost < b.cost;
  if (a.redistributes != b.redistributes) return !a.redistributes;
  if (a.bytes != b.bytes) return a.bytes < b.bytes;
  if (a.shard_key != b.shard_key) return a.shard_key < b.shard_key;
  return a.order < b.order;
}

std::vector<int> shard_key(const Strategy& s) {
  std::vector<int> key;
  for (const auto* group : {&s.outputs, &s.inputs})
    for (const Placements& p : *group)
      for (const Placement& x : p) key.push_back(x.is_shard() ? x.dim : x.is_partial() ? 998 : 999);
  return key;
}

const HardwareProfile& hw_of(const PropagateOptions& o) {
  return o.hardware ? *o.hardware : default_hardware();
}

// Weighted shards (DESIGN §2) carried through a rule row: at mesh dim i, the row's column may take
// the weights of a weighted input when every tensor it shards there is split along a dim of the same
// global size n as that input's (so rank r's part is the same index range of n on every tensor, as
// with even shards) or, for the dims a view merges or splits (the rule's even masks), along a dim
// that the weights split with no remainder (checked by `even` on the variant); no other mesh dim
// shards those dims (no nesting); and the column runs no distributed step (steps assume torch.chunk
// parts). Rows that fail get no weighted variant: the engine then redistributes the weighted input to
// an even placement.
bool weights_fit(const OpCall& call, const std::vector<TensorMeta>& meta, const Strategy& s,
                 const Rule& rule, int i, int64_t n) {
  if (s.steps[i] != 0) return false;
  auto fits = [&](const Placements& p, const Shape& shape, uint32_t mask) {
    if (!p[i].is_shard()) return true;
    const int d = p[i].dim;
    if (d >= static_cast<int>(shape.size()) || (shape[d] != n && !(mask >> d & 1u))) return false;
    for (int j = 0; j < static_cast<int>(p.size()); ++j)
      if (j != i && p[j].is_shard(d)) return false;
    return true;
  };
  for (size_t o = 0; o < s.outputs.size(); ++o)
    if (!fits(s.outputs[o], meta[o].shape, o == 0 ? rule.even_output0 : 0)) return false;
  for (int t = 0; t < call.num_tensors(); ++t)
    if (!fits(s.inputs[t], call.tensor(t).shape, t == 0 ? rule.even_input0 : 0)) return false;
  return true;
}

// Appends to `out` the variants of the even strategy `s` in which some mesh dims' columns take the
// weights of a weighted input placement (every combination; usually one mesh dim, one weight list).
void add_weighted_variants(const OpCall& call, const std::vector<TensorMeta>& meta, const Strategy& s,
                           absl::Span<const Rule* const> rules, std::vector<Strategy>& out) {
  const int nd = static_cast<int>(s.steps.size());
  std::vector<std::vector<uint16_t>> options(nd, std::vector<uint16_t>{0});
  bool any = false;
  for (int i = 0; i < nd; ++i)
    for (int t = 0; t < call.num_tensors(); ++t) {
      const Placement& given = call.placements(t)[i];
      if (!given.is_weighted() || !s.inputs[t][i].is_shard(given.dim)) continue;
      auto& opt = options[i];
      if (std::find(opt.begin(), opt.end(), given.weights_id) != opt.end()) continue;
      if (!weights_fit(call, meta, s, *rules[i], i, call.tensor(t).shape[given.dim])) continue;
      opt.push_back(given.weights_id);
      any = true;
    }
  if (!any) return;
  std::vector<size_t> pick(nd, 0);
  while (true) {
    int i = nd - 1;  // next combination; the all-even one (all zeros) is `s` itself
    while (i >= 0 && ++pick[i] == options[i].size()) pick[i--] = 0;
    if (i < 0) break;
    Strategy w = s;
    for (int m = 0; m < nd; ++m) {
      const uint16_t id = options[m][pick[m]];
      if (id == 0) continue;
      for (auto* group : {&w.outputs, &w.inputs})
        for (Placements& p : *group)
          if (p[m].is_shard()) p[m].weights_id = id;
    }
    out.push_back(std::move(w));
  }
}

}  // namespace

std::vector<Strategy> expand_strategies(const OpCall& call, const std::vector<TensorMeta>& meta,
                                        bool check_shardable) {
  const OpDef& op = call.op();
  const int n_out = static_cast<int>(meta.size()), n_in = call.num_tensors();
  RuleList rules = op.rules ? op.rules(call, meta) : RuleList{};
  Rule all_r;
  all_r.outputs.assign(n_out, Replicate());
  all_r.inputs.assign(n_in, Replicate());
  rules.push_back(all_r);
  for (const Rule& r : rules)
    DT_CHECK(static_cast<int>(r.outputs.size()) == n_out && static_cast<int>(r.inputs.size()) == n_in,
             call.name(), ": internal error: a rule has ", r.outputs.size(), " outputs and ",
             r.inputs.size(), " inputs, the op has ", n_out, " and ", n_in);
  // A row that shards a dim its tensor lacks cannot apply: e.g. the softmax row sharding `dim` of a
  // 0-d tensor, which takes dim 0 as torch's does.
  auto lacks_dim = [](const Placement& p, const Shape& s) {
    return p.is_shard() && p.dim >= static_cast<int>(s.size());
  };
  // Complex numbers have no order: no row may hold a complex tensor as Partial(max/min) (a rule
  // written for real dtypes, e.g. neg swapping P(max) and P(min), does not apply to them).
  auto unordered = [](const Placement& p, DType dt) {
    return is_complex(dt) && p.is_partial() && (p.reduce == ReduceOp::kMax || p.reduce == ReduceOp::kMin);
  };
  // An integer Partial(sum) wraps at its own width: uint8 pieces 200 and 100 hold 44. A row that
  // keeps it Partial in an output of another dtype (sum or cumsum to int64, a cast, uint8 + int16)
  // would sum the pieces at the output's width instead (300), so no row may (torch's value is that
  // of the reduced input).
  auto summed = [](const Placement& p) {
    return p.is_partial() && (p.reduce == ReduceOp::kSum || p.reduce == ReduceOp::kAvg);
  };
  auto widens_a_wrapped_sum = [&](const Rule& r) {
    for (int t = 0; t < n_in; ++t) {
      if (!summed(r.inputs[t]) || !is_integral(call.tensor(t).dtype)) continue;
      for (int o = 0; o < n_out; ++o)
        if (summed(r.outputs[o]) && meta[o].dtype != call.tensor(t).dtype) return true;
    }
    return false;
  };
  std::erase_if(rules, [&](const Rule& r) {
    if (widens_a_wrapped_sum(r)) return true;
    for (int o = 0; o < n_out; ++o)
      if (lacks_dim(r.outputs[o], meta[o].shape) || unordered(r.outputs[o], meta[o].dtype)) return true;
    for (int t = 0; t < n_in; ++t)
      if (lacks_dim(r.inputs[t], call.tensor(t).shape) || unordered(r.inputs[t], call.tensor(t).dtype)) return true;
    return false;
  });
  const Shape& mesh = call.mesh_shape();
  const int nd = static_cast<int>(mesh.size());
  // The odometer below visits rules^mesh_dims rows: a bound on the work before any of it (a rank-20
  // relu on a 6-d mesh is 22^6 = 10^8 rows, gigabytes; a rank-10 add 13^6, half a minute).
  double rows = 1;
  for (int i = 0; i < nd; ++i) rows *= static_cast<double>(rules.size());
  DT_CHECK(rows <= static_cast<double>(kMaxStrategyRows), call.name(), ": ", rules.size(),
           " sharding rules on a ", nd, "-d mesh ", shape_str(mesh), " are ",
           static_cast<int64_t>(std::min(rows, 9e18)), " strategy rows to try (", call.str(),
           "); accepted: at most ", kMaxStrategyRows, ". Use a mesh with fewer dims (merge dims that split the same "
           "way) or lower-rank tensors (each tensor dim is a rule per mesh dim)");
  std::vector<Strategy> out;
  std::vector<size_t> idx(nd, 0);
  // Weighted input shards get weighted variants of the rows (add_weighted_variants); without them
  // the expansion is the plain one.
  bool weighted_input = false;
  for (int t = 0; t < n_in; ++t)
    for (const Placement& p : call.placements(t)) weighted_input |= p.is_weighted();
  while (true) {
    Strategy s;
    s.outputs.assign(n_out, Placements(nd));
    s.inputs.assign(n_in, Placements(nd));
    s.steps.assign(nd, 0);
    uint32_t even_in = 0, even_out = 0;
    absl::InlinedVector<const Rule*, 4> used(nd);
    for (int i = 0; i < nd; ++i) {
      const Rule& r = rules[idx[i]];
      used[i] = &r;
      even_in |= r.even_input0;
      even_out |= r.even_output0;
      for (int o = 0; o < n_out; ++o) s.outputs[o][i] = r.outputs[o];
      for (int t = 0; t < n_in; ++t) s.inputs[t][i] = r.inputs[t];
      s.steps[i] = r.step;
    }
    bool ok = true;
    for (int t = 0; t < n_in && ok; ++t) {
      if (mixes_partial_ops(s.inputs[t])) ok = false;
      else if (check_shardable && s.inputs[t] != call.placements(t) &&
               !shardable(call.tensor(t).shape, s.inputs[t], mesh))
        ok = false;
    }
    for (int o = 0; o < n_out && ok; ++o) ok = !mixes_partial_ops(s.outputs[o]);
    if (ok && n_in > 0 && !weighted_input) ok = even(call.tensor(0).shape, s.inputs[0], mesh, even_in);
    // One distinct step per strategy; a one-mesh-dim step on one mesh dim only.
    if (ok && s.step() != 0) {
      auto dims = s.step_mesh_dims();
      for (int i : dims) ok &= s.steps[i] == s.step();
      const StepDef& sd = op.steps.at(s.step() - 1);
      if (sd.one_mesh_dim) ok &= dims.size() == 1;
      if (ok && sd.valid) ok = sd.valid(call, s);
    }
    if (ok && !weighted_input) {
      if (n_out == 0 || even(meta[0].shape, s.outputs[0], mesh, even_out)) out.push_back(std::move(s));
    } else if (ok) {
      // The row itself and its weighted variants, each where the views' evenness holds.
      std::vector<Strategy> rows;
      add_weighted_variants(call, meta, s, used, rows);
      rows.push_back(std::move(s));
      for (Strategy& r : rows)
        if ((n_in == 0 || even(call.tensor(0).shape, r.inputs[0], mesh, even_in)) &&
            (n_out == 0 || even(meta[0].shape, r.outputs[0], mesh, even_out)))
          out.push_back(std::move(r));
    }
    int i = nd - 1;  // next combination (odometer over mesh dims)
    while (i >= 0 && ++idx[i] == rules.size()) idx[i--] = 0;
    if (i < 0) break;
  }
  return out;
}

namespace {

// Every valid candidate, costed; `meta` receives the output metadata.
std::vector<Candidate> candidates(const OpCall& call, const HardwareProfile& hw,
                                  std::vector<TensorMeta>* meta) {
  *meta = call.op().meta(call);
  const Shape& mesh = call.mesh_shape();
  const auto links = hw.links_for_mesh(mesh);
  std::vector<Candidate> out;
  int order = 0;
  for (Strategy& s : expand_strategies(call, *meta, true)) {
    Candidate c;
    c.order = order++;
    for (int t = 0; t < call.num_tensors(); ++t) {
      auto plan = plan_redistribute(mesh, call.placements(t), s.inputs[t], call.tensor(t).shape,
                                    call.tensor(t).dtype);
      c.cost += plan_time_us(*plan, mesh, links, nullptr);
      c.bytes += plan->total_bytes();
      c.redistributes |= !plan->steps.empty();
    }
    if (s.step() != 0) {
      CollectiveRecord r = step_record(call, s, links);
      c.cost += r.time_us;
      c.bytes += r.bytes;
    }
    c.shard_key = shard_key(s);
    c.strategy = std::move(s);
    out.push_back(std::move(c));
  }
  return out;
}

std::shared_ptr<const ShardingDecision> decide(const OpCall& call, const HardwareProfile& hw) {
  auto d = std::make_shared<ShardingDecision>();
  std::vector<Candidate> cands = candidates(call, hw, &d->out_meta);
  auto best = std::min_element(cands.begin(), cands.end(), better);  // all-R always survives
  const Shape& mesh = call.mesh_shape();
  const auto links = hw.links_for_mesh(mesh);
  d->strategy = best->strategy;
  d->candidates = static_cast<int>(cands.size());
  d->replicated_fallback = true;
  for (const auto& p : d->strategy.outputs)
    for (const auto& x : p) d->replicated_fallback &= x.is_replicate();
  for (int t = 0; t < call.num_tensors(); ++t) {
    auto plan = plan_redistribute(mesh, call.placements(t), d->strategy.inputs[t], call.tensor(t).shape,
                                  call.tensor(t).dtype);
    d->cost_us += plan_time_us(*plan, mesh, links, &d->collectives);
    d->bytes += plan->total_bytes();
    d->input_plans.push_back(std::move(plan));
  }
  if (d->strategy.step() != 0) {
    CollectiveRecord r = step_record(call, d->strategy, links);
    d->cost_us += r.time_us;
    d->bytes += r.bytes;
    if (r.bytes > 0) d->collectives.push_back(r);
  }
  return d;
}

// Per-thread LRU cache of decisions.
struct Cache {
  struct Entry {
    OpCall call;
    const HardwareProfile* hw;
    size_t key;
    std::shared_ptr<const ShardingDecision> decision;
  };
  std::list<Entry> lru;  // front: most recent
  absl::flat_hash_map<size_t, std::list<Entry>::iterator> index;
};
size_t g_capacity = kDefaultPropagationCacheCapacity;
thread_local Cache t_cache;

}  // namespace

std::shared_ptr<const ShardingDecision> propagate_uncached(const OpCall& call,
                                                           const PropagateOptions& options) {
  return decide(call, hw_of(options));
}

std::shared_ptr<const ShardingDecision> propagate(const OpCall& call, const PropagateOptions& options) {
  const HardwareProfile& hw = hw_of(options);
  const size_t key = call.hash() ^ (reinterpret_cast<uintptr_t>(&hw) * 0x9e3779b97f4a7c15ull);
  Cache& c = t_cache;
  auto it = c.index.find(key);
  if (it != c.index.end() && it->second->hw == &hw && it->second->call.same_key(call)) {
    c.lru.splice(c.lru.begin(), c.lru, it->second);  // no allocation
    return it->second->decision;
  }
  auto d = decide(call, hw);
  if (it != c.index.end()) {  // hash collision: replace the old entry
    c.lru.erase(it->second);
    c.index.erase(it);
  }
  c.lru.push_front({call, &hw, key, d});
  c.index[key] = c.lru.begin();
  while (c.lru.size() > g_capacity) {
    c.index.erase(c.lru.back().key);
    c.lru.pop_back();
  }
  return d;
}

std::vector<std::pair<Strategy, double>> rank_strategies(const OpCall& call,
                                                         const PropagateOptions& options) {
  std::vector<TensorMeta> meta;
  auto cands = candidates(call, hw_of(options), &meta);
  std::stable_sort(cands.begin(), cands.end(), better);
  std::vector<std::pair<Strategy, double>> out;
  for (auto& c : cands) out.emplace_back(std::move(c.strategy), c.cost);
  return out;
}

void set_propagation_cache_capacity(size_t entries) { g_capacity = std::max<size_t>(entries, 1); }
size_t propagation_cache_size() { return t_cache.lru.size(); }

}  // namespace dtensor
