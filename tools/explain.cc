#include "tools/explain.h"

#include <cmath>

#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "nlohmann/json.hpp"

namespace dtensor::tools {
namespace {

using json = nlohmann::json;

struct Parsed {
  Shape mesh;
  std::string op;
  std::vector<ArgValue> positional;
  std::vector<std::pair<std::string, ArgValue>> keyword;
  std::vector<TensorMeta> tensors;
  std::vector<Placements> placements;
  bool run = false;
};

bool is_tensor(const json& j) { return j.is_object() && j.contains("shape"); }

int add_tensor(const json& j, Parsed& p) {
  TensorMeta m;
  for (const auto& s : j.at("shape")) {
    DT_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0, "tensor shape ", j.at("shape").dump(),
             " must list non-negative integers");
    m.shape.push_back(s.get<int64_t>());
  }
  m.dtype = dtype_from_name(j.value("dtype", std::string("float32")));
  Placements pl;
  if (j.contains("placements")) {
    for (const auto& s : j.at("placements")) pl.push_back(Placement::parse(s.get<std::string>()));
  } else {
    pl.assign(p.mesh.size(), Replicate());
  }
  p.tensors.push_back(std::move(m));
  p.placements.push_back(std::move(pl));
  return static_cast<int>(p.tensors.size()) - 1;
}

ArgValue to_arg(const json& j, Parsed& p) {
  if (is_tensor(j)) return TensorRef{add_tensor(j, p)};
  if (j.is_null()) return IValue{};
  if (j.is_boolean()) return IValue(j.get<bool>());
  if (j.is_number_integer()) return IValue(j.get<int64_t>());
  if (j.is_number()) return IValue(j.get<double>());
  if (j.is_string()) return IValue(j.get<std::string>());
  if (j.is_array()) {
    if (!j.empty() && is_tensor(j[0])) {
      TensorListRef ref;
      for (const auto& e : j) ref.indices.push_back(add_tensor(e, p));
      return ref;
    }
    bool ints = true;
    for (const auto& e : j) {
      DT_CHECK(e.is_number(), "list argument ", j.dump(), " must hold numbers or tensors");
      ints &= e.is_number_integer();
    }
    if (ints) return IValue(j.get<std::vector<int64_t>>());
    return IValue(j.get<std::vector<double>>());
  }
  DT_FAIL("argument ", j.dump(), " is not a tensor, number, string, bool, list or null");
}

Parsed parse(const json& req) {
  DT_CHECK(req.is_object(), "a request must be a JSON object");
  Parsed p;
  DT_CHECK(req.contains("mesh") && req["mesh"].is_array() && !req["mesh"].empty(),
           "\"mesh\" must be a non-empty list of mesh dim sizes, e.g. [4] or [2, 2]");
  for (const auto& s : req["mesh"]) {
    DT_CHECK(s.is_number_integer() && s.get<int64_t>() >= 1, "mesh sizes must be positive integers");
    p.mesh.push_back(s.get<int64_t>());
  }
  DT_CHECK(req.contains("op") && req["op"].is_string(), "\"op\" must be an ATen op name");
  p.op = req["op"].get<std::string>();
  if (req.contains("args")) {
    DT_CHECK(req["args"].is_array(), "\"args\" must be a list");
    for (const auto& a : req["args"]) p.positional.push_back(to_arg(a, p));
  }
  if (req.contains("kwargs")) {
    DT_CHECK(req["kwargs"].is_object(), "\"kwargs\" must be an object");
    for (const auto& [k, v] : req["kwargs"].items()) p.keyword.emplace_back(k, to_arg(v, p));
  }
  p.run = req.value("run", false);
  return p;
}

json placements_json(const Placements& p) {
  json a = json::array();
  for (const auto& x : p) a.push_back(x.str());
  return a;
}

double tolerance(DType dt) {
  switch (dt) {
    case DType::kFloat64: return 1e-9;
    case DType::kFloat32: return 1e-4;
    case DType::kBFloat16:
    case DType::kFloat16: return 3e-2;
    default: return 0;
  }
}

// Runs the decision on a threads world and compares with the single-device op.
json run_check(const OpCall& call, const ShardingDecision& d, const ExplainOptions& o) {
  std::vector<Tensor> globals;
  for (int t = 0; t < call.num_tensors(); ++t) {
    uint64_t seed = o.seed + 7919 * static_cast<uint64_t>(t);
    globals.push_back(call.op().make_input ? call.op().make_input(t, call, seed)
                                           : random_tensor(call.tensor(t).shape, call.tensor(t).dtype, seed));
  }
  std::vector<Tensor> want = run_single_device(call, globals);
  std::vector<Tensor> got(want.size());
  const int world = static_cast<int>(numel(call.mesh_shape()));
  run_threads(world, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, call.mesh_shape(), {}, {}, o.timeout);
    std::vector<DTensor> inputs;
    for (int t = 0; t < call.num_tensors(); ++t) {
      DTensorSpec spec(mesh, call.placements(t), call.tensor(t).shape, call.tensor(t).dtype);
      inputs.emplace_back(spec, adversarial_local_block(globals[t], spec.placements, call.mesh_shape(),
                                                        mesh->coordinate(), o.seed + t));
    }
    auto outs = execute_strategy(call, d.strategy, d.out_meta, inputs, o.timeout, &d.input_plans);
    for (size_t i = 0; i < outs.size(); ++i) {
      Tensor full = outs[i].full_tensor(o.timeout);
      if (b->rank() == 0) got[i] = full;
    }
  });
  bool match = true;
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].sizes() != want[i].sizes() || got[i].dtype() != want[i].dtype()) {
      match = false;
      continue;
    }
    double tol = tolerance(want[i].dtype());
    double e = max_abs_diff(got[i], want[i]);
    if (std::isnan(e)) {
      match = false;
      continue;
    }
    err = std::max(err, e);
    if (tol == 0 ? !equal(got[i], want[i]) : !allclose(got[i], want[i], tol, tol)) match = false;
  }
  return {{"match", match}, {"max_abs_err", err}};
}

