// A bounded, deterministic random-mutation fuzzer for JSON inputs (no libFuzzer: gcc builds it, and
// a fixed seed makes every CI run try the same inputs, so a finding reproduces by its index).
//
// Each input is a corpus entry changed by one to four mutations, half of them structure-aware (a
// value of the parsed JSON replaced by one of another type or by an extreme number, a key dropped,
// an array element repeated or dropped, an object nested in itself) and half byte-level on the text
// (a byte flipped, inserted or deleted, a range repeated, a token spliced in from another entry,
// invalid UTF-8). Structure-aware changes keep most inputs past the JSON parser, into the code that
// checks types, sizes and placements.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace dtensor::fuzz {

class Mutator {
 public:
  Mutator(std::vector<std::string> corpus, uint64_t seed) : corpus_(std::move(corpus)), rng_(seed) {}

  // The next input: a corpus entry with one mutation (half the inputs: most stay valid JSON of the
  // right shape and reach deep checks) or 2-4.
  std::string next() {
    std::string s = corpus_[pick(corpus_.size())];
    const int n = pick(2) ? 1 : 2 + static_cast<int>(pick(3));
    for (int i = 0; i < n; ++i) s = pick(2) ? mutate_tree(s) : mutate_bytes(s);
    if (s.size() > kMaxInput) s.resize(kMaxInput);
    return s;
  }

 private:
  using json = nlohmann::json;
  static constexpr size_t kMaxInput = 1 << 16;

  size_t pick(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  // Values that have broken parsers and size arithmetic before: zeros, negatives, int32/int64
  // edges, powers of two whose products overflow, huge and non-finite doubles.
  json extreme_value() {
    static const std::vector<json> values = {
        0, -1, 1, 2, 3, 7, 64, 65, 4096, 1000000, 2147483647, 2147483648LL, 4294967296LL,
        int64_t{1} << 46, int64_t{1} << 60, int64_t{1} << 61, INT64_MAX, INT64_MIN, UINT64_MAX, 1e6, 1e308, -1e308,
        0.5, -0.0, "S(0)", "S(-1)", "S(99)", "R", "P", "P(max)", "P(bogus)", "", "\xff\xfe", "float32", "bfloat16",
        "int64", "bool", "complex", true, false, nullptr, json::array(), json::object(), json::array({0, 0}),
        json::array({1, 2, 3}), json::array({json::array({1})}), json::object({{"shape", json::array({4})}})};
    return values[pick(values.size())];
  }

  // Every value of the tree, in pre-order, as pointers into it.
  static void collect(json& j, std::vector<json*>& out) {
    out.push_back(&j);
    if (j.is_structured())
      for (auto& e : j) collect(e, out);
  }

  std::string mutate_tree(const std::string& text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return mutate_bytes(text);
    std::vector<json*> nodes;
    collect(j, nodes);
    json& v = *nodes[pick(nodes.size())];
    switch (pick(6)) {
      case 0:
        v = extreme_value();
        break;
      case 1:  // drop a key or an element
        if (v.is_object() && !v.empty()) {
          auto it = v.begin();
          std::advance(it, pick(v.size()));
          v.erase(it.key());
        } else if (v.is_array() && !v.empty()) {
          v.erase(v.begin() + static_cast<std::ptrdiff_t>(pick(v.size())));
        } else {
          v = extreme_value();
        }
        break;
      case 2:  // repeat an element (a longer shape, mesh or placement list)
        if (v.is_array() && !v.empty()) {
          const json e = v[pick(v.size())];
          const size_t times = pick(3) == 0 ? 64 : 1;
          for (size_t i = 0; i < times; ++i) v.push_back(e);
        } else {
          v = json::array({v, v});
        }
        break;
      case 3:  // a number nudged to its neighbours or negated
        if (v.is_number_integer()) {
          // Wrapping arithmetic (through uint64): the mutator itself must be free of UB, since
          // it runs under UBSan too.
          const uint64_t x = static_cast<uint64_t>(v.get<int64_t>());
          const uint64_t options[] = {x + 1, x - 1, ~x + 1, x * 2, x * 1024};
          v = static_cast<int64_t>(options[pick(5)]);
        } else {
          v = extreme_value();
        }
        break;
      case 4:  // nest a value in itself (depth)
        v = json::array({v});
        break;
      default:  // a value copied from elsewhere in the tree, to another place of another type
        v = json(*nodes[pick(nodes.size())]);
        break;
    }
    // Strings may hold invalid UTF-8 (from the extreme values): written as they are, not refused.
    return j.dump(-1, ' ', false, json::error_handler_t::ignore);
  }

  std::string mutate_bytes(std::string s) {
    if (s.empty()) s = "{}";
    const size_t at = pick(s.size());
    switch (pick(7)) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1 << pick(8)));
        break;
      case 1:
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(pick(256)));
        break;
      case 2:
        s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        break;
      case 3: {  // repeat a range
        const size_t len = 1 + pick(std::min<size_t>(64, s.size() - at));
        s.insert(at, s.substr(at, len));
        break;
      }
      case 4: {  // a piece of another entry spliced in
        const std::string& o = corpus_[pick(corpus_.size())];
        const size_t from = pick(o.size()), len = 1 + pick(std::min<size_t>(48, o.size() - from));
        s.insert(at, o.substr(from, len));
        break;
      }
      case 5: {  // invalid or unusual UTF-8
        static const char* bad[] = {"\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\\u0000",
                                    "\\ud800", "\t", "\r\n"};
        s.insert(at, bad[pick(9)]);
        break;
      }
      default:  // a digit run made long
        s.insert(at, std::string(1 + pick(30), static_cast<char>('0' + pick(10))));
        break;
    }
    return s;
  }

  std::vector<std::string> corpus_;
  std::mt19937_64 rng_;
};

}  // namespace dtensor::fuzz
