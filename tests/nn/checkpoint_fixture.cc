#include "tests/nn/checkpoint_fixture.h"

#include <cstring>
#include <vector>

#include "dtensor/collectives/threads_backend.h"
#include "nn/checkpoint.h"

namespace dtensor::nn::testing {
namespace {

struct Spec {
  const char* name;
  Shape shape;
  DType dtype;
  Placement placement;  // on the tp mesh
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> s = {
      {"w", {256, 192}, DType::kFloat32, Shard(0)},
      {"b", {192}, DType::kFloat32, Replicate()},
      {"e", {9, 31}, DType::kFloat64, Shard(1)},  // uneven: 16 + 15
      {"n", {5}, DType::kInt64, Replicate()},
      {"u", {3, 7}, DType::kFloat32, Shard(0)},  // 2 + 1 on two ranks
  };
  return s;
}

uint64_t splitmix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::map<std::string, Tensor> fixture_values(int64_t gen) {
  std::map<std::string, Tensor> out;
  uint64_t x = static_cast<uint64_t>(gen) * 1000003u;
  for (const Spec& s : specs()) {
    Tensor t = Tensor::empty(s.shape, s.dtype);
    auto* p = static_cast<unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); i += 8) {
      uint64_t r = splitmix(&x);
      std::memcpy(p + i, &r, std::min<size_t>(8, t.nbytes() - i));
    }
    out[s.name] = t;
  }
  return out;
}

void save_fixture(const std::string& dir, int64_t gen, int world) {
  const auto values = fixture_values(gen);
  run_threads(world, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {world}, {"tp"});
    std::vector<DTensor> ts;
    ts.reserve(specs().size());
    NamedTensors named;
    for (const Spec& s : specs()) {
      ts.push_back(distribute_tensor(values.at(s.name), mesh, {s.placement}));
      named.push_back({s.name, &ts.back()});
    }
    save_checkpoint(dir, named, gen);
  });
}

std::map<std::string, Tensor> load_fixture(const std::string& dir, int64_t* step) {
  std::map<std::string, Tensor> out;
  run_threads(1, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {1}, {"tp"});
    std::vector<DTensor> ts;
    ts.reserve(specs().size());
    NamedTensors named;
    for (const Spec& s : specs()) {
      ts.push_back(distribute_tensor(Tensor::zeros(s.shape, s.dtype), mesh, {Replicate()}));
      named.push_back({s.name, &ts.back()});
    }
    *step = load_checkpoint(dir, named);
    for (size_t i = 0; i < ts.size(); ++i) out[named[i].first] = ts[i].local_tensor();
  });
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

bool same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || !same_bits(t, it->second)) return false;
  }
  return true;
}

}  // namespace dtensor::nn::testing
