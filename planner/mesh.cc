#include "planner/mesh.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dtensor/core/error.h"
#include "dtensor/core/limits.h"

namespace dtensor::planner {

std::string MeshSpec::str() const {
  std::vector<std::string> parts;
  for (int i = 0; i < ndim(); ++i) parts.push_back(absl::StrCat(names[i], "=", shape[i]));
  return absl::StrJoin(parts, ",");
}

int MeshSpec::index_of(const std::string& name) const {
  for (int i = 0; i < ndim(); ++i)
    if (names[i] == name) return i;
  return -1;
}

MeshSpec MeshSpec::parse(const std::string& text) {
  const std::string usage =
      "accepted: NAME=SIZE[,NAME=SIZE...] with 1 to 3 mesh dims (4 when one is pp: pipeline stages over a 3-dim "
      "stage mesh), e.g. dp=8,tp=8 or tp=8 (or sizes only: 8x8)";
  MeshSpec m;
  std::string t(absl::StripAsciiWhitespace(text));
  DT_CHECK(!t.empty(), "mesh: empty; ", usage);
  std::vector<std::string> parts = absl::StrSplit(t, ',', absl::SkipWhitespace());
  if (parts.size() == 1 && t.find('=') == std::string::npos)
    parts = absl::StrSplit(t, 'x', absl::SkipWhitespace());  // "8x8"
  DT_CHECK(!parts.empty() && parts.size() <= 4, "mesh '", text, "' has ", parts.size(), " dims; ", usage);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string p(absl::StripAsciiWhitespace(parts[i]));
    std::string name = absl::StrCat("d", i), size = p;
    auto eq = p.find('=');
    if (eq != std::string::npos) {
      name = std::string(absl::StripAsciiWhitespace(p.substr(0, eq)));
      size = std::string(absl::StripAsciiWhitespace(p.substr(eq + 1)));
      DT_CHECK(!name.empty(), "mesh '", text, "': a dim has no name; ", usage);
      for (char c : name)
        DT_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_', "mesh '", text, "': bad dim name '",
                 name, "'; ", usage);
    }
    int64_t n = 0;
    DT_CHECK(absl::SimpleAtoi(size, &n) && n >= 1, "mesh '", text, "': size '", size, "' of dim ", name,
             " is not a positive integer; ", usage);
    DT_CHECK(m.index_of(name) < 0, "mesh '", text, "': dim name '", name, "' is repeated; ", usage);
    DT_CHECK(n <= kMaxMeshDimSize, "mesh '", text, "': dim ", name, " has ", n, " ranks; at most ", kMaxMeshDimSize,
             " are accepted");
    m.shape.push_back(n);
    m.names.push_back(name);
  }
  DT_CHECK(m.ndim() <= 3 || m.index_of("pp") >= 0, "mesh '", text, "' has 4 dims and none is pp; ", usage);
  int64_t ranks = 1;
  for (int64_t n : m.shape) {
    ranks *= n;  // at most 2^20 x 2^16 before the check: fits in int64
    DT_CHECK(ranks <= kMaxMeshRanks, "mesh '", text, "' has more than ", kMaxMeshRanks,
             " ranks; at most ", kMaxMeshRanks, " are accepted");
  }
  return m;
}

}  // namespace dtensor::planner
