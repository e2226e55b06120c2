#include "dtensor/placement.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtensor {
namespace {

struct WeightTable {
  std::mutex mu;
  std::deque<std::vector<int64_t>> lists;  // id - 1 -> weights; a deque keeps references stable
  absl::flat_hash_map<std::vector<int64_t>, uint16_t> ids;
};
WeightTable& table() {
  static auto* t = new WeightTable();
  return *t;
}

}  // namespace

uint16_t intern_shard_weights(absl::Span<const int64_t> weights) {
  DT_CHECK(!weights.empty(), "weighted shard: empty weight list; give one positive weight per rank");
  int64_t g = 0;
  for (int64_t w : weights) {
    DT_CHECK(w >= 1 && w <= kMaxShardWeight, "weighted shard: weight ", w, " in [",
             absl::StrJoin(weights, ":"), "]; weights must be integers in [1, ", kMaxShardWeight, "]");
    g = std::gcd(g, w);
  }
  std::vector<int64_t> norm(weights.begin(), weights.end());
  for (int64_t& w : norm) w /= g;
  WeightTable& t = table();
  std::lock_guard<std::mutex> l(t.mu);
  auto it = t.ids.find(norm);
  if (it != t.ids.end()) return it->second;
  DT_CHECK(t.lists.size() < 65535, "weighted shard: more than 65535 distinct weight lists");
  t.lists.push_back(norm);
  const auto id = static_cast<uint16_t>(t.lists.size());
  t.ids.emplace(std::move(norm), id);
  return id;
}

const std::vector<int64_t>& shard_weights(uint16_t id) {
  WeightTable& t = table();
  std::lock_guard<std::mutex> l(t.mu);
  DT_CHECK(id >= 1 && id <= t.lists.size(), "internal: unknown shard weights id ", id);
  return t.lists[id - 1];
}

std::pair<int64_t, int64_t> weighted_range(int64_t n, const std::vector<int64_t>& w, int64_t idx) {
  const int64_t k = static_cast<int64_t>(w.size());
  int64_t total = 0;
  for (int64_t x : w) total += x;
  // Floors and remainders (n * w_r fits: n < 2^43 elements a dim, w_r <= 10^6 < 2^20).
  absl::InlinedVector<int64_t, 8> size(k), rem(k), order(k);
  int64_t left = n;
  for (int64_t r = 0; r < k; ++r) {
    size[r] = n * w[r] / total;
    rem[r] = n * w[r] % total;
    left -= size[r];
  }
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rem[a] > rem[b]; });
  for (int64_t j = 0; j < left; ++j) ++size[order[j]];
  int64_t start = 0;
  for (int64_t r = 0; r < idx; ++r) start += size[r];
  return {start, size[idx]};
}

std::pair<int64_t, int64_t> shard_range(const Placement& p, int64_t n, int64_t k, int64_t idx) {
  if (p.weights_id == 0) return chunk_range(n, k, idx);
  const auto& w = p.weights();
  DT_CHECK(static_cast<int64_t>(w.size()) == k, "placement ", p.str(), " has ", w.size(),
           " weights for a mesh dim of ", k, " ranks; give one weight per rank");
  return weighted_range(n, w, idx);
}

void check_shard_weights(const Placements& p, absl::Span<const int64_t> mesh_shape, const char* what) {
  for (size_t i = 0; i < p.size() && i < mesh_shape.size(); ++i)
    if (p[i].is_weighted())
      DT_CHECK(static_cast<int64_t>(p[i].weights().size()) == mesh_shape[i], what, ": placement ",
               p[i].str(), " on mesh dim ", i, " of ", mesh_shape[i], " ranks has ",
               p[i].weights().size(), " weights; give one weight per rank of that mesh dim");
}

std::string Placement::str() const {
  switch (kind) {
    case kReplicate: return "R";
    case kShard:
      if (weights_id == 0) return absl::StrCat("S(", dim, ")");
      return absl::StrCat("S(", dim, ")[", absl::StrJoin(weights(), ":"), "]");
    case kPartial: return absl::StrCat("P(", reduce_op_name(reduce), ")");
  }
  return "?";
}

Placement Placement::parse(const std::string& text) {
  absl::string_view s(text.data(), text.size());
  s = absl::StripAsciiWhitespace(s);
  auto fail = [&]() -> Placement {
    DT_FAIL("invalid placement '", text,
            "'; accepted: S(d) or Shard(d) with an integer d, optionally weighted as S(d)[w0:w1:...] "
            "with one positive integer weight per rank, R or Replicate(), "
            "P(sum|avg|max|min) or Partial(sum|avg|max|min), P = P(sum)");
  };
  // A trailing "[w0:w1:...]" makes a weighted shard.
  std::vector<int64_t> weights;
  bool weighted = false;
  if (absl::ConsumeSuffix(&s, "]")) {
    const size_t open = s.rfind('[');
    if (open == absl::string_view::npos) fail();
    for (absl::string_view w : absl::StrSplit(s.substr(open + 1), ':')) {
      int64_t v;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(w), &v)) fail();
      DT_CHECK(v >= 1, "invalid placement '", text, "': weight ", v,
               " is not positive; every rank's weight must be an integer >= 1");
      weights.push_back(v);
    }
    s = absl::StripAsciiWhitespace(s.substr(0, open));
    weighted = true;
  }
  auto arg_of = [&](absl::string_view head, absl::string_view* arg) {
    if (!absl::ConsumePrefix(&s, head)) return false;
    if (!absl::ConsumePrefix(&s, "(") || !absl::ConsumeSuffix(&s, ")")) fail();
    *arg = absl::StripAsciiWhitespace(s);
    return true;
  };
  absl::string_view arg;
  if (arg_of("Shard", &arg) || arg_of("S", &arg)) {
    int32_t d;
    if (!absl::SimpleAtoi(arg, &d)) fail();
    return weighted ? Shard(d, weights) : Shard(d);
  }
  if (weighted) fail();
  if (s == "R" || s == "Replicate()" || s == "Replicate") return Replicate();
  if (s == "P" || s == "Partial") return Partial();
  if (arg_of("Partial", &arg) || arg_of("P", &arg)) {
    if (arg.empty() || arg == "sum") return Partial(ReduceOp::kSum);
    if (arg == "avg") return Partial(ReduceOp::kAvg);
    if (arg == "max") return Partial(ReduceOp::kMax);
    if (arg == "min") return Partial(ReduceOp::kMin);
  }
  return fail();
}

std::string placements_str(const Placements& p) {
  return absl::StrCat("[", absl::StrJoin(p, ", ", [](std::string* out, const Placement& x) {
                        out->append(x.str());
                      }), "]");
}

}  // namespace dtensor
