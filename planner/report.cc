#include "planner/report.h"

#include <cstdlib>
#include <map>
#include <sstream>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/graphviz.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace dtensor::planner {
namespace {

using json = nlohmann::json;

const char* abbrev(CommKind kind) {
  if (kind == CommKind::kAllGather) return "AG";
  if (kind == CommKind::kAllReduce) return "AR";
  if (kind == CommKind::kReduceScatter) return "RS";
  if (kind == CommKind::kAllToAll) return "A2A";
  if (kind == CommKind::kSendRecv) return "SR";
  return nullptr;
}

std::string short_kind(CommKind kind) {
  const char* a = abbrev(kind);
  return a ? a : comm_kind_name(kind);
}

std::string placements_compact(const Placements& p) {
  std::vector<std::string> s;
  for (const Placement& x : p) s.push_back(x.str());
  return "[" + absl::StrJoin(s, ",") + "]";
}

struct Part {
  std::string name;
  int layer = -1;
  std::map<std::string, int> count[3];  // forward, backward, optimizer: "AR tp" -> n
  int64_t bytes = 0, memory = 0;
  double comm_us = 0, compute_us = 0;
  std::string stream;
  int first = -1, last = -1;  // layers folded into this row
};

int phase_index(const std::string& p) { return p == "forward" ? 0 : p == "backward" ? 1 : 2; }

std::vector<Part> parts_of(const CostModel& cm, const std::vector<const Choice*>& plan, const PlanEval& eval) {
  const ModelGraph& g = cm.graph();
  std::vector<Part> parts;
  std::map<std::string, size_t> index;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& n = g.node(v);
    if (n.kind == NodeKind::kConstant) continue;
    std::string key = n.layer >= 0 ? absl::StrCat("layer ", n.layer) : (n.block.empty() ? "other" : n.block);
    auto [it, fresh] = index.emplace(key, parts.size());
    if (fresh) {
      Part p;
      p.name = key;
      p.layer = n.layer;
      p.first = p.last = n.layer;
      parts.push_back(p);
    }
    Part& p = parts[it->second];
    const VertexReport& vr = eval.vertices[v];
    for (const CollectiveUse& c : vr.collectives)
      ++p.count[phase_index(c.phase)][short_kind(c.kind) + " " + cm.mesh().names[c.mesh_dim]];
    p.bytes += vr.comm_bytes;
    p.comm_us += vr.comm_us;
    p.compute_us += vr.compute_us;
    p.memory += vr.memory_bytes;
    if (n.kind == NodeKind::kOp && plan[v]) p.stream = placements_compact(plan[v]->strategy.outputs[0]);
  }
  return parts;
}

std::string counts_str(const std::map<std::string, int>& m) {
  if (m.empty()) return "-";
  std::vector<std::string> s;
  for (auto& [k, n] : m) s.push_back(absl::StrCat(n, " ", k));
  return absl::StrJoin(s, ", ");
}

std::string mb(int64_t b) { return absl::StrFormat("%.1f", static_cast<double>(b) / 1e6); }
std::string ms(double us) { return absl::StrFormat("%.2f", us / 1e3); }
std::string gbs(double b) { return absl::StrFormat("%.2f", b / 1e9); }

void row(std::ostringstream& o, const std::vector<std::string>& cells, const std::vector<int>& widths) {
  for (size_t i = 0; i < cells.size(); ++i) {
    std::string c = cells[i];
    if (i + 1 < cells.size()) {
      if (static_cast<int>(c.size()) < widths[i]) c.append(widths[i] - c.size(), ' ');
      c += "  ";
    }
    o << c;
  }
  o << "\n";
}

