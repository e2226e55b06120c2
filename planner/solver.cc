#include "planner/solver.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <queue>
#include <thread>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "dtensor/core/error.h"

namespace dtensor::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool same_map(const ClassMapPtr& x, const ClassMapPtr& y) {
  return x == y || (x->count == y->count && x->of == y->of);
}

// Rows: classes of v; columns: classes of the other variable.
Table oriented(const Factor& f, int v) {
  if (f.a == v) return f.t;
  const int ra = f.ma->count, rb = f.mb->count;
  const std::vector<double>& src = *f.t;
  auto t = std::make_shared<std::vector<double>>(src.size());
  for (int i = 0; i < ra; ++i)
    for (int j = 0; j < rb; ++j) (*t)[static_cast<size_t>(j) * ra + i] = src[static_cast<size_t>(i) * rb + j];
  return t;
}

// The classes of a domain under two maps at once; parts[j] = (class in x, class in y).
ClassMapPtr joint(const ClassMap& x, const ClassMap& y, std::vector<std::pair<int, int>>* parts) {
  auto m = std::make_shared<ClassMap>();
  m->of.resize(x.of.size());
  absl::flat_hash_map<int64_t, int> ids;
  for (size_t s = 0; s < x.of.size(); ++s) {
    int64_t key = static_cast<int64_t>(x.of[s]) * y.count + y.of[s];
    auto [it, fresh] = ids.emplace(key, m->count);
    if (fresh) {
      ++m->count;
      parts->push_back({x.of[s], y.of[s]});
    }
    m->of[s] = it->second;
  }
  return m;
}

struct Group {
  int c1, c2;
  double w;
  int32_t s;
};

struct Elim {
  int v = -1;
  int a = -1, b = -1;
  ClassMapPtr ma, mb;
  std::vector<int32_t> arg;  // none or one neighbour: the best value per neighbour class
  // Two neighbours: the argument is recomputed on backtracking from the groups and the oriented
  // tables (keeping the elimination's inner loop a pure, vectorizable minimum).
  std::vector<Group> groups;
  Table t1, t2;
  int32_t best(int ca, int cb) const {
    const int na = ma->count, nb = mb->count;
    double bv = std::numeric_limits<double>::infinity();
    int32_t bs = groups.empty() ? 0 : groups[0].s;
    for (const Group& g : groups) {
      const double val = g.w + (*t1)[static_cast<size_t>(g.c1) * na + ca] + (*t2)[static_cast<size_t>(g.c2) * nb + cb];
      if (val < bv) {
        bv = val;
        bs = g.s;
      }
    }
    return bs;
  }
};

// g[i][j] = min over groups of w + t1[c1][i] + t2[c2][j], rows [i0, i1).
__attribute__((target_clones("avx2", "default"))) void min_plus(const std::vector<Group>& groups, const double* t1, const double* t2, int ca, int cb, int i0, int i1,
              double* g) {
  for (const Group& gr : groups) {
    const double* row2 = t2 + static_cast<size_t>(gr.c2) * cb;
    const double* row1 = t1 + static_cast<size_t>(gr.c1) * ca;
    for (int i = i0; i < i1; ++i) {
      const double base = gr.w + row1[i];
      if (base == kInf) continue;
      double* gi = g + static_cast<size_t>(i) * cb;
      for (int j = 0; j < cb; ++j) gi[j] = std::min(gi[j], base + row2[j]);
    }
  }
}

struct State {
  std::vector<std::vector<double>> unary;
  std::vector<Factor> factors;  // dead when a < 0
  std::vector<std::vector<int>> adj;
  std::vector<int> deg;
  std::vector<char> gone, kept;
  double constant = 0;

  int other(const Factor& f, int v) const { return f.a == v ? f.b : f.a; }
  const ClassMapPtr& map_of(const Factor& f, int v) const { return f.a == v ? f.ma : f.mb; }

