#include "dtensor/placement.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace dtensor {

std::string Placement::str() const {
  switch (kind) {
    case kReplicate: return "R";
    case kShard: return absl::StrCat("S(", dim, ")");
    case kPartial: return absl::StrCat("P(", reduce_op_name(reduce), ")");
  }
  return "?";
}

Placement Placement::parse(const std::string& text) {
  absl::string_view s(text.data(), text.size());
  s = absl::StripAsciiWhitespace(s);
  auto fail = [&]() -> Placement {
    DT_FAIL("invalid placement '", text,
            "'; accepted: S(d) or Shard(d) with an integer d, R or Replicate(), "
            "P(sum|avg|max|min) or Partial(sum|avg|max|min), P = P(sum)");
  };
  auto arg_of = [&](absl::string_view head, absl::string_view* arg) {
    if (!absl::ConsumePrefix(&s, head)) return false;
    if (!absl::ConsumePrefix(&s, "(") || !absl::ConsumeSuffix(&s, ")")) fail();
    *arg = absl::StripAsciiWhitespace(s);
    return true;
  };
  if (s == "R" || s == "Replicate()" || s == "Replicate") return Replicate();
  if (s == "P" || s == "Partial") return Partial();
  absl::string_view arg;
  if (arg_of("Shard", &arg) || arg_of("S", &arg)) {
    int32_t d;
    if (!absl::SimpleAtoi(arg, &d)) fail();
    return Shard(d);
  }
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