json answer(const json& req, const ExplainOptions& o) {
  init_ops();
  Parsed p = parse(req);
  const OpDef& op = Registry::get().find(p.op);
  OpCall call = OpCall::bind(op, p.positional, p.keyword, p.tensors, p.placements, p.mesh);
  const HardwareProfile& hw = hardware_profile(o.hardware);
  auto d = propagate(call, {&hw});
  json out;
  out["op"] = p.op;
  out["outputs"] = json::array();
  for (size_t i = 0; i < d->out_meta.size(); ++i)
    out["outputs"].push_back({{"shape", d->out_meta[i].shape},
                              {"dtype", dtype_name(d->out_meta[i].dtype)},
                              {"placements", placements_json(d->strategy.outputs[i])}});
  out["inputs"] = json::array();
  for (int t = 0; t < call.num_tensors(); ++t)
    out["inputs"].push_back({{"from", placements_json(call.placements(t))},
                             {"to", placements_json(d->strategy.inputs[t])}});
  out["collectives"] = json::array();
  for (const auto& c : d->collectives)
    out["collectives"].push_back({{"kind", c.kind}, {"mesh_dim", c.mesh_dim}, {"bytes", c.bytes}});
  out["cost_us"] = std::round(d->cost_us * 1000.0) / 1000.0;
  if (p.run) out["run"] = run_check(call, *d, o);
  return out;
}

bool matches_expect(const json& ans, const json& expect) {
  if (ans.contains("error")) return false;
  auto lists = [](const json& items, const char* key) {
    json a = json::array();
    for (const auto& x : items) a.push_back(key ? x.at(key) : x);
    return a;
  };
  if (expect.contains("outputs") && lists(ans["outputs"], "placements") != expect["outputs"]) return false;
  if (expect.contains("inputs") && lists(ans["inputs"], "to") != expect["inputs"]) return false;
  if (ans.contains("run") && !ans["run"]["match"].get<bool>()) return false;
  return true;
}

}  // namespace

std::string explain_line(const std::string& line, const ExplainOptions& options) {
  json req;
  try {
    req = json::parse(line);
  } catch (const std::exception& e) {
    return json{{"error", std::string("malformed JSON: ") + e.what()}}.dump();
  }
  try {
    if (req.is_object() && req.contains("case")) {
      json ans = answer(req["case"], options);
      if (req.contains("expect")) ans["expect_match"] = matches_expect(ans, req["expect"]);
      return ans.dump();
    }
    return answer(req, options).dump();
  } catch (const std::exception& e) {
    return json{{"error", e.what()}}.dump();
  }
}

}  // namespace dtensor::tools