  std::vector<int> live(int v) {
    auto& l = adj[v];
    l.erase(std::remove_if(l.begin(), l.end(), [&](int id) { return factors[id].a < 0; }), l.end());
    return l;
  }
  int find(int a, int b) {
    for (int id : live(a)) {
      const Factor& f = factors[id];
      if ((f.a == a && f.b == b) || (f.a == b && f.b == a)) return id;
    }
    return -1;
  }
  void kill(int id) {
    Factor& f = factors[id];
    --deg[f.a];
    --deg[f.b];
    f.a = f.b = -1;
    f.t.reset();
  }
  void add(Factor f) {
    int id = find(f.a, f.b);
    if (id < 0) {
      factors.push_back(std::move(f));
      id = static_cast<int>(factors.size()) - 1;
      const Factor& g = factors.back();
      adj[g.a].push_back(id);
      adj[g.b].push_back(id);
      ++deg[g.a];
      ++deg[g.b];
      return;
    }
    Factor& d = factors[id];
    // Orient f like d.
    if (f.a != d.a) {
      f.t = oriented(f, d.a);
      std::swap(f.a, f.b);
      std::swap(f.ma, f.mb);
    }
    if (same_map(d.ma, f.ma) && same_map(d.mb, f.mb)) {
      auto sum = std::make_shared<std::vector<double>>(*d.t);
      for (size_t i = 0; i < sum->size(); ++i) (*sum)[i] += (*f.t)[i];
      d.t = std::move(sum);
      return;
    }
    std::vector<std::pair<int, int>> pa, pb;
    ClassMapPtr ja = joint(*d.ma, *f.ma, &pa), jb = joint(*d.mb, *f.mb, &pb);
    auto t = std::make_shared<std::vector<double>>(static_cast<size_t>(ja->count) * jb->count);
    const int db = d.mb->count, fb = f.mb->count;
    for (int i = 0; i < ja->count; ++i)
      for (int j = 0; j < jb->count; ++j)
        (*t)[static_cast<size_t>(i) * jb->count + j] =
            (*d.t)[static_cast<size_t>(pa[i].first) * db + pb[j].first] +
            (*f.t)[static_cast<size_t>(pa[i].second) * fb + pb[j].second];
    d.ma = ja;
    d.mb = jb;
    d.t = std::move(t);
  }
};

struct Node {
  std::vector<Elim> elims;
  int branch_var = -1;
  std::vector<int> branch_vals;
  std::vector<std::unique_ptr<Node>> children;
  std::vector<int32_t> best_child;
  std::vector<double> table;
  bool exact = true;
};

// Least unary cost per class of v (and the value reaching it).
void fold_unary(const std::vector<double>& u, const ClassMap& m, std::vector<double>* w,
                std::vector<int32_t>* arg) {
  w->assign(m.count, kInf);
  arg->assign(m.count, -1);
  for (size_t s = 0; s < u.size(); ++s) {
    const int c = m.of[s];
    if ((*arg)[c] < 0 || u[s] < (*w)[c]) {
      (*w)[c] = u[s];
      (*arg)[c] = static_cast<int32_t>(s);
    }
  }
  for (auto& a : *arg) a = std::max<int32_t>(a, 0);
}

