// Gradient checks (DESIGN §5): for every op with a backward, on 1-d and 2-d meshes of threads and
// several input layouts, the DTensor gradients of loss = sum_o <out_o, W_o> equal central finite
// differences of the single-device op in float64. Complex tensors (complex128 here) take part as
// their real and imaginary parts: <a, b> = sum Re(a) Re(b) + Im(a) Im(b), and the gradient of a
// complex input is dL/dRe + i dL/dIm (torch's convention for a real loss).
#include <cmath>
#include <complex>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "autograd/functional.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"

namespace dtensor {
namespace {

// Where an op's inputs must lie (the domain its OpDef::make_input draws from, e.g. acos's (-1, 1)).
enum class Domain { kReal, kPositive, kUnit, kAboveOne };

Domain domain_of(const std::vector<double>& given) {
  if (given.empty()) return Domain::kReal;
  bool positive = true, unit = true, above_one = true;
  for (double x : given) {
    positive &= x > 0;
    unit &= x > -1 && x < 1;
    above_one &= x > 1;
  }
  return above_one ? Domain::kAboveOne : positive ? Domain::kPositive : unit ? Domain::kUnit : Domain::kReal;
}

Tensor smooth(const Shape& s, uint64_t seed, Domain domain = Domain::kReal) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  Tensor t = Tensor::empty(s, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = u(rng);
    p[i] = domain == Domain::kPositive  ? 0.5 + std::abs(v)
           : domain == Domain::kUnit    ? 0.45 * v
           : domain == Domain::kAboveOne ? 1.1 + std::abs(v)
                                         : v;
  }
  return t;
}

// The tensors the check differentiates: real floating and complex.
bool differentiable(DType t) { return is_floating(t) || is_complex(t); }

// A complex128 tensor whose parts are smooth(shape, seed) and smooth(shape, seed + 1).
Tensor smooth_complex(const Shape& s, uint64_t seed) {
  auto re = smooth(s, seed).to_vector<double>(), im = smooth(s, seed + 1).to_vector<double>();
  Tensor t = Tensor::empty(s, DType::kComplex128);
  for (size_t i = 0; i < re.size(); ++i) t.data<std::complex<double>>()[i] = {re[i], im[i]};
  return t;
}

// The values of t as doubles, a complex one as its parts interleaved (re, im, re, im, ...).
std::vector<double> parts(const Tensor& t) {
  if (!is_complex(t.dtype())) return t.to_vector<double>();
  Tensor c = t.to(DType::kComplex128).contiguous();
  const double* p = reinterpret_cast<const double*>(c.data_ptr());
  return std::vector<double>(p, p + 2 * c.numel());
}

struct Case {
  Sample sample;
  OpCall call;
  std::vector<Tensor> globals;
  std::vector<Tensor> weights;  // per output (undefined for non-floating outputs)
};

// float32 tensors become float64; inputs get smooth data (positive where the op needs it).
Case make_case(const OpDef& op, Sample s, const Shape& mesh, uint64_t seed) {
  for (auto& t : s.tensors) {
    if (t.dtype == DType::kFloat32) t.dtype = DType::kFloat64;
    if (t.dtype == DType::kComplex64) t.dtype = DType::kComplex128;
  }
  std::vector<Placements> pl(s.tensors.size(), Placements(mesh.size(), Replicate()));
  OpCall call = OpCall::bind(op, s.positional, s.keyword, s.tensors, pl, mesh);
  Case c{s, call, {}, {}};
  for (int t = 0; t < call.num_tensors(); ++t) {
    const TensorMeta& m = call.tensor(t);
    Tensor given = op.make_input ? op.make_input(t, call, seed + t) : random_tensor(m.shape, m.dtype, seed + t);
    if (is_complex(m.dtype)) {
      c.globals.push_back(smooth_complex(m.shape, seed * 31 + t));
      continue;
    }
    if (!is_floating(m.dtype)) {
      c.globals.push_back(given);
      continue;
    }
    // A domain the given data is confined to is kept (acos needs (-1, 1), log positive inputs).
    c.globals.push_back(smooth(m.shape, seed * 31 + t, domain_of(given.to_vector<double>())));
  }
  for (const auto& m : op.meta(call))
    c.weights.push_back(is_complex(m.dtype)    ? smooth_complex(m.shape, seed * 77 + 5)
                        : is_floating(m.dtype) ? smooth(m.shape, seed * 77 + 5)
                                               : Tensor());
  return c;
}

double single_loss(const Case& c, const std::vector<Tensor>& globals) {
  auto outs = run_single_device(c.call, globals);
  double l = 0;
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!c.weights[o].defined()) continue;
    auto a = parts(outs[o]), w = parts(c.weights[o]);
    for (size_t i = 0; i < a.size(); ++i) l += a[i] * w[i];
  }
  return l;
}

