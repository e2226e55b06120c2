// A character-level dataset: the bytes of a text file as tokens (the vocabulary is the sorted set of
// distinct bytes), with deterministic random batches of windows.
#pragma once

#include <string>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::nn {

class CharDataset {
 public:
  // Largest text read (bytes): a character-level model's corpus, far above the default (35 KB);
  // bounds what a device like /dev/zero or a huge file makes the reader hold.
  static constexpr int64_t kMaxTextBytes = int64_t{64} << 20;
  // Reads `path`; throws dtensor::Error if it cannot be read, holds fewer than `min_len` bytes or
  // more than kMaxTextBytes.
  static CharDataset from_file(const std::string& path, int64_t min_len = 2);
  explicit CharDataset(std::string text);

  int64_t vocab() const { return static_cast<int64_t>(chars_.size()); }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  // int64 [batch, seq + 1]: windows starting at positions drawn from `seed` (the same on every rank).
  Tensor batch(int64_t batch, int64_t seq, uint64_t seed) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  std::vector<int64_t> encode(const std::string& s) const;  // unknown bytes -> 0

 private:
  std::string chars_;          // id -> byte
  std::vector<int64_t> ids_;   // the text as ids
  int64_t index_[256] = {};    // byte -> id
};

}  // namespace dtensor::nn