Elim eliminate(State& st, int v) {
  Elim e;
  e.v = v;
  std::vector<int> fs = st.live(v);
  const auto& u = st.unary[v];
  if (fs.empty()) {
    int best = static_cast<int>(std::min_element(u.begin(), u.end()) - u.begin());
    st.constant += u[best];
    e.arg = {best};
  } else if (fs.size() == 1) {
    const Factor& f = st.factors[fs[0]];
    const int n = st.other(f, v);
    const ClassMapPtr mv = st.map_of(f, v), mn = st.map_of(f, n);
    const Table tp = oriented(f, v);
    const std::vector<double>& t = *tp;
    std::vector<double> w;
    std::vector<int32_t> ws;
    fold_unary(u, *mv, &w, &ws);
    const int cn = mn->count;
    std::vector<double> m(cn, kInf);
    e.arg.assign(cn, ws.empty() ? 0 : ws[0]);
    for (int cv = 0; cv < mv->count; ++cv) {
      if (w[cv] == kInf) continue;
      const double* row = &t[static_cast<size_t>(cv) * cn];
      for (int c = 0; c < cn; ++c) {
        double val = w[cv] + row[c];
        if (val < m[c]) {
          m[c] = val;
          e.arg[c] = ws[cv];
        }
      }
    }
    auto& un = st.unary[n];
    for (size_t s = 0; s < un.size(); ++s) un[s] += m[mn->of[s]];
    e.a = n;
    e.ma = mn;
    st.kill(fs[0]);
  } else {
    const Factor& f1 = st.factors[fs[0]];
    const Factor& f2 = st.factors[fs[1]];
    const int a = st.other(f1, v), b = st.other(f2, v);
    const ClassMapPtr m1 = st.map_of(f1, v), m2 = st.map_of(f2, v);
    const ClassMapPtr ma = st.map_of(f1, a), mb = st.map_of(f2, b);
    const Table t1p = oriented(f1, v), t2p = oriented(f2, v);
    const std::vector<double>& t1 = *t1p;
    const std::vector<double>& t2 = *t2p;
    // Group v's values by (class under f1, class under f2), keeping the cheapest.
    std::vector<Group> groups;
    absl::flat_hash_map<int64_t, int> index;
    for (size_t s = 0; s < u.size(); ++s) {
      if (u[s] == kInf) continue;
      int64_t key = static_cast<int64_t>(m1->of[s]) * m2->count + m2->of[s];
      auto [it, fresh] = index.emplace(key, static_cast<int>(groups.size()));
      if (fresh) groups.push_back({m1->of[s], m2->of[s], u[s], static_cast<int32_t>(s)});
      else if (u[s] < groups[it->second].w) groups[it->second] = {m1->of[s], m2->of[s], u[s], static_cast<int32_t>(s)};
    }
    const int ca = ma->count, cb = mb->count;
    std::vector<double> g(static_cast<size_t>(ca) * cb, kInf);
    // g[i][j] = min over groups of w + t1[c1][i] + t2[c2][j]. Folding the groups into one side
    // first leaves a min-plus product over the distinct classes of the other side.
    std::vector<char> seen1(m1->count, 0), seen2(m2->count, 0);
    int d1 = 0, d2 = 0;
    for (const Group& gr : groups) {
      d1 += !seen1[gr.c1];
      d2 += !seen2[gr.c2];
      seen1[gr.c1] = seen2[gr.c2] = 1;
    }
    std::vector<Group> pass;
    std::vector<double> h;
    const double* left = t1.data();
    const double* right = t2.data();
    if (d2 <= d1) {  // h[c2][i] = min over groups of w + t1[c1][i]
      h.assign(static_cast<size_t>(m2->count) * ca, kInf);
      for (const Group& gr : groups) {
        const double* r1 = &t1[static_cast<size_t>(gr.c1) * ca];
        double* hr = &h[static_cast<size_t>(gr.c2) * ca];
        for (int i = 0; i < ca; ++i) hr[i] = std::min(hr[i], gr.w + r1[i]);
      }
      left = h.data();
      for (int c = 0; c < m2->count; ++c)
        if (seen2[c]) pass.push_back({c, c, 0.0, 0});
    } else {  // h[c1][j] = min over groups of w + t2[c2][j]
      h.assign(static_cast<size_t>(m1->count) * cb, kInf);
      for (const Group& gr : groups) {
        const double* r2 = &t2[static_cast<size_t>(gr.c2) * cb];
        double* hr = &h[static_cast<size_t>(gr.c1) * cb];
        for (int j = 0; j < cb; ++j) hr[j] = std::min(hr[j], gr.w + r2[j]);
      }
      right = h.data();
      for (int c = 0; c < m1->count; ++c)
        if (seen1[c]) pass.push_back({c, c, 0.0, 0});
    }
    const double work = static_cast<double>(pass.size()) * ca * cb;
    if (work > 4e6 && ca >= 2) {
      // Two halves of the rows on two threads.
      const int mid = ca / 2;
      std::thread other(min_plus, std::cref(pass), left, right, ca, cb, mid, ca, g.data());
      min_plus(pass, left, right, ca, cb, 0, mid, g.data());
      other.join();
    } else {
      min_plus(pass, left, right, ca, cb, 0, ca, g.data());
    }
    e.groups = std::move(groups);
    e.t1 = t1p;
    e.t2 = t2p;
    e.a = a;
    e.b = b;
    e.ma = ma;
    e.mb = mb;
    st.kill(fs[0]);
    st.kill(fs[1]);
    st.add(Factor{a, b, ma, mb, std::make_shared<const std::vector<double>>(std::move(g))});
  }
  st.gone[v] = 1;
  return e;
}

// Conditions v on value x: its factors become unary costs of its neighbours.
void fix(State& st, int v, int x) {
  for (int id : st.live(v)) {
    const Factor& f = st.factors[id];
    const int n = st.other(f, v);
    const ClassMapPtr mv = st.map_of(f, v), mn = st.map_of(f, n);
    const Table tp = oriented(f, v);
    const double* row = &(*tp)[static_cast<size_t>(mv->of[x]) * mn->count];
    auto& un = st.unary[n];
    for (size_t s = 0; s < un.size(); ++s) un[s] += row[mn->of[s]];
    st.kill(id);
  }
  st.constant += st.unary[v][x];
  st.gone[v] = 1;
}

