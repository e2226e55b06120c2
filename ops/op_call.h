// One op call as the sharding engine sees it: the op, its tensor inputs (global shape, dtype and
// placements) and its other arguments bound to the schema's names with defaults filled in.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dtensor/dtensor_spec.h"
#include "dtensor/placement.h"
#include "ops/schema.h"

namespace dtensor {

struct OpDef;

// A positional or keyword argument before binding: a tensor input (index into the call's tensors),
// a list of tensor inputs, or a plain value.
struct TensorRef {
  int index;
};
// A list of tensor inputs; an entry kNoTensor is None (accepted only by a "Tensor?[]" argument).
struct TensorListRef {
  static constexpr int kNoTensor = -1;
  std::vector<int> indices;
};
using ArgValue = std::variant<IValue, TensorRef, TensorListRef>;

class OpCall {
 public:
  // Binds `positional` and `keyword` arguments to `op`'s schema; `tensors` and `placements` (one
  // Placements per tensor, one placement per mesh dim, normalized by this call) are the tensor inputs
  // the refs point to. Throws dtensor::Error naming the op's schema and the offending argument:
  // unknown or repeated keyword, missing required argument, wrong type, too many positionals.
  static OpCall bind(const OpDef& op, const std::vector<ArgValue>& positional,
                     const std::vector<std::pair<std::string, ArgValue>>& keyword,
                     std::vector<TensorMeta> tensors, std::vector<Placements> placements,
                     const Shape& mesh_shape);

  // Binds a call of the op named `name`, resolving a bare name among its overloads by the argument
  // types as ATen does (Registry::overloads): `pow(x, 3)` binds pow.Tensor_Scalar. Throws
  // dtensor::Error for an unknown name (listing the registered ops) or, when no overload accepts
  // the arguments, naming each overload's schema and why it refused them.
  static OpCall bind_overload(const std::string& name, const std::vector<ArgValue>& positional,
                              const std::vector<std::pair<std::string, ArgValue>>& keyword,
                              const std::vector<TensorMeta>& tensors,
                              const std::vector<Placements>& placements, const Shape& mesh_shape);

  const OpDef& op() const { return *op_; }
  const std::string& name() const;
  const Shape& mesh_shape() const { return mesh_shape_; }
  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  const TensorMeta& tensor(int i) const { return tensors_[i]; }
  const std::vector<TensorMeta>& tensors() const { return tensors_; }
  const Placements& placements(int i) const { return placements_[i]; }
  const std::vector<Placements>& all_placements() const { return placements_; }

  // Argument accessors by ATen name; throw dtensor::Error naming the op if absent or mistyped.
  bool has(const std::string& arg) const;  // present and not None
  int64_t get_int(const std::string& arg) const;
  std::optional<int64_t> get_opt_int(const std::string& arg) const;
  // An int list; a single int becomes a one-element list; None gives `fallback`.
  std::vector<int64_t> get_int_list(const std::string& arg,
                                    std::vector<int64_t> fallback = {}) const;
  double get_double(const std::string& arg) const;  // int or float
  bool get_bool(const std::string& arg) const;
  std::string get_str(const std::string& arg) const;
  // Index of the tensor bound to a Tensor argument; -1 when it is None.
  int tensor_index(const std::string& arg) const;
  // Indices of the tensors bound to a Tensor[] / Tensor?[] argument, in order; -1 for a None entry.
  const std::vector<int>& tensor_list(const std::string& arg) const;
  const IValue& value(const std::string& arg) const;

  // Hash and equality over (op, tensor metas, placements, non-tensor args, mesh shape): the
  // propagation cache key.
  size_t hash() const { return hash_; }
  bool same_key(const OpCall& o) const;
  // "mm(f32[8, 16] [S(0)], f32[16, 8] [R])", for error messages.
  std::string str() const;

 private:
  const OpDef* op_ = nullptr;
  std::vector<TensorMeta> tensors_;
  std::vector<Placements> placements_;
  std::vector<IValue> values_;            // per schema arg; tensor args hold the tensor index
  std::vector<std::vector<int>> lists_;   // per schema arg: tensor list indices
  Shape mesh_shape_;
  size_t hash_ = 0;
};

}  // namespace dtensor
