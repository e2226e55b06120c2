#include "nn/checkpoint.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "nlohmann/json.hpp"

namespace dtensor::nn {
namespace {

using json = nlohmann::json;
constexpr char kMagic[8] = {'D', 'T', 'C', 'K', 'P', 'T', '1', '\n'};

uint64_t fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Does this rank hold the copy of `t` that gets saved?
bool owns(const DTensor& t) {
  const auto& c = t.mesh()->coordinate();
  for (size_t i = 0; i < c.size(); ++i)
    if (!t.placements()[i].is_shard() && c[i] != 0) return false;
  return true;
}

json placements_json(const Placements& p) {
  json a = json::array();
  for (const auto& x : p) a.push_back(x.str());
  return a;
}

struct Block {
  Shape shape, offset;
  DType dtype;
  uint64_t begin, nbytes, checksum;
};

// Reads one rank file's blocks (by tensor name) and its data section; validates magic and sizes.
std::map<std::string, std::vector<Block>> read_index(const std::string& path, std::string* data) {
  std::ifstream in(path, std::ios::binary);
  DT_CHECK(in.good(), "checkpoint: cannot read ", path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DT_CHECK(all.size() >= 16 && std::memcmp(all.data(), kMagic, 8) == 0, "checkpoint: ", path,
           " is not a dtensor checkpoint shard (bad magic or truncated header)");
  uint64_t hlen;
  std::memcpy(&hlen, all.data() + 8, 8);
  DT_CHECK(16 + hlen <= all.size(), "checkpoint: ", path, " is truncated (header of ", hlen, " bytes, file of ",
           all.size(), ")");
  json h;
  try {
    h = json::parse(all.substr(16, hlen));
  } catch (const std::exception& e) {
    DT_FAIL("checkpoint: ", path, " has a corrupted header: ", e.what());
  }
  *data = all.substr(16 + hlen);
  std::map<std::string, std::vector<Block>> out;
  for (const auto& b : h.at("blocks")) {
    Block k;
    for (auto v : b.at("shape")) k.shape.push_back(v.get<int64_t>());
    for (auto v : b.at("offset")) k.offset.push_back(v.get<int64_t>());
    k.dtype = dtype_from_name(b.at("dtype").get<std::string>());
    k.begin = b.at("begin").get<uint64_t>();
    k.nbytes = b.at("nbytes").get<uint64_t>();
    k.checksum = b.at("checksum").get<uint64_t>();
    const std::string name = b.at("name").get<std::string>();
    DT_CHECK(k.begin + k.nbytes <= data->size(), "checkpoint: ", path, " is truncated: '", name, "' needs bytes [",
             k.begin, ", ", k.begin + k.nbytes, ") of the data section, which has ", data->size());
    DT_CHECK(fnv1a(data->data() + k.begin, k.nbytes) == k.checksum, "checkpoint: ", path, " is corrupted: '", name,
             "' fails its checksum");
    out[name].push_back(k);
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& dir, const NamedTensors& tensors, int64_t step) {
  DT_CHECK(!tensors.empty(), "save_checkpoint: no tensors");
  const DeviceMesh& mesh = *tensors[0].second->mesh();
  std::filesystem::create_directories(dir);
  json header;
  header["blocks"] = json::array();
  std::string data;
  for (const auto& [name, t] : tensors) {
    if (!owns(*t)) continue;
    Tensor local = t->to_local().to(cpu()).contiguous();  // device blocks are written from the host
    auto [shape, offset] = t->spec().local_block(mesh.coordinate());
    json b{{"name", name}, {"shape", shape}, {"offset", offset}, {"dtype", dtype_name(t->dtype())},
           {"begin", data.size()}, {"nbytes", local.nbytes()}, {"checksum", fnv1a(local.data_ptr(), local.nbytes())}};
    header["blocks"].push_back(b);
    data.append(static_cast<const char*>(local.data_ptr()), local.nbytes());
  }
  std::string h = header.dump();
  uint64_t hlen = h.size();
  const std::string path = dir + "/rank" + std::to_string(mesh.global_rank()) + ".bin";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&hlen), 8);
    out << h << data;
    DT_CHECK(out.good(), "save_checkpoint: writing ", path, " failed");
  }
  if (mesh.global_rank() == mesh.ranks()[0]) {
    json meta{{"format", "dtensor-checkpoint-1"}, {"step", step}, {"mesh", mesh.shape()}, {"ranks", mesh.ranks()}};
    meta["tensors"] = json::array();
    for (const auto& [name, t] : tensors)
      meta["tensors"].push_back({{"name", name}, {"shape", t->shape()}, {"dtype", dtype_name(t->dtype())},
                                 {"placements", placements_json(t->placements())}});
    std::ofstream out(dir + "/metadata.json", std::ios::trunc);
    out << meta.dump(1);
    DT_CHECK(out.good(), "save_checkpoint: writing ", dir, "/metadata.json failed");
  }
  // Every rank's file exists before anyone returns.
  Tensor token = Tensor::zeros({1});
  for (int d = 0; d < mesh.ndim(); ++d) mesh.group(d).all_reduce(token, ReduceOp::kSum, mesh.timeout());
}

int64_t load_checkpoint(const std::string& dir, const NamedTensors& tensors) {
  std::ifstream mf(dir + "/metadata.json");
  DT_CHECK(mf.good(), "load_checkpoint: no checkpoint at ", dir, " (missing metadata.json)");
  json meta;
  try {
    meta = json::parse(mf);
  } catch (const std::exception& e) {
    DT_FAIL("load_checkpoint: ", dir, "/metadata.json is corrupted: ", e.what());
  }
  DT_CHECK(meta.value("format", "") == "dtensor-checkpoint-1", "load_checkpoint: ", dir,
           "/metadata.json is not a dtensor checkpoint");
  std::map<std::string, json> saved;
  for (const auto& t : meta.at("tensors")) saved[t.at("name").get<std::string>()] = t;
  // Every rank file's blocks.
  std::map<std::string, std::vector<std::pair<Block, const std::string*>>> blocks;
  std::vector<std::string> datas;
  datas.reserve(meta.at("ranks").size());
  for (const auto& r : meta.at("ranks")) {
    datas.emplace_back();
    auto idx = read_index(dir + "/rank" + std::to_string(r.get<int>()) + ".bin", &datas.back());
    for (auto& [name, bs] : idx)
      for (auto& b : bs) blocks[name].push_back({b, &datas.back()});
  }
  for (const auto& [name, t] : tensors) {
    auto it = saved.find(name);
    DT_CHECK(it != saved.end(), "load_checkpoint: ", dir, " has no tensor '", name, "'");
    Shape shape;
    for (auto v : it->second.at("shape")) shape.push_back(v.get<int64_t>());
    DType dt = dtype_from_name(it->second.at("dtype").get<std::string>());
    DT_CHECK(shape == t->shape() && dt == t->dtype(), "load_checkpoint: '", name, "' is ", dtype_name(dt),
             shape_str(shape), " in the checkpoint but ", dtype_name(t->dtype()), shape_str(t->shape()), " here");
    // Reassemble the global tensor, then keep this rank's block of the target layout.
    Tensor full = Tensor::empty(shape, dt);
    int64_t covered = 0;
    for (const auto& [b, data] : blocks[name]) {
      Tensor dst = full;
      for (size_t d = 0; d < b.shape.size(); ++d) dst = dst.narrow(static_cast<int64_t>(d), b.offset[d], b.shape[d]);
      Tensor src = Tensor::empty(b.shape, dt);
      std::memcpy(src.data_ptr(), data->data() + b.begin, b.nbytes);
      dst.copy_(src);
      covered += numel(b.shape);
    }
    DT_CHECK(covered == numel(shape), "load_checkpoint: ", dir, " holds ", covered, " of the ", numel(shape),
             " elements of '", name, "' (a rank file is missing blocks)");
    DTensor placed = distribute_tensor(full, t->mesh(), t->placements());
    Tensor(t->to_local()).copy_(placed.to_local());
  }
  return meta.at("step").get<int64_t>();
}

}  // namespace dtensor::nn