std::string links_str(const CostModel& cm) {
  std::vector<std::string> s;
  const HardwareProfile& hw = cm.hardware();
  for (int i = 0; i < cm.mesh().ndim(); ++i) {
    const LinkModel& l = cm.links()[i];
    bool intra = l == hw.intra_host;
    if (const Cluster* c = cm.shares().cluster)
      for (const ClusterHost& h : c->hosts) intra |= l == h.profile->intra_host;
    s.push_back(absl::StrFormat("%s %s %.0f GB/s %.1f us + %.1f us/step", cm.mesh().names[i],
                                intra ? "intra-host" : "inter-host", l.bandwidth_GBps, l.base_latency_us, l.latency_us));
  }
  return absl::StrJoin(s, "; ");
}

// "dp [317:100]" per weighted mesh dim, or "even".
std::string weights_str(const MeshSpec& mesh, const MeshWeights& w) {
  std::vector<std::string> s;
  for (size_t i = 0; i < w.size(); ++i)
    if (!w[i].empty()) s.push_back(absl::StrCat(mesh.names[i], " [", absl::StrJoin(w[i], ":"), "]"));
  return s.empty() ? "even" : absl::StrJoin(s, ", ");
}

std::string hardware_name(const CostModel& cm, const PlanResult& r) {
  return r.cluster.empty() ? cm.hardware().name : "cluster " + r.cluster;
}

}  // namespace

