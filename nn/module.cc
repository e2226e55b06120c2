#include "nn/module.h"

#include <random>

#include "nn/parallel.h"

namespace dtensor::nn {

DTensor Module::operator()(const DTensor& x) {
  DTensor in = style_ ? style_->prepare_input(x, *this) : x;
  DTensor out = forward(in);
  return style_ ? style_->prepare_output(out, *this) : out;
}

std::vector<std::pair<std::string, DTensor*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, DTensor*>> out;
  for (auto& [n, p] : params_) out.emplace_back(prefix + n, &p);
  for (auto& [n, c] : children_) {
    auto sub = c->named_parameters(prefix + n + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (auto& [n, c] : children_) {
    auto sub = c->named_modules(prefix.empty() ? n : prefix + "." + n);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Module* Module::child(const std::string& name) const {
  for (auto& [n, c] : children_)
    if (n == name) return c.get();
  DT_FAIL("module has no child '", name, "'");
}

DTensor& Module::add_parameter(const std::string& name, const Tensor& init) {
  init_.emplace_back(name, init);
  params_.emplace_back(name, DTensor());
  return params_.back().second;
}

Tensor normal_init(const Shape& shape, double std, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, std);
  Tensor t = Tensor::empty(shape, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = n(rng);
  return t;
}

uint64_t seed_of(const std::string& path, uint64_t base) {
  // FNV-1a: stable across processes (absl::Hash is salted per process).
  uint64_t h = 1469598103934665603ull ^ base;
  for (unsigned char ch : path) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace dtensor::nn