std::vector<Tensor> finite_differences(const Case& c) {
  std::vector<Tensor> grads;
  const double h = 1e-6;
  std::vector<Tensor> g = c.globals;
  for (size_t t = 0; t < g.size(); ++t) {
    if (!differentiable(g[t].dtype())) {
      grads.emplace_back();
      continue;
    }
    // A complex128 tensor is perturbed part by part (its buffer as 2n doubles).
    Tensor base = g[t];
    const int64_t k = is_complex(base.dtype()) ? 2 : 1;
    Tensor d = Tensor::zeros(base.sizes(), base.dtype());
    for (int64_t i = 0; i < k * base.numel(); ++i) {
      Tensor p = base.clone();
      double* v = static_cast<double*>(p.data_ptr());
      v[i] += h;
      g[t] = p;
      double lp = single_loss(c, g);
      v[i] -= 2 * h;
      double lm = single_loss(c, g);
      static_cast<double*>(d.data_ptr())[i] = (lp - lm) / (2 * h);
    }
    g[t] = base;
    grads.push_back(d);
  }
  return grads;
}

// Forward + backward with the inputs laid out as `s` says; the full gradients (rank 0's view).
std::vector<Tensor> dtensor_grads(const Case& c, const Strategy& s) {
  std::vector<Tensor> out(c.globals.size());
  run_threads(static_cast<int>(numel(c.call.mesh_shape())), [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, c.call.mesh_shape(), {}, {}, std::chrono::seconds(30));
    std::vector<DTensor> inputs;
    for (size_t t = 0; t < c.globals.size(); ++t) {
      DTensorSpec spec(mesh, s.inputs[t], c.call.tensor(static_cast<int>(t)).shape, c.globals[t].dtype());
      DTensor d(spec, adversarial_local_block(c.globals[t], spec.placements, c.call.mesh_shape(),
                                              mesh->coordinate(), 11 + t));
      if (differentiable(d.dtype())) set_requires_grad(d);
      inputs.push_back(d);
    }
    auto rebuild = [&](const ArgValue& a) -> OpArg {
      if (auto* r = std::get_if<TensorRef>(&a)) return inputs[r->index];
      if (auto* l = std::get_if<TensorListRef>(&a)) {
        std::vector<DTensor> v;
        for (int i : l->indices) v.push_back(i == TensorListRef::kNoTensor ? DTensor() : inputs[i]);  // None
        return v;
      }
      return std::get<IValue>(a);
    };
    std::vector<OpArg> pos;
    for (const auto& a : c.sample.positional) pos.push_back(rebuild(a));
    std::vector<std::pair<std::string, OpArg>> kw;
    for (const auto& [k, a] : c.sample.keyword) kw.emplace_back(k, rebuild(a));
    auto outs = call(c.call.name(), pos, kw);
    std::optional<DTensor> loss;
    for (size_t o = 0; o < outs.size(); ++o) {
      if (!c.weights[o].defined()) continue;
      DTensor w = distribute_tensor(c.weights[o], mesh, Placements(mesh->ndim(), Replicate()));
      // Complex: the sum over the real pairs, so that the loss stays real.
      DTensor term = is_complex(outs[o].dtype())
                         ? F::sum(F::mul(call("view_as_real", {outs[o]}, {})[0], call("view_as_real", {w}, {})[0]))
                         : F::sum(F::mul(outs[o], w));
      loss = loss ? F::add(*loss, term) : term;
    }
    if (!loss || !requires_grad(*loss)) return;
    backward(*loss);
    for (size_t t = 0; t < inputs.size(); ++t) {
      auto g = grad(inputs[t]);
      if (!g) continue;
      Tensor full = g->full_tensor();
      if (b->rank() == 0) out[t] = full;
    }
  });
  return out;
}