std::string report_table(const CostModel& cm, const PlanResult& r, const ReportOptions& opt) {
  const ModelGraph& g = cm.graph();
  std::ostringstream o;
  o << "dtensor plan: " << g.name << " — " << g.description << "\n";
  o << "mesh " << cm.mesh().str() << " (" << cm.mesh().size() << " devices) on " << hardware_name(cm, r) << ": "
    << links_str(cm) << "\n";
  o << (g.training ? "training step (forward + backward + " + g.optimizer + " update)" : "inference (forward)")
    << "; memory limit " << gbs(r.memory_limit_bytes) << " GB per device\n\n";
  // Per layer, identical consecutive layers folded.
  std::vector<Part> parts = parts_of(cm, r.plan, r.eval);
  std::vector<Part> rows;
  auto same = [](const Part& a, const Part& b) {
    return a.layer >= 0 && b.layer >= 0 && a.stream == b.stream && a.bytes == b.bytes && a.memory == b.memory &&
           std::abs(a.comm_us - b.comm_us) < 1e-6 && std::abs(a.compute_us - b.compute_us) < 1e-6 &&
           a.count[0] == b.count[0] && a.count[1] == b.count[1] && a.count[2] == b.count[2];
  };
  for (const Part& p : parts) {
    if (!rows.empty() && same(rows.back(), p) && rows.back().last + 1 == p.layer) rows.back().last = p.layer;
    else rows.push_back(p);
  }
  const std::vector<int> w = {16, 16, 30, 30, 20, 11, 8, 10, 9};
  row(o, {"part", "stream out", "forward collectives", "backward collectives", "optimizer coll.", "comm MB/rk",
          "comm ms", "compute ms", "memory GB"}, w);
  for (const Part& p : rows) {
    std::string name = p.name;
    if (p.layer >= 0 && p.last > p.first) name = absl::StrCat("layers ", p.first, "-", p.last, " (each)");
    row(o, {name, p.stream, counts_str(p.count[0]), counts_str(p.count[1]), counts_str(p.count[2]), mb(p.bytes),
            ms(p.comm_us), ms(p.compute_us), gbs(static_cast<double>(p.memory))}, w);
  }
  const PlanEval& e = r.eval;
  row(o, {"total", "", "", "", "", mb(e.comm_bytes), ms(e.comm_us), ms(e.compute_us), gbs(static_cast<double>(e.peak_memory_bytes))}, w);
  o << "\nstep time " << ms(e.step_time_us) << " ms (compute " << ms(e.compute_us) << ", communication "
    << ms(e.comm_us) << ")   peak memory " << gbs(static_cast<double>(e.peak_memory_bytes)) << " GB (parameters "
    << gbs(static_cast<double>(e.param_bytes)) << ", gradients " << gbs(static_cast<double>(e.grad_bytes))
    << ", optimizer " << gbs(static_cast<double>(e.state_bytes)) << ", activations "
    << gbs(static_cast<double>(e.activation_bytes)) << ")\n";
  if (!r.weight_options.empty()) {
    const PlanResult::WeightOption& even = r.weight_options.front();
    o << "\nshares searched (weights per mesh dim = batch rows per coordinate):\n";
    for (const PlanResult::WeightOption& w : r.weight_options) {
      std::string t = w.valid ? absl::StrCat(ms(w.step_time_us), " ms") : w.searched ? "no plan fits" : "not searched: " + w.error;
      if (w.valid && even.valid && &w != &even)
        t += absl::StrFormat(" (%+.1f%% vs even)", 100.0 * (w.step_time_us / even.step_time_us - 1));
      o << absl::StrFormat("  %-22s %-24s %s%s\n", w.basis, weights_str(cm.mesh(), w.weights), t,
                           w.weights == r.weights ? "   <- chosen" : "");
    }
  }
  if (opt.ops) {
    o << "\n";
    const std::vector<int> wo = {34, 22, 44, 50, 11, 9};
    row(o, {"op", "kind", "placements (outputs <- inputs)", "collectives", "compute ms", "mem MB"}, wo);
    for (int v = 0; v < g.num_vertices(); ++v) {
      const Node& n = g.node(v);
      if (!r.plan[v]) continue;
      const Strategy& s = r.plan[v]->strategy;
      std::vector<std::string> outs, ins;
      for (const auto& p : s.outputs) outs.push_back(placements_compact(cm.weigh(p)));
      for (const auto& p : s.inputs) ins.push_back(placements_compact(cm.weigh(p)));
      std::string pl = absl::StrJoin(outs, " ");
      if (!ins.empty()) pl += " <- " + absl::StrJoin(ins, " ");
      std::vector<std::string> cs;
      for (const CollectiveUse& c : r.eval.vertices[v].collectives)
        cs.push_back(absl::StrCat(c.phase.substr(0, 3), ":", short_kind(c.kind), "@", cm.mesh().names[c.mesh_dim], " ",
                                  mb(c.bytes), "MB"));
      row(o, {n.name, n.op, pl, cs.empty() ? "-" : absl::StrJoin(cs, " "), ms(r.eval.vertices[v].compute_us),
              mb(r.eval.vertices[v].memory_bytes)}, wo);
    }
  }
  if (!r.baselines.empty()) {
    o << "\n";
    const std::vector<int> wb = {24, 9, 11, 9, 12, 10, 5};
    row(o, {"plan", "step ms", "compute ms", "comm ms", "comm MB/rk", "memory GB", "fits"}, wb);
    row(o, {"search" + std::string(r.source == "search" ? "" : " (replaced)") + (r.exact ? " (exact)" : " (heuristic)"),
            ms(e.step_time_us), ms(e.compute_us), ms(e.comm_us), mb(e.comm_bytes),
            gbs(static_cast<double>(e.peak_memory_bytes)), "yes"}, wb);
    for (const Baseline& b : r.baselines) {
      if (!b.valid) {
        o << b.name << ": not applicable: " << b.note << "\n";
        continue;
      }
      row(o, {b.name, ms(b.eval.step_time_us), ms(b.eval.compute_us), ms(b.eval.comm_us), mb(b.eval.comm_bytes),
              gbs(static_cast<double>(b.eval.peak_memory_bytes)), b.fits ? "yes" : "no"}, wb);
    }
    for (const Baseline& b : r.baselines)
      if (b.valid && !b.note.empty() && b.name != "greedy") o << "  " << b.name << ": " << b.note << "\n";
  }
  for (const std::string& n : r.notes) o << "note: " << n << "\n";
  o << absl::StrFormat("\nplan time %.1f ms (%d solve%s, %d layer template%s for %d layers%s%s); baselines %.1f ms\n",
                       r.plan_time_ms, r.solves, r.solves == 1 ? "" : "s", r.templates, r.templates == 1 ? "" : "s",
                       r.templated_layers, r.lambda > 1e-8 ? absl::StrFormat(", memory price %.3g us/MB", r.lambda * 1e6) : "",
                       r.mixed_layers > 0 ? absl::StrFormat(", %d layers planned like the faster unfitting plan", r.mixed_layers) : "",
                       r.compare_time_ms);
  return o.str();
}

