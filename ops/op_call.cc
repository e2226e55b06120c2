#include "ops/op_call.h"

#include "absl/hash/hash.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/limits.h"
#include "ops/registry.h"

namespace dtensor {
namespace {

bool type_ok(const ArgDef& a, const IValue& v) {
  if (is_none(v)) return a.optional || (a.has_default && is_none(a.default_value));
  switch (a.type) {
    case ArgDef::kInt: return std::holds_alternative<int64_t>(v);
    case ArgDef::kIntList:
      return std::holds_alternative<std::vector<int64_t>>(v) || std::holds_alternative<int64_t>(v);
    case ArgDef::kFloat:
    case ArgDef::kScalar:
      return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v) ||
             (a.type == ArgDef::kScalar && std::holds_alternative<bool>(v));
    case ArgDef::kFloatList: return std::holds_alternative<std::vector<double>>(v);
    case ArgDef::kBool: return std::holds_alternative<bool>(v);
    case ArgDef::kStr: return std::holds_alternative<std::string>(v);
    default: return false;
  }
}

const char* type_name(ArgDef::Type t) {
  switch (t) {
    case ArgDef::kTensor: return "Tensor";
    case ArgDef::kTensorList: return "Tensor[]";  // or Tensor?[] (ArgDef::optional_entries)
    case ArgDef::kInt: return "int";
    case ArgDef::kIntList: return "int[]";
    case ArgDef::kFloat: return "float";
    case ArgDef::kFloatList: return "float[]";
    case ArgDef::kBool: return "bool";
    case ArgDef::kStr: return "str";
    case ArgDef::kScalar: return "Scalar";
  }
  return "?";
}

// The sizes of a call come from users and request files: bound them before any rule expands them
// (rows^mesh dims) or any formula multiplies them (bytes * ranks).
void check_sizes(const std::string& op, const std::vector<TensorMeta>& tensors, const Shape& mesh) {
  DT_CHECK(!mesh.empty() && static_cast<int64_t>(mesh.size()) <= kMaxMeshDims, op, ": a mesh of ",
           mesh.size(), " dims ", shape_str(mesh), "; accepted: 1 to ", kMaxMeshDims, " mesh dims");
  int64_t ranks = 1;
  for (int64_t s : mesh) {
    DT_CHECK(s >= 1 && s <= kMaxMeshDimSize, op, ": mesh ", shape_str(mesh), " has a dim of size ", s,
             "; accepted: 1 to ", kMaxMeshDimSize);
    ranks *= s;  // cannot overflow: at most 6 factors of 2^20
    DT_CHECK(ranks <= kMaxMeshRanks, op, ": mesh ", shape_str(mesh), " has more than ", kMaxMeshRanks,
             " ranks");
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorMeta& m = tensors[t];
    DT_CHECK(static_cast<int64_t>(m.shape.size()) <= kMaxTensorRank, op, ": tensor ", t, " has ",
             m.shape.size(), " dims; accepted: at most ", kMaxTensorRank);
    const int64_t n = numel(m.shape);  // throws on negative sizes and int64 overflow
    const int64_t item = static_cast<int64_t>(itemsize(m.dtype));
    DT_CHECK(n <= kMaxTensorBytes / item, op, ": tensor ", t, " of shape ", shape_str(m.shape), " (",
             dtype_name(m.dtype), ") is larger than ", kMaxTensorBytes, " bytes, the largest accepted");
  }
}

}  // namespace

OpCall OpCall::bind_overload(const std::string& name, const std::vector<ArgValue>& positional,
                             const std::vector<std::pair<std::string, ArgValue>>& keyword,
                             const std::vector<TensorMeta>& tensors,
                             const std::vector<Placements>& placements, const Shape& mesh_shape) {
  const auto& candidates = Registry::get().overloads(name);
  if (candidates.empty()) Registry::get().find(name);  // throws: unsupported op, with the list
  if (candidates.size() == 1) return bind(*candidates[0], positional, keyword, tensors, placements, mesh_shape);
  std::string refused;
  for (const OpDef* op : candidates) {
    try {
      return bind(*op, positional, keyword, tensors, placements, mesh_shape);
    } catch (const Error& e) {
      absl::StrAppend(&refused, "\n  ", op->schema.text, ": ", e.what());
    }
  }
  DT_FAIL(name, ": no overload accepts these arguments;", refused);
}