// The value of v that looks best with its neighbours free (for heuristic conditioning).
int local_best(State& st, int v) {
  std::vector<double> score = st.unary[v];
  for (int id : st.live(v)) {
    const Factor& f = st.factors[id];
    const int n = st.other(f, v);
    const ClassMapPtr mv = st.map_of(f, v), mn = st.map_of(f, n);
    const Table tp = oriented(f, v);
    std::vector<double> w;
    std::vector<int32_t> ws;
    fold_unary(st.unary[n], *mn, &w, &ws);
    for (size_t s = 0; s < score.size(); ++s) {
      const double* row = &(*tp)[static_cast<size_t>(mv->of[s]) * mn->count];
      double best = kInf;
      for (int c = 0; c < mn->count; ++c) best = std::min(best, row[c] + w[c]);
      score[s] += best;
    }
  }
  return static_cast<int>(std::min_element(score.begin(), score.end()) - score.begin());
}

void run(State& st, Node& node, const std::vector<int>& keep, int64_t budget) {
  const int n = static_cast<int>(st.unary.size());
  // Candidates of degree <= 1, lowest index first (the order a scan from 0 would find them): a
  // scan per elimination made a 200k-op chain quadratic. Entries are checked when popped; a
  // variable's degree only drops when a neighbour goes, and then the neighbour is pushed again.
  std::priority_queue<int, std::vector<int>, std::greater<int>> leaves;
  for (int v = 0; v < n; ++v)
    if (!st.gone[v] && !st.kept[v] && st.deg[v] <= 1) leaves.push(v);
  // Eliminates v; its neighbours left with at most one neighbour become candidates.
  auto eliminate_queued = [&](int v) {
    std::vector<int> nbrs;
    for (int id : st.live(v)) nbrs.push_back(st.other(st.factors[id], v));
    node.elims.push_back(eliminate(st, v));
    for (int u : nbrs)
      if (!st.gone[u] && !st.kept[u] && st.deg[u] <= 1) leaves.push(u);
  };
  while (true) {
    while (!leaves.empty() && (st.gone[leaves.top()] || st.kept[leaves.top()] || st.deg[leaves.top()] > 1))
      leaves.pop();
    if (!leaves.empty()) {
      const int v = leaves.top();
      leaves.pop();
      eliminate_queued(v);
      continue;
    }
    // No variable with at most one neighbour: the two-neighbour variable whose elimination does the
    // least work (values x classes of both neighbours).
    int pick = -1;
    double best_work = 0;
    for (int v = 0; v < n; ++v) {
      if (st.gone[v] || st.kept[v]) continue;
      if (st.deg[v] <= 1) {
        pick = v;
        break;
      }
      if (st.deg[v] > 2) {
        if (pick < 0 || (st.deg[pick] > 2 && st.deg[v] < st.deg[pick])) pick = v;
        continue;
      }
      std::vector<int> fs = st.live(v);
      const Factor& f1 = st.factors[fs[0]];
      const Factor& f2 = st.factors[fs[1]];
      const double groups = std::min<double>(static_cast<double>(st.unary[v].size()),
                                             static_cast<double>(st.map_of(f1, v)->count) * st.map_of(f2, v)->count);
      const double work = groups * st.map_of(f1, st.other(f1, v))->count * st.map_of(f2, st.other(f2, v))->count;
      if (pick < 0 || st.deg[pick] > 2 || work < best_work) {
        pick = v;
        best_work = work;
      }
    }
    if (pick < 0) break;
    if (st.deg[pick] <= 2) {
      eliminate_queued(pick);
      continue;
    }
    // Stuck: condition on the variable with the most neighbours.
    int c = -1;
    for (int v = 0; v < n; ++v) {
      if (st.gone[v] || st.kept[v]) continue;
      if (c < 0 || st.deg[v] > st.deg[c] ||
          (st.deg[v] == st.deg[c] && st.unary[v].size() < st.unary[c].size()))
        c = v;
    }
    const int64_t d = static_cast<int64_t>(st.unary[c].size());
    node.branch_var = c;
    if (budget >= d) {
      for (int x = 0; x < d; ++x)
        if (st.unary[c][x] < kInf) node.branch_vals.push_back(x);
      if (node.branch_vals.empty()) node.branch_vals.push_back(0);
    } else {
      node.branch_vals.push_back(local_best(st, c));
      node.exact = false;
    }
    const int64_t child_budget = budget / std::max<int64_t>(1, static_cast<int64_t>(node.branch_vals.size()));
    for (int x : node.branch_vals) {
      State child = st;
      fix(child, c, x);
      auto cn = std::make_unique<Node>();
      run(child, *cn, keep, child_budget);
      node.exact &= cn->exact;
      if (node.table.empty()) {
        node.table = cn->table;
        node.best_child.assign(node.table.size(), 0);
      } else {
        for (size_t i = 0; i < node.table.size(); ++i)
          if (cn->table[i] < node.table[i]) {
            node.table[i] = cn->table[i];
            node.best_child[i] = static_cast<int32_t>(node.children.size());
          }
      }
      node.children.push_back(std::move(cn));
    }
    return;
  }
  // Only kept variables remain: tabulate.
  if (keep.empty()) {
    node.table = {st.constant};
  } else if (keep.size() == 1) {
    node.table = st.unary[keep[0]];
    for (double& x : node.table) x += st.constant;
  } else {
    const int a = keep[0], b = keep[1];
    const size_t da = st.unary[a].size(), db = st.unary[b].size();
    node.table.assign(da * db, st.constant);
    int id = st.find(a, b);
    Table t;
    ClassMapPtr ma, mb;
    if (id >= 0) {
      t = oriented(st.factors[id], a);
      ma = st.map_of(st.factors[id], a);
      mb = st.map_of(st.factors[id], b);
    }
    for (size_t i = 0; i < da; ++i)
      for (size_t j = 0; j < db; ++j) {
        double v = st.unary[a][i] + st.unary[b][j];
        if (id >= 0) v += (*t)[static_cast<size_t>(ma->of[i]) * mb->count + mb->of[j]];
        node.table[i * db + j] += v;
      }
  }
}

