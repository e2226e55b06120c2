#include "dispatch/explain.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/core/json.h"
#include "dtensor/core/limits.h"
#include "dtensor/partial_split.h"
#include "nlohmann/json.hpp"
#include "ops/flops.h"

namespace dtensor {
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

// The JSON type of a value, for errors.
std::string kind(const json& j) { return j.type_name(); }

// A request field of the wrong JSON type is an error naming the field, not a silent coercion
// (nlohmann iterates a number or a string as a one-element list).
const json& array_field(const json& obj, const char* field, const std::string& where) {
  const json& v = obj.at(field);
  DT_CHECK(v.is_array(), where, "\"", field, "\" must be a list, got ", kind(v), " ", v.dump(-1, ' ', false, json::error_handler_t::replace));
  return v;
}

int add_tensor(const json& j, Parsed& p) {
  const std::string where = "tensor argument " + std::to_string(p.tensors.size()) + ": ";
  for (const auto& [key, v] : j.items()) {
    (void)v;
    DT_CHECK(key == "shape" || key == "dtype" || key == "placements", where, "unknown field \"", key,
             "\"; accepted: shape, dtype, placements");
  }
  TensorMeta m;
  const json& shape = array_field(j, "shape", where);
  DT_CHECK(static_cast<int64_t>(shape.size()) <= kMaxTensorRank, where, "a shape of ", shape.size(),
           " dims; accepted: at most ", kMaxTensorRank);
  for (const auto& s : shape) {
    DT_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0, where, "\"shape\" ", shape.dump(),
             " must list non-negative integers");
    m.shape.push_back(s.get<int64_t>());
  }
  if (j.contains("dtype")) {
    DT_CHECK(j["dtype"].is_string(), where, "\"dtype\" must be a string such as \"float32\", got ",
             kind(j["dtype"]));
    m.dtype = dtype_from_name(j["dtype"].get<std::string>());
  }
  Placements pl;
  if (j.contains("placements")) {
    const json& list = array_field(j, "placements", where);
    DT_CHECK(list.size() == p.mesh.size(), where, "\"placements\" lists ", list.size(),
             " placements for a ", p.mesh.size(), "-d mesh; give one per mesh dim");
    for (const auto& s : list) {
      DT_CHECK(s.is_string(), where, "\"placements\" must list strings such as \"S(0)\", \"R\", \"P(sum)\"; got ",
               kind(s));
      pl.push_back(Placement::parse(s.get<std::string>()));
    }
  } else {
    pl.assign(p.mesh.size(), Replicate());
  }
  p.tensors.push_back(std::move(m));
  p.placements.push_back(std::move(pl));
  return static_cast<int>(p.tensors.size()) - 1;
}

ArgValue to_arg(const json& j, Parsed& p) {
  if (j.is_object()) {
    DT_CHECK(is_tensor(j), "argument ", j.dump(-1, ' ', false, json::error_handler_t::replace),
             " is an object without \"shape\"; a tensor is {\"shape\": [...], \"dtype\": ..., \"placements\": [...]}");
    return TensorRef{add_tensor(j, p)};
  }
  if (j.is_null()) return IValue{};
  if (j.is_boolean()) return IValue(j.get<bool>());
  if (j.is_number_integer()) {
    DT_CHECK(!j.is_number_unsigned() || j.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "argument ",
             j.dump(), " does not fit int64");
    return IValue(j.get<int64_t>());
  }
  if (j.is_number()) return IValue(j.get<double>());
  if (j.is_string()) return IValue(j.get<std::string>());
  if (j.is_array()) {
    auto first = std::find_if(j.begin(), j.end(), [](const json& e) { return !e.is_null(); });
    if (first != j.end() && first->is_object()) {
      TensorListRef ref;
      for (const auto& e : j) {
        if (e.is_null()) {  // None, for a Tensor?[] argument (index.Tensor's [null, i])
          ref.indices.push_back(TensorListRef::kNoTensor);
          continue;
        }
        DT_CHECK(is_tensor(e), "a list of tensors holds ", kind(e),
                 "; every element must be a tensor object (or null, for a Tensor?[] argument)");
        ref.indices.push_back(add_tensor(e, p));
      }
      return ref;
    }
    bool ints = true;
    for (const auto& e : j) {
      DT_CHECK(e.is_number(), "list argument ", j.dump(-1, ' ', false, json::error_handler_t::replace),
               " must hold numbers or tensors");
      DT_CHECK(!e.is_number_unsigned() || e.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
               "list argument ", j.dump(), ": ", e.dump(), " does not fit int64");
      ints &= e.is_number_integer();
    }
    if (ints) return IValue(j.get<std::vector<int64_t>>());
    return IValue(j.get<std::vector<double>>());
  }
  DT_FAIL("argument ", j.dump(), " is not a tensor, number, string, bool, list or null");
}

