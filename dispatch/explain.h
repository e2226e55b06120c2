// The engine's decision explained (`dtensor explain`, Python's dtensor.explain): one JSON line in, one JSON line out, as ../shared/conformance/README.md
// specifies. A request names a mesh shape, an op, its arguments (tensors as {shape, dtype,
// placements}) and kwargs; the answer gives the chosen output and input placements, the collectives
// (redistributions first, then the strategy's own step) with the bytes each rank sends, and the cost
// model's estimate in µs. With "run": true the op also executes on the threads backend over the whole
// mesh on seeded random data (Partial inputs split adversarially among ranks) and every output's
// full_tensor() is compared with the single-device op.
#pragma once

#include <string>

#include "dtensor/collectives/process_group.h"

namespace dtensor {

struct ExplainOptions {
  std::string hardware = "h100-nvlink";  // cost-model profile: a name (propagation/hardware/*.json) or a JSON file
  Timeout timeout{std::chrono::seconds(60)};
  uint64_t seed = 1234;
  // "run": true starts one thread per rank and holds every input and output once per rank plus the
  // single-device reference; larger requests are refused with an error saying so.
  int64_t max_run_ranks = 64;
  int64_t max_run_bytes = int64_t{1} << 30;  // (inputs + outputs bytes) x (ranks + 2)
  // Work, not only bytes: SDPA over 2^20 positions is 12 MB of inputs and hours of compute.
  double max_run_flops = 2e10;  // forward FLOPs (ops/flops.h) x (ranks + 1)
  size_t max_line_bytes = size_t{1} << 20;   // a longer request line is answered with an error
};

// Answers one request line with one JSON line. Never throws: a rejected or malformed request, an
// empty line, a line over max_line_bytes or with bytes that are not UTF-8 gives {"error": "..."}
// (invalid UTF-8 echoed back becomes U+FFFD). A line of the conformance file ({"case": {...},
// "expect": {...}}) is answered for its case, with "expect_match" added.
// Limits on the request (dtensor/core/limits.h): mesh of 1 to kMaxMeshDims dims, each of 1 to
// kMaxMeshDimSize; tensors of at most kMaxTensorRank dims and kMaxTensorBytes bytes.
std::string explain_line(const std::string& line, const ExplainOptions& options = {});

}  // namespace dtensor