void assign(const Node& node, size_t ent, std::vector<int>& x) {
  if (!node.children.empty()) {
    const int ch = node.best_child[ent];
    x[node.branch_var] = node.branch_vals[ch];
    assign(*node.children[ch], ent, x);
  }
  for (auto it = node.elims.rbegin(); it != node.elims.rend(); ++it) {
    const Elim& e = *it;
    if (e.a < 0) x[e.v] = e.arg[0];
    else if (e.b < 0) x[e.v] = e.arg[e.ma->of[x[e.a]]];
    else x[e.v] = e.best(e.ma->of[x[e.a]], e.mb->of[x[e.b]]);
  }
}

class ReductionImpl : public Reduction {
 public:
  ReductionImpl(std::vector<int> keep, std::vector<size_t> domains, std::unique_ptr<Node> root)
      : domains_(std::move(domains)), root_(std::move(root)) {
    kept_ = std::move(keep);
    table_ = std::make_shared<const std::vector<double>>(root_->table);
    exact_ = root_->exact;
  }
  std::vector<int> backtrack(const std::vector<int>& vals) const override {
    DT_CHECK(vals.size() == kept_.size(), "planner solver: backtrack needs ", kept_.size(), " kept values");
    std::vector<int> x(domains_.size(), 0);
    size_t ent = 0;
    if (kept_.size() == 1) ent = vals[0];
    if (kept_.size() == 2) ent = static_cast<size_t>(vals[0]) * domains_[kept_[1]] + vals[1];
    for (size_t i = 0; i < kept_.size(); ++i) x[kept_[i]] = vals[i];
    assign(*root_, ent, x);
    return x;
  }

 private:
  std::vector<size_t> domains_;
  std::unique_ptr<Node> root_;
};

}  // namespace

ClassMapPtr identity_classes(int n) {
  static std::mutex mu;
  static auto* cache = new std::vector<ClassMapPtr>();
  std::lock_guard<std::mutex> l(mu);
  if (static_cast<int>(cache->size()) <= n) cache->resize(n + 1);
  auto& slot = (*cache)[n];
  if (!slot) {
    auto m = std::make_shared<ClassMap>();
    m->count = n;
    m->of.resize(n);
    for (int i = 0; i < n; ++i) m->of[i] = i;
    slot = m;
  }
  return slot;
}

