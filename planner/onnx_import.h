// ONNX import for `dtensor plan --onnx model.onnx`: an ONNX ModelProto becomes the planner's
// ModelGraph (the structure planner/graph_json.h builds).
//
// - ONNX shape inference runs first; every value the graph uses must then have a static shape.
//   Symbolic dims of the graph inputs (e.g. "batch") are bound with `dims` ("--onnx-dim batch=8");
//   an unbound one is an error naming the value and the dim.
// - Float initializers with more than one element are parameters (counted, sharded, optimized);
//   other initializers (shapes, axes, scalars, integer tables) are constants. Graph inputs are inputs.
// - MatMul/Gemm with a 2-D weight initializer become `linear` (weight stored [N, K]) with a Megatron
//   role: "column" unless the input is already split by an earlier column linear, then "row".
//   Other ops map to their registry twins (table in onnx_import.cc); Shape, Constant and any node
//   computed only from constants are folded (no vertex); Identity and Dropout are aliases.
// - An op with no mapping, or whose mapping the registry rejects, becomes `opaque` with the inferred
//   shape (replicated, priced as a copy) and is listed in OnnxImport::opaque.
//
// Errors (dtensor::Error): unparsable bytes, a value no node, input or initializer defines, a
// cycle, a dynamic or absurd shape, an unsupported dtype, each naming the node or value.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/graph.h"

namespace dtensor::planner {

struct OnnxImportOptions {
  std::map<std::string, int64_t> dims;  // symbolic dim name -> size
  bool training = true;
  std::string optimizer = "adamw";
};

struct OnnxImport {
  ModelGraph graph;
  std::vector<std::string> opaque;  // "OpType 'value'" (and why, when the mapping was rejected)
  int folded = 0;                   // nodes folded as constants or aliases
};

// `bytes` is the serialized ModelProto; `name` names the model in reports.
OnnxImport import_onnx(const std::string& bytes, const std::string& name, const OnnxImportOptions& o);

// Parses "NAME=VALUE" (--onnx-dim) into `dims`; throws dtensor::Error naming the text.
void parse_onnx_dim(const std::string& text, std::map<std::string, int64_t>* dims);

}  // namespace dtensor::planner
