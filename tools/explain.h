// `dtensor explain`: one JSON line in, one JSON line out, as ../shared/conformance/README.md
// specifies. A request names a mesh shape, an op, its arguments (tensors as {shape, dtype,
// placements}) and kwargs; the answer gives the chosen output and input placements, the collectives
// (redistributions first, then the strategy's own step) with the bytes each rank sends, and the cost
// model's estimate in µs. With "run": true the op also executes on the threads backend over the whole
// mesh on seeded random data (Partial inputs split adversarially among ranks) and every output's
// full_tensor() is compared with the single-device op.
#pragma once

#include <string>

#include "dtensor/collectives/process_group.h"

namespace dtensor::tools {

struct ExplainOptions {
  std::string hardware = "h100-nvlink";  // cost-model profile (propagation/hardware/*.json)
  Timeout timeout{std::chrono::seconds(60)};
  uint64_t seed = 1234;
};

// Answers one request line. Never throws: a rejected or malformed request gives {"error": "..."}.
// A line of the conformance file ({"case": {...}, "expect": {...}}) is answered for its case, with
// "expect_match" added.
std::string explain_line(const std::string& line, const ExplainOptions& options = {});

}  // namespace dtensor::tools
