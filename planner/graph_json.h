// The JSON graph format, for users who bring their own model (`dtensor plan --graph FILE.json`) and
// for dumping a zoo model as a starting point (`--dump-graph FILE.json`).
//
// {
//   "format": "dtensor-graph/1",
//   "name": "mlp", "description": "...",
//   "training": true, "optimizer": "adamw",          // optional (defaults shown)
//   "nodes": [                                        // in topological order
//     {"name": "x", "kind": "input", "shape": [8, 1024], "dtype": "bfloat16"},
//     {"name": "mask", "kind": "constant", "shape": [16, 16], "dtype": "bool"},
//     {"name": "w1", "kind": "param", "shape": [4096, 1024], "dtype": "bfloat16", "layer": 0},
//     {"name": "fc1", "op": "linear", "args": ["x", "w1"], "kwargs": {}, "layer": 0,
//      "block": "layer", "role": "column", "fused": false},
//     {"name": "act", "op": "gelu", "args": ["fc1"], "kwargs": {"approximate": "tanh"}},
//     {"name": "pool", "op": "max_pool2d_with_indices", "args": ["img", [2, 2]]},
//     {"name": "after", "op": "relu", "args": ["pool:0"]}       // output 0 of a multi-output op
//   ]
// }
// "kind" defaults to "op". Op arguments follow the op's ATen schema (Registry): where the schema has a
// Tensor the argument is a tensor name ("node" or "node:OUTPUT"), or null for an absent optional
// tensor; Tensor[] takes a list of names; other arguments are JSON values (null, bool, number,
// string, list of numbers). Shapes of op outputs are computed, never given; an op may carry
// "shapes": [[sizes] or null, ...], the output shapes its producer traced (python/dtensor/planning.py
// writes them), which must equal the computed ones: an importer's mis-translated argument is an
// error naming the node, never a silently different graph. "layer" (default -1)
// marks repeated layers, which the planner solves once; "role" is the Megatron role of a matmul
// ("column", "row", "vocab", "expert"); "fused" marks flash-attention internals.
// An op the planner has no rule for is written as "opaque" with its output shape and dtype given:
// {"name": "f", "op": "opaque", "args": [["x"], [8, 64], "float32", "flip"]} (ops/planned/defs.cc),
// planned replicated and priced as a copy; python/dtensor/planning.py writes it for unknown ATen ops.
// graph_to_json writes the model's nodes only: the optimizer and redistribution vertices
// GraphBuilder::finish adds are added again when the file is read.
// Errors: dtensor::Error naming the node (by index and name) and the field that is wrong, missing,
// or refers to an unknown tensor.
#pragma once

#include <string>

#include "planner/graph.h"

namespace dtensor::planner {

std::string graph_to_json(const ModelGraph& g);
ModelGraph graph_from_json(const std::string& text);

}  // namespace dtensor::planner