namespace {

json ops_json(const CostModel& cm, const std::vector<const Choice*>& plan, const PlanEval& eval) {
  const ModelGraph& g = cm.graph();
  json ops = json::array();
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& n = g.node(v);
    if (!plan[v]) continue;
    const Strategy& s = plan[v]->strategy;
    json j;
    j["name"] = n.name;
    j["layer"] = n.layer;
    j["block"] = n.block;
    j["kind"] = node_kind_name(n.kind);
    j["op"] = n.op;
    json outs = json::array(), ins = json::array();
    for (const auto& p : s.outputs) outs.push_back(placements_str(cm.weigh(p)));
    for (const auto& p : s.inputs) ins.push_back(placements_str(cm.weigh(p)));
    j["placements"] = {{"outputs", outs}, {"inputs", ins}};
    json cs = json::array();
    for (const CollectiveUse& c : eval.vertices[v].collectives)
      cs.push_back({{"kind", comm_kind_name(c.kind)}, {"mesh_dim", c.mesh_dim}, {"mesh_dim_name", cm.mesh().names[c.mesh_dim]},
                    {"bytes", c.bytes}, {"time_us", c.time_us}, {"phase", c.phase}, {"what", c.what}});
    j["collectives"] = cs;
    j["compute_us"] = eval.vertices[v].compute_us;
    j["memory_bytes"] = eval.vertices[v].memory_bytes;
    ops.push_back(j);
  }
  return ops;
}

json layers_json(const CostModel& cm, const std::vector<const Choice*>& plan, const PlanEval& eval) {
  json layers = json::array();
  for (const Part& p : parts_of(cm, plan, eval)) {
    json c;
    const char* phases[3] = {"forward", "backward", "optimizer"};
    for (int i = 0; i < 3; ++i) {
      json m = json::object();
      for (auto& [k, n] : p.count[i]) m[k] = n;
      c[phases[i]] = m;
    }
    layers.push_back({{"part", p.name}, {"layer", p.layer}, {"comm_bytes", p.bytes}, {"comm_us", p.comm_us},
                      {"compute_us", p.compute_us}, {"memory_bytes", p.memory}, {"collectives", c}});
  }
  return layers;
}

}  // namespace

