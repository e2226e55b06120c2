#include "nn/data.h"

#include <cstdint>
#include <fstream>
#include <random>
#include <set>

#include "dtensor/core/error.h"

namespace dtensor::nn {

CharDataset CharDataset::from_file(const std::string& path, int64_t min_len) {
  std::ifstream in(path, std::ios::binary);
  DT_CHECK(in.good(), "CharDataset: cannot read '", path, "'");
  // Read at most one byte past the bound, in chunks, so an endless source stops there.
  std::string text;
  char buf[1 << 16];
  while (in && static_cast<int64_t>(text.size()) <= kMaxTextBytes) {
    in.read(buf, sizeof(buf));
    text.append(buf, static_cast<size_t>(in.gcount()));
  }
  DT_CHECK(static_cast<int64_t>(text.size()) <= kMaxTextBytes, "CharDataset: '", path, "' is larger than ",
           kMaxTextBytes, " bytes (accepted: a text of at most 64 MiB)");
  DT_CHECK(!in.bad(), "CharDataset: reading '", path, "' failed");
  DT_CHECK(static_cast<int64_t>(text.size()) >= min_len, "CharDataset: '", path, "' has ", text.size(),
           " bytes; at least ", min_len, " are needed");
  return CharDataset(std::move(text));
}

CharDataset::CharDataset(std::string text) {
  std::set<unsigned char> seen(text.begin(), text.end());
  for (unsigned char c : seen) {
    index_[c] = static_cast<int64_t>(chars_.size());
    chars_.push_back(static_cast<char>(c));
  }
  ids_.reserve(text.size());
  for (unsigned char c : text) ids_.push_back(index_[c]);
}

Tensor CharDataset::batch(int64_t batch, int64_t seq, uint64_t seed) const {
  DT_CHECK(size() > seq + 1, "CharDataset: ", size(), " tokens are too few for windows of ", seq + 1);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> start(0, size() - seq - 2);
  Tensor t = Tensor::empty({batch, seq + 1}, DType::kInt64);
  int64_t* p = t.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    int64_t s = start(rng);
    for (int64_t i = 0; i <= seq; ++i) p[b * (seq + 1) + i] = ids_[s + i];
  }
  return t;
}

std::string CharDataset::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t i : ids) s.push_back(i >= 0 && i < vocab() ? chars_[i] : '?');
  return s;
}

std::vector<int64_t> CharDataset::encode(const std::string& s) const {
  std::vector<int64_t> out;
  for (unsigned char c : s) out.push_back(index_[c]);
  return out;
}

}  // namespace dtensor::nn
