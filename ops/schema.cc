#include "ops/schema.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dtensor/core/error.h"

namespace dtensor {

std::string ivalue_str(const IValue& v) {
  struct V {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return absl::StrCat(d); }
    std::string operator()(const std::string& s) const { return "'" + s + "'"; }
    std::string operator()(const std::vector<int64_t>& l) const { return "[" + absl::StrJoin(l, ", ") + "]"; }
    std::string operator()(const std::vector<double>& l) const { return "[" + absl::StrJoin(l, ", ") + "]"; }
  };
  return std::visit(V{}, v);
}

namespace {

IValue parse_default(const std::string& text, ArgDef::Type t, const std::string& schema) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s == "None") return std::monostate{};
  if (s == "True") return true;
  if (s == "False") return false;
  if (t == ArgDef::kIntList) {
    absl::string_view body(s);
    if (absl::ConsumePrefix(&body, "[") && absl::ConsumeSuffix(&body, "]")) {
      std::vector<int64_t> out;
      for (absl::string_view part : absl::StrSplit(body, ',', absl::SkipWhitespace())) {
        int64_t x;
        DT_CHECK(absl::SimpleAtoi(part, &x), "schema '", schema, "': bad int list default ", s);
        out.push_back(x);
      }
      return out;
    }
    int64_t x;
    DT_CHECK(absl::SimpleAtoi(s, &x), "schema '", schema, "': bad default ", s);
    return std::vector<int64_t>{x};  // "int[2] padding=0" broadcasts later
  }
  if (s.size() >= 2 && (s[0] == '"' || s[0] == '\'')) return s.substr(1, s.size() - 2);
  if (t == ArgDef::kStr && std::isalpha(static_cast<unsigned char>(s[0]))) return s;  // contiguous_format
  int64_t i;
  if (t != ArgDef::kFloat && absl::SimpleAtoi(s, &i)) return i;
  double d;
  if (absl::SimpleAtod(s, &d)) return d;
  DT_FAIL("schema '", schema, "': cannot read default value '", s, "'");
}

}  // namespace

OpSchema OpSchema::parse(const std::string& text) {
  OpSchema sc;
  sc.text = text;
  size_t arrow = text.rfind("->");
  size_t open = text.find('(');
  size_t close = arrow == std::string::npos ? std::string::npos : text.rfind(')', arrow);
  DT_CHECK(open != std::string::npos && close != std::string::npos && arrow != std::string::npos &&
               open < close,
           "schema '", text, "': expected 'name(args) -> returns'");
  sc.name = std::string(absl::StripAsciiWhitespace(text.substr(0, open)));
  std::string args = text.substr(open + 1, close - open - 1);
  bool kw = false;
  for (absl::string_view part : absl::StrSplit(args, ',', absl::SkipWhitespace())) {
    std::string p(absl::StripAsciiWhitespace(part));
    if (p == "*") {
      kw = true;
      continue;
    }
    ArgDef a;
    a.keyword_only = kw;
    std::string def;
    size_t eq = p.find('=');
    if (eq != std::string::npos) {
      def = p.substr(eq + 1);
      p = std::string(absl::StripAsciiWhitespace(p.substr(0, eq)));
      a.has_default = true;
    }
    size_t sp = p.rfind(' ');
    DT_CHECK(sp != std::string::npos, "schema '", text, "': argument '", p, "' has no type");
    std::string type = p.substr(0, sp);
    a.name = p.substr(sp + 1);
    if (!type.empty() && type.back() == '?') {
      a.optional = true;
      type.pop_back();
    }
    // Strip list sizes ("int[2]" -> "int[]").
    size_t lb = type.find('[');
    bool list = lb != std::string::npos;
    std::string base = list ? type.substr(0, lb) : type;
    if (list && base == "Tensor?") {  // "Tensor?[]": a list of optional tensors
      base = "Tensor";
      a.optional_entries = true;
    }
    if (base == "Tensor") a.type = list ? ArgDef::kTensorList : ArgDef::kTensor;
    else if (base == "int" || base == "SymInt") a.type = list ? ArgDef::kIntList : ArgDef::kInt;
    else if (base == "float") a.type = list ? ArgDef::kFloatList : ArgDef::kFloat;
    else if (base == "bool") a.type = list ? ArgDef::kIntList : ArgDef::kBool;  // bool[3] output_mask: 0/1
    // ScalarType and MemoryFormat by name ("float32", "channels_last"), as the bridge passes them.
    else if (base == "str" || base == "ScalarType" || base == "MemoryFormat") a.type = ArgDef::kStr;
    else if (base == "Scalar") a.type = ArgDef::kScalar;
    else DT_FAIL("schema '", text, "': unknown argument type '", type, "'");
    if (a.has_default) a.default_value = parse_default(def, a.type, text);
    sc.args.push_back(std::move(a));
  }
  // Every output is a tensor whatever its declared type: a SymInt, SymBool or Scalar return is a 0-d
  // tensor holding the value (the size queries and _local_scalar_dense, ops/metadata/defs.cc).
  std::string ret(absl::StripAsciiWhitespace(text.substr(arrow + 2)));
  absl::string_view r(ret);
  absl::ConsumePrefix(&r, "(");
  absl::ConsumeSuffix(&r, ")");
  for (absl::string_view part : absl::StrSplit(r, ',', absl::SkipWhitespace())) {
    std::string p(absl::StripAsciiWhitespace(part));
    size_t sp = p.find(' ');
    sc.returns.push_back(sp == std::string::npos ? "" : p.substr(sp + 1));
  }
  DT_CHECK(!sc.returns.empty(), "schema '", text, "': no return value");
  return sc;
}

int OpSchema::index_of(const std::string& arg) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == arg) return static_cast<int>(i);
  return -1;
}

}  // namespace dtensor
