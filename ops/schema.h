// Op schemas in ATen's notation, e.g.
//   "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
// parsed once at registration. Binding a call checks the arguments against the schema and fills
// defaults, so strategies and kernels read arguments by their ATen names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "ops/ivalue.h"

namespace dtensor {

struct ArgDef {
  enum Type : uint8_t { kTensor, kTensorList, kInt, kIntList, kFloat, kFloatList, kBool, kStr, kScalar };
  std::string name;
  Type type = kTensor;
  bool optional = false;  // "T?": None allowed
  // "Tensor?[]" (kTensorList): an entry may be None (index.Tensor's indices: x[:, i] is [None, i]).
  bool optional_entries = false;
  bool has_default = false;
  IValue default_value;
  bool keyword_only = false;  // after "*"
};

struct OpSchema {
  std::string name;  // with overload: "max.dim"
  std::vector<ArgDef> args;
  std::vector<std::string> returns;  // names of the tensor outputs ("" when unnamed)
  std::string text;                  // the schema as written
  // Throws dtensor::Error naming the schema text and the problem.
  static OpSchema parse(const std::string& text);
  int index_of(const std::string& arg) const;  // -1 if absent
};

// A tensor argument as the engine sees it: global shape, dtype (placements live in the call).
struct TensorMeta {
  Shape shape;
  DType dtype = DType::kFloat32;
  bool operator==(const TensorMeta& o) const { return shape == o.shape && dtype == o.dtype; }
};

}  // namespace dtensor