TEST(GradCheck, EveryOpsBackwardMatchesFiniteDifferences) {
  init_autograd();
  std::vector<std::string> failures;
  int checked = 0, ops = 0;
  for (const std::string& name : Registry::get().names()) {
    const OpDef& op = Registry::get().find(name);
    if (!op.backward || !op.samples) continue;
    if (name.find("_backward") != std::string::npos) continue;  // backward ops themselves
    // Casts to 16-bit floats round: finite differences of a step function say nothing.
    ++ops;
    uint64_t seed = 3;
    for (const Sample& sample : op.samples()) {
      for (const Shape& mesh : std::vector<Shape>{{2}, {2, 2}}) {
        Case c;
        try {
          c = make_case(op, sample, mesh, seed++);
        } catch (const std::exception& e) {
          continue;  // a sample that needs non-floating data the float64 conversion breaks
        }
        if (name == "to" && itemsize(op.meta(c.call)[0].dtype) < 4) continue;
        bool any_float = false;
        for (const auto& g : c.globals) any_float |= differentiable(g.dtype());
        bool any_out = false;
        for (const auto& w : c.weights) any_out |= w.defined();
        if (!any_float || !any_out) continue;
        auto fd = finite_differences(c);
        // A few input layouts: all replicated, and the inputs of up to 3 sharded strategies.
        auto meta = op.meta(c.call);
        auto strategies = expand_strategies(c.call, meta, true);
        std::vector<Strategy> picks;
        for (const auto& s : strategies) {
          if (picks.size() >= 4) break;
          picks.push_back(s);
        }
        for (const Strategy& s : picks) {
          ++checked;
          std::vector<Tensor> got;
          try {
            got = dtensor_grads(c, s);
          } catch (const std::exception& e) {
            failures.push_back(absl::StrCat(c.call.str(), " inputs ", s.str(), ": threw ", e.what()));
            continue;
          }
          for (size_t t = 0; t < fd.size(); ++t) {
            if (!fd[t].defined()) continue;
            // As in torch, class weights of the losses are not differentiated.
            if ((name == "nll_loss" || name == "cross_entropy") && t == 2) continue;
            // Attention masks get no gradient (as in torch for boolean masks).
            if (name == "scaled_dot_product_attention" && t == 3) continue;
            // flex_attention's mask data (document ids, ALiBi slopes, block mask) gets none either.
            if (name == "flex_attention" && t >= 3) continue;
            if (!got[t].defined()) {
              failures.push_back(absl::StrCat(c.call.str(), " inputs ", s.str(), ": no gradient for input ", t));
              continue;
            }
            if (!allclose(got[t], fd[t], 1e-5, 1e-6))
              failures.push_back(absl::StrCat(c.call.str(), " inputs ", s.str(), ": input ", t,
                                              " gradient off by ", max_abs_diff(got[t], fd[t])));
          }
        }
      }
    }
  }
  std::cout << "gradcheck: " << ops << " ops, " << checked << " layouts, " << failures.size() << " wrong\n";
  for (const auto& f : failures) std::cout << "WRONG: " << f << "\n";
  EXPECT_GT(checked, 100);
  for (size_t i = 0; i < std::min<size_t>(failures.size(), 20); ++i) ADD_FAILURE() << failures[i];
}

}  // namespace
}  // namespace dtensor