ClassMapPtr classes_from_keys(const std::vector<uint64_t>& keys) {
  auto m = std::make_shared<ClassMap>();
  m->of.resize(keys.size());
  absl::flat_hash_map<uint64_t, int> ids;
  for (size_t s = 0; s < keys.size(); ++s) {
    auto [it, fresh] = ids.emplace(keys[s], m->count);
    if (fresh) ++m->count;
    m->of[s] = it->second;
  }
  return m;
}

int MinSumProblem::add_var(std::vector<double> unary) {
  DT_CHECK(!unary.empty(), "planner solver: a variable needs at least one choice");
  unary_.push_back(std::move(unary));
  return num_vars() - 1;
}

void MinSumProblem::add_factor(int a, ClassMapPtr ma, int b, ClassMapPtr mb, std::vector<double> table) {
  add_factor(a, std::move(ma), b, std::move(mb), std::make_shared<const std::vector<double>>(std::move(table)));
}

void MinSumProblem::add_factor(int a, ClassMapPtr ma, int b, ClassMapPtr mb, Table table) {
  DT_CHECK(a >= 0 && b >= 0 && a < num_vars() && b < num_vars() && a != b,
           "planner solver: factor on variables ", a, " and ", b, " of ", num_vars());
  DT_CHECK(ma && mb && static_cast<int>(ma->of.size()) == domain(a) && static_cast<int>(mb->of.size()) == domain(b),
           "planner solver: class maps must cover the domains of ", a, " and ", b);
  DT_CHECK(table && table->size() == static_cast<size_t>(ma->count) * mb->count, "planner solver: factor table has ",
           table ? table->size() : 0, " entries, expected ", ma->count, " x ", mb->count);
  factors_.push_back(Factor{a, b, std::move(ma), std::move(mb), std::move(table)});
}

double MinSumProblem::cost(const std::vector<int>& x) const {
  double c = 0;
  for (int v = 0; v < num_vars(); ++v) c += unary_[v][x[v]];
  for (const Factor& f : factors_) c += (*f.t)[static_cast<size_t>(f.ma->of[x[f.a]]) * f.mb->count + f.mb->of[x[f.b]]];
  return c;
}

std::shared_ptr<const Reduction> reduce(const MinSumProblem& p, const std::vector<int>& keep,
                                        const SolveOptions& options) {
  DT_CHECK(keep.size() <= 2, "planner solver: at most two kept variables");
  State st;
  const int n = p.num_vars();
  st.unary.resize(n);
  for (int v = 0; v < n; ++v) st.unary[v] = p.unary(v);
  st.adj.resize(n);
  st.deg.assign(n, 0);
  st.gone.assign(n, 0);
  st.kept.assign(n, 0);
  for (int k : keep) {
    DT_CHECK(k >= 0 && k < n, "planner solver: kept variable ", k, " out of range");
    st.kept[k] = 1;
  }
  for (const Factor& f : p.factors()) st.add(f);
  auto root = std::make_unique<Node>();
  run(st, *root, keep, std::max<int64_t>(1, options.branch_budget));
  std::vector<size_t> domains(n);
  for (int v = 0; v < n; ++v) domains[v] = p.unary(v).size();
  return std::make_shared<ReductionImpl>(keep, std::move(domains), std::move(root));
}

Solution solve(const MinSumProblem& p, const SolveOptions& options) {
  Solution s;
  if (p.num_vars() == 0) return s;
  auto r = reduce(p, {}, options);
  s.x = r->backtrack({});
  s.cost = p.cost(s.x);
  s.exact = r->exact();
  return s;
}

Solution solve_exhaustive(const MinSumProblem& p, int64_t limit) {
  const int n = p.num_vars();
  double total = 1;
  for (int v = 0; v < n; ++v) total *= p.domain(v);
  DT_CHECK(total <= static_cast<double>(limit), "planner solver: exhaustive search over ", total,
           " assignments exceeds the limit of ", limit);
  Solution best;
  best.cost = kInf;
  std::vector<int> x(n, 0);
  while (true) {
    double c = p.cost(x);
    if (best.x.empty() || c < best.cost) {
      best.cost = c;
      best.x = x;
    }
    int i = n - 1;
    while (i >= 0 && ++x[i] == p.domain(i)) x[i--] = 0;
    if (i < 0) break;
  }
  return best;
}

}  // namespace dtensor::planner