Parsed parse(const json& req) {
  DT_CHECK(req.is_object(), "a request must be a JSON object, got ", kind(req));
  for (const auto& [key, v] : req.items()) {
    (void)v;
    DT_CHECK(key == "mesh" || key == "op" || key == "args" || key == "kwargs" || key == "run", "unknown field \"",
             key, "\"; accepted: mesh, op, args, kwargs, run");
  }
  Parsed p;
  DT_CHECK(req.contains("mesh") && req["mesh"].is_array() && !req["mesh"].empty(),
           "\"mesh\" must be a non-empty list of mesh dim sizes, e.g. [4] or [2, 2]");
  DT_CHECK(static_cast<int64_t>(req["mesh"].size()) <= kMaxMeshDims, "\"mesh\" has ", req["mesh"].size(),
           " dims; accepted: 1 to ", kMaxMeshDims);
  for (const auto& s : req["mesh"]) {
    DT_CHECK(s.is_number_integer() && s.get<int64_t>() >= 1 && s.get<int64_t>() <= kMaxMeshDimSize,
             "\"mesh\" sizes must be integers from 1 to ", kMaxMeshDimSize, ", got ", s.dump());
    p.mesh.push_back(s.get<int64_t>());
  }
  DT_CHECK(req.contains("op") && req["op"].is_string(), "\"op\" must be an ATen op name (a string)");
  p.op = req["op"].get<std::string>();
  if (req.contains("args")) {
    for (const auto& a : array_field(req, "args", "")) p.positional.push_back(to_arg(a, p));
  }
  if (req.contains("kwargs")) {
    DT_CHECK(req["kwargs"].is_object(), "\"kwargs\" must be an object, got ", kind(req["kwargs"]));
    for (const auto& [k, v] : req["kwargs"].items()) p.keyword.emplace_back(k, to_arg(v, p));
  }
  if (req.contains("run")) {
    DT_CHECK(req["run"].is_boolean(), "\"run\" must be true or false, got ", kind(req["run"]));
    p.run = req["run"].get<bool>();
  }
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

// run:true holds every input and output globally, once per rank (replicated blocks, full_tensor()
// on every rank) and once more for the single-device reference: refuse what would not fit.
void check_run_budget(const OpCall& call, const ShardingDecision& d, const ExplainOptions& o) {
  const int64_t world = numel(call.mesh_shape());
  DT_CHECK(world <= o.max_run_ranks, call.op().name(), ": \"run\": true executes one thread per rank; the mesh ",
           shape_str(call.mesh_shape()), " has ", world, " ranks, accepted: at most ", o.max_run_ranks);
  int64_t bytes = 0;
  auto add = [&](const TensorMeta& m) {
    bytes = checked_add(bytes, checked_mul(numel(m.shape), static_cast<int64_t>(itemsize(m.dtype)), "run bytes"),
                        "run bytes");
  };
  for (int t = 0; t < call.num_tensors(); ++t) add(call.tensor(t));
  for (const auto& m : d.out_meta) add(m);
  const int64_t need = checked_mul(bytes, world + 2, "run bytes");
  DT_CHECK(need <= o.max_run_bytes, call.op().name(), ": \"run\": true would hold about ", need,
           " bytes (inputs and outputs of ", bytes, " bytes, on ", world, " ranks and the reference); accepted: at most ",
           o.max_run_bytes, " bytes (dtensor explain --max-run-bytes)");
  const double work = forward_flops(call, d.out_meta) * static_cast<double>(world + 1);
  DT_CHECK(work <= o.max_run_flops, call.op().name(), ": \"run\": true would do about ", absl::StrFormat("%.3g", work),
           " FLOPs (the op's ", absl::StrFormat("%.3g", work / static_cast<double>(world + 1)), " on ", world,
           " ranks and the reference); accepted: at most ", absl::StrFormat("%.3g", o.max_run_flops),
           " (dtensor explain --max-run-flops)");
}

// Runs the decision on a threads world and compares with the single-device op.
json run_check(const OpCall& call, const ShardingDecision& d, const ExplainOptions& o) {
  check_run_budget(call, d, o);
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
  OpCall call = OpCall::bind_overload(p.op, p.positional, p.keyword, p.tensors, p.placements, p.mesh);
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
    out["collectives"].push_back({{"kind", comm_kind_name(c.kind)}, {"mesh_dim", c.mesh_dim}, {"bytes", c.bytes}});
  out["cost_us"] = std::round(d->cost_us * 1000.0) / 1000.0;
  // The distributed step the strategy runs (e.g. "ring_attention"), when it runs one.
  if (d->strategy.step() != 0) out["step"] = call.op().steps.at(d->strategy.step() - 1).name;
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

// Bytes that are not UTF-8 (in an op name echoed back, or in a parser message quoting the input)
// become U+FFFD rather than an exception: one answer per line, whatever the line holds.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_line(const std::string& message) { return dump(json{{"error", message}}); }

std::string answer_line(const std::string& line, const ExplainOptions& options) {
  if (line.size() > options.max_line_bytes)
    return error_line("request line of " + std::to_string(line.size()) + " bytes; accepted: at most " +
                      std::to_string(options.max_line_bytes));
  if (line.find_first_not_of(" \t\r") == std::string::npos)
    return error_line("empty request line; a request is one JSON object per line");
  json req;
  try {
    req = parse_json(line, "request");
  } catch (const std::exception& e) {
    return error_line(e.what());
  }
  try {
    if (req.is_object() && req.contains("case")) {
      DT_CHECK(!req.contains("expect") || req["expect"].is_object(), "\"expect\" must be an object");
      json ans = answer(req["case"], options);
      if (req.contains("expect")) ans["expect_match"] = matches_expect(ans, req["expect"]);
      return dump(ans);
    }
    return dump(answer(req, options));
  } catch (const std::exception& e) {
    return error_line(json_error_message(e));
  }
}

}  // namespace

std::string explain_line(const std::string& line, const ExplainOptions& options) {
  try {
    return answer_line(line, options);
  } catch (const std::exception& e) {  // bad_alloc, or a dump that still failed: answer all the same
    return R"({"error":"internal error answering this line"})";
  }
}

}  // namespace dtensor