OpCall OpCall::bind(const OpDef& op, const std::vector<ArgValue>& positional,
                    const std::vector<std::pair<std::string, ArgValue>>& keyword,
                    std::vector<TensorMeta> tensors, std::vector<Placements> placements,
                    const Shape& mesh_shape) {
  const OpSchema& sc = op.schema;
  OpCall c;
  c.op_ = &op;
  c.mesh_shape_ = mesh_shape;
  const size_t n = sc.args.size();
  std::vector<const ArgValue*> given(n, nullptr);
  size_t max_pos = 0;
  for (const auto& a : sc.args) max_pos += a.keyword_only ? 0 : 1;
  DT_CHECK(positional.size() <= max_pos, op.name(), ": ", positional.size(),
           " positional arguments, at most ", max_pos, " accepted by ", sc.text);
  for (size_t i = 0; i < positional.size(); ++i) given[i] = &positional[i];
  for (const auto& [name, v] : keyword) {
    int idx = sc.index_of(name);
    DT_CHECK(idx >= 0, op.name(), ": unknown argument '", name, "'; the schema is ", sc.text);
    DT_CHECK(given[idx] == nullptr, op.name(), ": argument '", name, "' given twice");
    given[idx] = &v;
  }
  c.values_.resize(n);
  c.lists_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const ArgDef& a = sc.args[i];
    if (given[i] == nullptr) {
      DT_CHECK(a.has_default || a.optional, op.name(), ": missing argument '", a.name, "' (",
               type_name(a.type), "); the schema is ", sc.text);
      c.values_[i] = a.default_value;
      continue;
    }
    const ArgValue& v = *given[i];
    if (a.type == ArgDef::kTensor) {
      if (const auto* t = std::get_if<TensorRef>(&v)) {
        c.values_[i] = static_cast<int64_t>(t->index);
      } else {
        const IValue* iv = std::get_if<IValue>(&v);
        DT_CHECK(iv && is_none(*iv) && a.optional, op.name(), ": argument '", a.name,
                 "' must be a tensor; the schema is ", sc.text);
      }
    } else if (a.type == ArgDef::kTensorList) {
      const auto* l = std::get_if<TensorListRef>(&v);
      DT_CHECK(l != nullptr, op.name(), ": argument '", a.name, "' must be a list of tensors",
               a.optional_entries ? " or None" : "", "; the schema is ", sc.text);
      for (size_t k = 0; k < l->indices.size(); ++k)
        DT_CHECK(l->indices[k] != TensorListRef::kNoTensor || a.optional_entries, op.name(), ": argument '",
                 a.name, "' entry ", k, " is None; accepted: a tensor (the schema is ", sc.text, ")");
      c.lists_[i] = l->indices;
    } else {
      const IValue* iv = std::get_if<IValue>(&v);
      DT_CHECK(iv != nullptr && type_ok(a, *iv), op.name(), ": argument '", a.name, "' must be ",
               type_name(a.type), a.optional ? " or None" : "", ", got ",
               iv ? ivalue_str(*iv) : std::string("a tensor"), "; the schema is ", sc.text);
      c.values_[i] = *iv;
    }
  }
  DT_CHECK(placements.size() == tensors.size(), op.name(), ": ", placements.size(),
           " placement lists for ", tensors.size(), " tensors");
  check_sizes(op.name(), tensors, mesh_shape);
  for (size_t t = 0; t < tensors.size(); ++t)
    placements[t] = normalize_placements(placements[t], static_cast<int64_t>(tensors[t].shape.size()),
                                         static_cast<int>(mesh_shape.size()), op.name().c_str());
  for (const Placements& p : placements) check_shard_weights(p, mesh_shape, op.name().c_str());
  c.tensors_ = std::move(tensors);
  c.placements_ = std::move(placements);
  // Cache key hash: op, mesh shape, tensors (shape, dtype, placements), other argument values.
  size_t h = absl::HashOf(c.op_, c.mesh_shape_);
  for (size_t t = 0; t < c.tensors_.size(); ++t)
    h = absl::HashOf(h, c.tensors_[t].shape, c.tensors_[t].dtype, c.placements_[t]);
  for (size_t i = 0; i < n; ++i) {
    if (sc.args[i].type == ArgDef::kTensorList) h = absl::HashOf(h, c.lists_[i]);  // None entries' places
    if (sc.args[i].type == ArgDef::kTensor || sc.args[i].type == ArgDef::kTensorList) continue;
    h = absl::HashOf(h, std::visit([](const auto& x) -> size_t { return absl::HashOf(x); }, c.values_[i]));
  }
  c.hash_ = h;
  return c;
}

