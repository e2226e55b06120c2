#include "tests/ops/simulated_mesh.h"

#include <cmath>
#include <limits>

#include "dtensor/partial_split.h"
#include "kernels/cpu/kernels.h"

namespace dtensor::testing {
namespace {

Tensor region(Tensor t, const Shape& offset, const Shape& shape) {
  for (size_t d = 0; d < shape.size(); ++d) t = t.narrow(static_cast<int64_t>(d), offset[d], shape[d]);
  return t;
}

}  // namespace

OpCall bind_on(const OpDef& op, const Sample& s, const Shape& mesh) {
  std::vector<Placements> pl(s.tensors.size(), Placements(mesh.size(), Replicate()));
  return OpCall::bind(op, s.positional, s.keyword, s.tensors, pl, mesh);
}

std::vector<Tensor> make_globals(const OpCall& call, uint64_t seed) {
  std::vector<Tensor> g;
  for (int t = 0; t < call.num_tensors(); ++t) {
    uint64_t s = seed + 104729 * static_cast<uint64_t>(t);
    g.push_back(call.op().make_input ? call.op().make_input(t, call, s)
                                     : random_tensor(call.tensor(t).shape, call.tensor(t).dtype, s));
  }
  return g;
}

std::vector<int64_t> coord_of(int64_t flat, const Shape& mesh) {
  std::vector<int64_t> c(mesh.size());
  for (int i = static_cast<int>(mesh.size()) - 1; i >= 0; --i) {
    c[i] = flat % mesh[i];
    flat /= mesh[i];
  }
  return c;
}

RankInputs rank_inputs(const OpCall& call, const Strategy& strategy, const std::vector<TensorMeta>& out_meta,
                       const std::vector<Tensor>& globals, const std::vector<int64_t>& coord, uint64_t seed) {
  RankInputs r;
  for (int t = 0; t < call.num_tensors(); ++t)
    r.blocks.push_back(adversarial_local_block(globals[t], strategy.inputs[t], call.mesh_shape(), coord, seed + t));
  r.ctx.strategy = &strategy;
  r.ctx.out_meta = out_meta;
  r.ctx.mesh_shape = call.mesh_shape();
  r.ctx.coord = coord;
  return r;
}

Tensor assemble(const std::vector<Tensor>& blocks, const Placements& placements, const Shape& global,
                DType dtype, const Shape& mesh_shape, Tensor* scale) {
  if (is_complex(dtype)) {
    // The real and imaginary parts assemble on their own (a complex sum is the sum of its parts);
    // complex numbers have no order, so a Partial(max/min) complex output is no valid layout.
    for (const Placement& p : placements)
      DT_CHECK(!p.is_partial() || p.reduce == ReduceOp::kSum || p.reduce == ReduceOp::kAvg,
               "a Partial(", reduce_op_name(p.reduce), ") ", dtype_name(dtype), " output: complex has no order");
    std::vector<Tensor> re, im;
    for (const Tensor& b : blocks) {
      re.push_back(kernels::real_part(b).contiguous());
      im.push_back(kernels::imag_part(b).contiguous());
    }
    const DType part = real_of_complex(dtype);
    Tensor sr, si;
    Tensor r = assemble(re, placements, global, part, mesh_shape, &sr);
    Tensor i = assemble(im, placements, global, part, mesh_shape, &si);
    if (scale) *scale = kernels::maximum(sr, si);
    return kernels::complex_from_parts(r, i);
  }
  const Placement* partial = nullptr;
  int64_t partial_count = 1;
  for (size_t i = 0; i < placements.size(); ++i)
    if (placements[i].is_partial()) {
      partial = &placements[i];
      partial_count *= mesh_shape[i];
    }
  // Accumulate in float64 (exact enough for checking), starting from the op's identity.
  double init = 0;
  if (partial && partial->reduce == ReduceOp::kMax) init = -std::numeric_limits<double>::infinity();
  if (partial && partial->reduce == ReduceOp::kMin) init = std::numeric_limits<double>::infinity();
  Tensor acc = Tensor::full(global, init, DType::kFloat64);
  Tensor mag = Tensor::zeros(global, DType::kFloat64);
  for (size_t flat = 0; flat < blocks.size(); ++flat) {
    auto c = coord_of(static_cast<int64_t>(flat), mesh_shape);
    auto [shape, offset] = local_block(global, placements, mesh_shape, c);
    DT_CHECK(blocks[flat].sizes() == shape, "block at coordinate ", flat, " has shape ",
             shape_str(blocks[flat].sizes()), ", the layout gives ", shape_str(shape));
    DT_CHECK(blocks[flat].dtype() == dtype, "block dtype ", dtype_name(blocks[flat].dtype()),
             " differs from ", dtype_name(dtype));
    bool replica = false;  // a non-zero coordinate along a Replicate dim: must equal coordinate 0's
    for (size_t i = 0; i < placements.size(); ++i) replica |= placements[i].is_replicate() && c[i] != 0;
    Tensor b = blocks[flat].to(DType::kFloat64);
    if (replica) continue;
    Tensor dst = region(acc, offset, shape);
    Tensor m = region(mag, offset, shape);
    if (is_floating(dtype)) m.copy_(kernels::add(m, kernels::abs(b)));
    if (!partial) {
      dst.copy_(b);
    } else if (partial->reduce == ReduceOp::kMax) {
      dst.copy_(kernels::maximum(dst, b));
    } else if (partial->reduce == ReduceOp::kMin) {
      dst.copy_(kernels::minimum(dst, b));
    } else {
      dst.copy_(kernels::add(dst, b));
    }
  }
  if (partial && partial->reduce == ReduceOp::kAvg)
    acc = kernels::div(acc, Tensor::full({}, static_cast<double>(partial_count), DType::kFloat64));
  // Replicas must hold what their coordinate-0 twin holds (before the Partial reduction they are
  // Partial pieces too, so compare each replica with the block of its coordinate-0 twin).
  for (size_t flat = 0; flat < blocks.size(); ++flat) {
    auto c = coord_of(static_cast<int64_t>(flat), mesh_shape);
    bool replica = false;
    for (size_t i = 0; i < placements.size(); ++i) {
      if (placements[i].is_replicate() && c[i] != 0) {
        replica = true;
        c[i] = 0;
      }
    }
    if (!replica) continue;
    int64_t twin = 0;
    for (size_t i = 0; i < c.size(); ++i) twin = twin * mesh_shape[i] + c[i];
    DT_CHECK(equal(blocks[flat], blocks[twin]), "replicas disagree: coordinate ", flat, " and ", twin);
  }
  if (scale) *scale = mag;
  return acc.to(dtype);
}

Simulated simulate(const OpCall& call, const Strategy& strategy,
                             const std::vector<TensorMeta>& out_meta, const std::vector<Tensor>& globals,
                             uint64_t seed) {
  const Shape& mesh = call.mesh_shape();
  const int64_t n = numel(mesh);
  for (uint8_t s : strategy.steps) DT_CHECK(s == 0, "simulate: strategies with steps need a mesh");
  std::vector<std::vector<Tensor>> per_out(out_meta.size());
  for (int64_t flat = 0; flat < n; ++flat) {
    const RankInputs r = rank_inputs(call, strategy, out_meta, globals, coord_of(flat, mesh), seed);
    auto outs = call.op().kernel(r.blocks, call, r.ctx);
    DT_CHECK(outs.size() == out_meta.size(), "kernel returned ", outs.size(), " outputs");
    for (size_t o = 0; o < outs.size(); ++o) per_out[o].push_back(outs[o]);
  }
  // Data-dependent output dims (OpDef::data_dependent) take rank 0's block size, as the engine does;
  // assemble then checks every other rank's block against it.
  std::vector<Shape> first;
  for (const auto& blocks : per_out) first.push_back(blocks.at(0).sizes());
  const std::vector<TensorMeta> metas = settle_output_meta(call, strategy.outputs, out_meta, first);
  Simulated result;
  for (size_t o = 0; o < out_meta.size(); ++o) {
    Tensor scale;
    result.outputs.push_back(
        assemble(per_out[o], strategy.outputs[o], metas[o].shape, metas[o].dtype, mesh, &scale));
    result.scales.push_back(scale);
  }
  return result;
}

std::string compare(const Simulated& sim, const std::vector<Tensor>& want) {
  const std::vector<Tensor>& got = sim.outputs;
  if (got.size() != want.size()) return "output count differs";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].sizes() != want[i].sizes() || got[i].dtype() != want[i].dtype())
      return absl::StrCat("output ", i, ": ", got[i].str(), " vs ", want[i].str());
    double tol = 0;
    switch (want[i].dtype()) {
      case DType::kFloat64:
      case DType::kComplex128: tol = 1e-9; break;
      case DType::kFloat32:
      case DType::kComplex64: tol = 1e-4; break;
      case DType::kBFloat16:
      case DType::kFloat16: tol = 1e-2; break;
      default: break;
    }
    bool ok = true;
    if (tol == 0) {
      ok = equal(got[i], want[i]);
    } else {
      // Complex: both parts, each against the element's scale.
      const bool cx = is_complex(want[i].dtype());
      auto g = cx ? kernels::view_as_real(got[i].contiguous()).contiguous().to_vector<double>() : got[i].to_vector<double>();
      auto w = cx ? kernels::view_as_real(want[i].contiguous()).contiguous().to_vector<double>() : want[i].to_vector<double>();
      auto sc = sim.scales[i].to_vector<double>();
      for (size_t k = 0; k < g.size() && ok; ++k) {
        if (std::isnan(g[k]) || std::isnan(w[k])) {
          ok = std::isnan(g[k]) && std::isnan(w[k]);
        } else if (g[k] != w[k]) {
          ok = std::abs(g[k] - w[k]) <= tol * (std::abs(w[k]) + sc[cx ? k / 2 : k] + 1.0);
        }
      }
    }
    if (!ok) return absl::StrCat("output ", i, ": max abs diff ", max_abs_diff(got[i], want[i]));
  }
  return "";
}

}  // namespace dtensor::testing