std::string report_json(const CostModel& cm, const PlanResult& r, const ReportOptions& opt) {
  const ModelGraph& g = cm.graph();
  json root;
  root["model"] = g.name;
  root["description"] = g.description;
  root["mesh"] = {{"shape", std::vector<int64_t>(cm.mesh().shape.begin(), cm.mesh().shape.end())},
                  {"names", cm.mesh().names}};
  root["hardware"] = hardware_name(cm, r);
  if (!r.cluster.empty() && cm.shares().cluster) {
    auto weights_json = [&](const MeshWeights& w) {
      json j = json::object();
      for (size_t i = 0; i < w.size(); ++i)
        if (!w[i].empty()) j[cm.mesh().names[i]] = w[i];
      return j;
    };
    json opts = json::array();
    for (const PlanResult::WeightOption& w : r.weight_options) {
      json j = {{"basis", w.basis}, {"weights", weights_json(w.weights)}, {"searched", w.searched}, {"valid", w.valid},
                {"plan_time_ms", w.plan_time_ms}};
      if (w.valid) {
        j["step_time_us"] = w.step_time_us;
        j["peak_memory_bytes"] = w.peak_memory_bytes;
      } else {
        j["error"] = w.error;
      }
      opts.push_back(j);
    }
    json hosts = json::array();
    for (const ClusterHost& h : cm.shares().cluster->hosts) hosts.push_back({{"profile", h.profile->name}, {"ranks", h.ranks}});
    root["cluster"] = {{"hosts", hosts}, {"weights", weights_json(r.weights)}, {"options", opts}};
    if (!r.weight_options.empty() && r.weight_options.front().valid)
      root["cluster"]["even_step_time_us"] = r.weight_options.front().step_time_us;
  }
  root["training"] = g.training;
  root["optimizer"] = g.optimizer;
  root["ops"] = ops_json(cm, r.plan, r.eval);
  root["layers"] = layers_json(cm, r.plan, r.eval);
  const PlanEval& e = r.eval;
  root["totals"] = {{"step_time_us", e.step_time_us}, {"compute_us", e.compute_us},   {"comm_us", e.comm_us},
                    {"comm_bytes", e.comm_bytes},     {"peak_memory_bytes", e.peak_memory_bytes},
                    {"param_bytes", e.param_bytes},   {"grad_bytes", e.grad_bytes},
                    {"optimizer_bytes", e.state_bytes}, {"activation_bytes", e.activation_bytes}};
  root["memory_limit_bytes"] = r.memory_limit_bytes;
  root["plan_time_ms"] = r.plan_time_ms;
  root["compare_time_ms"] = r.compare_time_ms;
  root["exact"] = r.exact;
  root["solves"] = r.solves;
  root["lambda"] = r.lambda;
  root["source"] = r.source;
  // The search's own plan even when a baseline replaced it, so a caller can hold the search itself
  // against the baselines (the returned plan is never worse than them by construction).
  root["search"] = {{"step_time_us", r.search_eval.step_time_us},
                    {"comm_bytes", r.search_eval.comm_bytes},
                    {"peak_memory_bytes", r.search_eval.peak_memory_bytes},
                    {"layers", layers_json(cm, r.search_plan, r.search_eval)}};
  root["templates"] = r.templates;
  root["templated_layers"] = r.templated_layers;
  root["mixed_layers"] = r.mixed_layers;
  json bs = json::array();
  for (const Baseline& b : r.baselines) {
    json j = {{"name", b.name}, {"valid", b.valid}, {"fits", b.fits}, {"note", b.note}};
    if (b.valid) {
      j["step_time_us"] = b.eval.step_time_us;
      j["comm_bytes"] = b.eval.comm_bytes;
      j["peak_memory_bytes"] = b.eval.peak_memory_bytes;
      j["layers"] = layers_json(cm, b.plan, b.eval);
      if (opt.baseline_ops) j["ops"] = ops_json(cm, b.plan, b.eval);
    }
    bs.push_back(j);
  }
  root["baselines"] = bs;
  root["notes"] = r.notes;
  return root.dump(1);
}