const std::string& OpCall::name() const { return op_->name(); }

const IValue& OpCall::value(const std::string& arg) const {
  int i = op_->schema.index_of(arg);
  DT_CHECK(i >= 0, name(), ": the schema has no argument '", arg, "'");
  return values_[i];
}

bool OpCall::has(const std::string& arg) const {
  int i = op_->schema.index_of(arg);
  return i >= 0 && !is_none(values_[i]);
}

int64_t OpCall::get_int(const std::string& arg) const {
  const IValue& v = value(arg);
  if (const auto* l = std::get_if<std::vector<int64_t>>(&v); l && l->size() == 1) return (*l)[0];
  const auto* i = std::get_if<int64_t>(&v);
  DT_CHECK(i != nullptr, name(), ": argument '", arg, "' must be an int, got ", ivalue_str(v));
  return *i;
}

std::optional<int64_t> OpCall::get_opt_int(const std::string& arg) const {
  if (!has(arg)) return std::nullopt;
  return get_int(arg);
}

std::vector<int64_t> OpCall::get_int_list(const std::string& arg, std::vector<int64_t> fallback) const {
  const IValue& v = value(arg);
  if (is_none(v)) return fallback;
  if (const auto* i = std::get_if<int64_t>(&v)) return {*i};
  const auto* l = std::get_if<std::vector<int64_t>>(&v);
  DT_CHECK(l != nullptr, name(), ": argument '", arg, "' must be an int list, got ", ivalue_str(v));
  return *l;
}

double OpCall::get_double(const std::string& arg) const {
  const IValue& v = value(arg);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  DT_FAIL(name(), ": argument '", arg, "' must be a number, got ", ivalue_str(v));
}

bool OpCall::get_bool(const std::string& arg) const {
  const IValue& v = value(arg);
  const auto* b = std::get_if<bool>(&v);
  DT_CHECK(b != nullptr, name(), ": argument '", arg, "' must be a bool, got ", ivalue_str(v));
  return *b;
}

std::string OpCall::get_str(const std::string& arg) const {
  const IValue& v = value(arg);
  const auto* s = std::get_if<std::string>(&v);
  DT_CHECK(s != nullptr, name(), ": argument '", arg, "' must be a string, got ", ivalue_str(v));
  return *s;
}

int OpCall::tensor_index(const std::string& arg) const {
  const IValue& v = value(arg);
  if (is_none(v)) return -1;
  return static_cast<int>(std::get<int64_t>(v));
}

const std::vector<int>& OpCall::tensor_list(const std::string& arg) const {
  const int i = op_->schema.index_of(arg);
  DT_CHECK(i >= 0 && op_->schema.args[i].type == ArgDef::kTensorList, name(), ": the schema has no tensor list '",
           arg, "'");
  return lists_[i];
}

bool OpCall::same_key(const OpCall& o) const {
  return op_ == o.op_ && mesh_shape_ == o.mesh_shape_ && tensors_ == o.tensors_ &&
         placements_ == o.placements_ && values_ == o.values_ && lists_ == o.lists_;
}

std::string OpCall::str() const {
  std::vector<std::string> parts;
  for (size_t t = 0; t < tensors_.size(); ++t)
    parts.push_back(absl::StrCat(dtype_name(tensors_[t].dtype), shape_str(tensors_[t].shape), " ",
                                 placements_str(placements_[t])));
  const OpSchema& sc = op_->schema;
  for (size_t i = 0; i < sc.args.size(); ++i) {
    if (sc.args[i].optional_entries) {  // which entries are None: "indices=[None, t1]"
      std::vector<std::string> e;
      for (int t : lists_[i]) e.push_back(t < 0 ? "None" : absl::StrCat("t", t));
      parts.push_back(absl::StrCat(sc.args[i].name, "=[", absl::StrJoin(e, ", "), "]"));
    }
    if (sc.args[i].type == ArgDef::kTensor || sc.args[i].type == ArgDef::kTensorList) continue;
    if (sc.args[i].has_default && values_[i] == sc.args[i].default_value) continue;
    parts.push_back(absl::StrCat(sc.args[i].name, "=", ivalue_str(values_[i])));
  }
  return absl::StrCat(name(), "(", absl::StrJoin(parts, ", "), ") on mesh ", shape_str(mesh_shape_));
}

}  // namespace dtensor