namespace {

struct DotVertex {
  std::string label, shape, fill;
};
struct DotEdge {
  std::string label;
  bool comm = false;
};
using DotGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, DotVertex, DotEdge>;

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

std::string report_dot(const CostModel& cm, const PlanResult& r, int layers) {
  const ModelGraph& g = cm.graph();
  DotGraph d;
  std::vector<int> id(g.num_vertices(), -1);
  int folded = -1, hidden_layers = 0, max_layer = -1;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& n = g.node(v);
    if (n.kind == NodeKind::kConstant || n.kind == NodeKind::kOptimizer || !r.plan[v]) continue;
    max_layer = std::max(max_layer, n.layer);
    if (n.layer >= layers) {
      if (folded < 0) folded = static_cast<int>(boost::add_vertex(DotVertex{}, d));
      id[v] = folded;
      continue;
    }
    const Strategy& s = r.plan[v]->strategy;
    DotVertex dv;
    dv.label = n.name + "\\n" + n.op + " " + placements_compact(s.outputs[0]);
    if (n.kind == NodeKind::kParam) {
      const int o = cm.optimizer_of(v);
      if (o >= 0 && r.plan[o]) dv.label += "\\noptimizer " + placements_compact(r.plan[o]->placement());
      dv.shape = "box";
      dv.fill = "lightblue";
    } else if (n.kind == NodeKind::kInput) {
      dv.shape = "ellipse";
      dv.fill = "lightyellow";
    } else {
      dv.shape = "box";
      bool comm = false;
      for (const CollectiveUse& c : r.eval.vertices[v].collectives) comm |= c.phase == "forward";
      dv.fill = comm ? "mistyrose" : (n.fused ? "lightgrey" : "white");
    }
    id[v] = static_cast<int>(boost::add_vertex(dv, d));
  }
  hidden_layers = max_layer + 1 - layers;
  if (folded >= 0) {
    d[folded].label = absl::StrCat(hidden_layers, " more layers (", layers, "..", max_layer, "), planned alike");
    d[folded].shape = "box3d";
    d[folded].fill = "whitesmoke";
  }
  for (int v = 0; v < g.num_vertices(); ++v) {
    if (id[v] < 0 || !takes_tensors(g.node(v).kind)) continue;
    const auto& ins = cm.inputs(v);
    for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
      const int u = ins[k].node;
      if (id[u] < 0 || id[u] == id[v]) continue;
      DotEdge e;
      std::vector<std::string> cs;
      for (const CollectiveUse& c : r.eval.vertices[v].collectives)
        if (c.input == k && c.phase == "forward")
          cs.push_back(absl::StrCat(short_kind(c.kind), " ", cm.mesh().names[c.mesh_dim], " ", mb(c.bytes), " MB"));
      e.label = absl::StrJoin(cs, "\\n");
      e.comm = !cs.empty();
      boost::add_edge(id[u], id[v], e, d);
    }
  }
  std::ostringstream o;
  auto vw = [&](std::ostream& out, DotGraph::vertex_descriptor v) {
    out << "[label=\"" << escape(d[v].label) << "\", shape=" << (d[v].shape.empty() ? "box" : d[v].shape)
        << ", style=filled, fillcolor=\"" << (d[v].fill.empty() ? "white" : d[v].fill) << "\"]";
  };
  auto ew = [&](std::ostream& out, DotGraph::edge_descriptor e) {
    if (d[e].comm) out << "[label=\"" << escape(d[e].label) << "\", color=red, fontcolor=red, penwidth=2]";
    else out << "[color=gray40]";
  };
  auto gw = [&](std::ostream& out) {
    out << "label=\"" << escape(g.name + " on " + cm.mesh().str() + " (" + cm.hardware().name + "): step " +
                               ms(r.eval.step_time_us) + " ms, " + mb(r.eval.comm_bytes) + " MB/rank sent, peak " +
                               gbs(static_cast<double>(r.eval.peak_memory_bytes)) + " GB")
        << "\";\nlabelloc=t;\nrankdir=TB;\nnode [fontname=\"Helvetica\", fontsize=10];\nedge [fontname=\"Helvetica\", fontsize=9];\n";
  };
  boost::write_graphviz(o, d, vw, ew, gw);
  return o.str();
}

bool render_svg(const std::string& dot_path, const std::string& svg_path, std::string* why) {
  for (const std::string* p : {&dot_path, &svg_path})
    if (p->find('\'') != std::string::npos) {
      if (why) *why = "paths with a single quote are not passed to dot";
      return false;
    }
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    if (why) *why = "Graphviz 'dot' is not installed (scripts/install_deps.sh installs it)";
    return false;
  }
  const std::string cmd = "dot -Tsvg '" + dot_path + "' -o '" + svg_path + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    if (why) *why = "dot failed: " + cmd;
    return false;
  }
  return true;
}

}  // namespace dtensor::planner
