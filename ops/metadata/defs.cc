// ATen's size queries and scalar read as registered ops, with ATen's schemas:
//   sym_size.int(Tensor self, int dim) -> SymInt        the global size of dim
//   sym_stride.int(Tensor self, int dim) -> SymInt      the global tensor's contiguous stride of dim
//   sym_numel(Tensor self) -> SymInt                    the global element count
//   sym_storage_offset(Tensor self) -> SymInt           0
//   sym_is_contiguous(Tensor self, MemoryFormat memory_format=contiguous_format) -> SymBool
//   _local_scalar_dense(Tensor self) -> Scalar          Tensor.item(): the one element's value
// The engine's ops return tensors, so a SymInt / SymBool / Scalar return is a 0-d tensor holding the
// value (int64, bool, self's dtype), Replicate on every mesh dim: the same answer on every rank. (The
// schema parser, ops/schema.cc, reads any return type as one unnamed output.)
//
// A DTensor has no global storage: its global tensor is described as torch describes the bridge
// tensor (python/dtensor/torch_bridge.py, DTensor.__new__): the global shape with contiguous strides
// (dtensor/core/shape.h's contiguous_strides: a size-0 dim strides as a size-1 one, as torch's),
// storage offset 0. The size queries read only that metadata (OpCall::tensor(0)), never the block,
// so they answer from any placement (rules.cc: R from S(d), R and every Partial) and the engine
// moves no data for them. MemoryFormat is a name
// ("contiguous_format", "channels_last", "channels_last_3d"; "preserve_format" reads as
// contiguous_format, as torch's is_contiguous does), as ScalarType is.
//
// _local_scalar_dense needs the whole value on every rank: its only rule is R <- R, so the engine
// reduces a Partial and gathers a Shard first, the collective .item() needs.
#include "absl/strings/str_cat.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

constexpr char kSizeNoBackward[] = "a size query: its integer answer has no gradient";

// `dim` of input 0 in [0, rank), a negative one counted from the end; fails naming the call.
int64_t dim_arg(const OpCall& c) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size()), d = c.get_int("dim");
  if (rank == 0)
    fail(c, absl::StrCat("dim ", d, " of a 0-d tensor: it has no dims; accepted: a tensor with at least one dim"));
  if (d < -rank || d >= rank)
    fail(c, absl::StrCat("dim ", d, " out of range for a ", rank, "-d tensor ", shape_str(c.tensor(0).shape),
                         "; accepted: [", -rank, ", ", rank - 1, "]"));
  return d < 0 ? d + rank : d;
}

// Whether strides `st` of `shape` are contiguous in `format`: walking the dims from innermost in the
// format's order (contiguous: last to first; channels_last: C, W, H, N; channels_last_3d: C, W, H, D,
// N), each dim of size other than 1 has the product of the sizes walked before it as its stride.
// channels_last needs a 4-d tensor, channels_last_3d a 5-d one (any other rank: false, as torch).
// Checked against torch's is_contiguous over shapes with size-0 and size-1 dims
// (tests/python/test_metadata_ops.py).
bool contiguous_in(const OpCall& c, const Shape& shape, const Shape& st, const std::string& format) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> order;
  if (format == "contiguous_format" || format == "preserve_format") {  // torch reads preserve as contiguous
    if (numel(shape) == 0) return true;  // torch's: an empty tensor is contiguous (not so in channels_last)
    for (int64_t d = rank - 1; d >= 0; --d) order.push_back(d);
  } else if (format == "channels_last") {
    if (rank != 4) return false;
    order = {1, 3, 2, 0};
  } else if (format == "channels_last_3d") {
    if (rank != 5) return false;
    order = {1, 4, 3, 2, 0};
  } else {
    fail(c, absl::StrCat("memory_format '", format,
                         "'; accepted: contiguous_format, channels_last, channels_last_3d, preserve_format"));
  }
  int64_t expected = 1;
  for (int64_t d : order) {
    if (shape[d] == 1) continue;
    if (st[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// The 0-d answer on the device of this rank's block.
Tensor answer(double value, DType dtype, const Tensor& block) {
  return Tensor::full({}, value, dtype, block.device());
}

// Defines a size query: `value` computes the answer from the call (global metadata only).
OpDef& define_query(Registry& reg, const std::string& schema, DType out, std::function<int64_t(const OpCall&)> value,
                    std::vector<Sample> samples) {
  OpDef& op = reg.define(schema, "metadata");
  op.complex = true;  // the data is never read
  op.cost = cost(CostClass::kView, Keeps::kNothing);
  op.no_backward = kSizeNoBackward;
  // The answer is the global tensor's: ATen's query on a block would give the block's.
  op.aten.layout_dependent = true;
  op.meta = [value, out](const OpCall& c) {
    value(c);  // argument errors here, before any rule or collective
    return std::vector<TensorMeta>{{Shape{}, out}};
  };
  op.kernel = [value, out](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return std::vector<Tensor>{answer(static_cast<double>(value(c)), out, in[0])};
  };
  op.samples = [samples] { return samples; };
  return op;
}

void define_metadata_ops(Registry& reg) {
  const DType i64 = DType::kInt64;
  // Uneven sizes (5, 3 over 2-4 ranks) and a size-0 dim, whose stride torch counts as 1.
  define_query(reg, "sym_size.int(Tensor self, int dim) -> SymInt", i64,
               [](const OpCall& c) { return c.tensor(0).shape[dim_arg(c)]; },
               {sample({{5, 3}}, {T(0), I(0)}), sample({{5, 3, 7}}, {T(0), I(-1)}), sample({{0, 3}}, {T(0), I(0)})});
  define_query(reg, "sym_stride.int(Tensor self, int dim) -> SymInt", i64,
               [](const OpCall& c) { return contiguous_strides(c.tensor(0).shape)[dim_arg(c)]; },
               {sample({{5, 3}}, {T(0), I(0)}), sample({{5, 3, 7}}, {T(0), I(1)}), sample({{2, 0, 3}}, {T(0), I(0)})});
  define_query(reg, "sym_numel(Tensor self) -> SymInt", i64,
               [](const OpCall& c) { return numel(c.tensor(0).shape); },
               {sample({{5, 3}}, {T(0)}), sample({{}}, {T(0)}), sample({{4, 0}}, {T(0)})});
  define_query(reg, "sym_storage_offset(Tensor self) -> SymInt", i64, [](const OpCall&) { return int64_t{0}; },
               {sample({{5, 3}}, {T(0)})});
  define_query(reg, "sym_is_contiguous(Tensor self, MemoryFormat memory_format=contiguous_format) -> SymBool",
               DType::kBool,
               [](const OpCall& c) {
                 const Shape& s = c.tensor(0).shape;
                 return int64_t{contiguous_in(c, s, contiguous_strides(s), c.get_str("memory_format"))};
               },
               {sample({{5, 3}}, {T(0)}), sample({{2, 1, 3, 3}}, {T(0)}, {{"memory_format", V(std::string("channels_last"))}}),
                sample({{2, 3, 2, 1, 1}}, {T(0)}, {{"memory_format", V(std::string("channels_last_3d"))}})});

  OpDef& item = reg.define("_local_scalar_dense(Tensor self) -> Scalar", "metadata");
  item.complex = true;  // a copy of the element
  item.cost = cost(CostClass::kCopy, Keeps::kNothing);
  item.no_backward = "Tensor.item(): a Python number, outside autograd (torch gives it no gradient either)";
  item.meta = [](const OpCall& c) {
    const TensorMeta& x = c.tensor(0);
    if (numel(x.shape) != 1)
      fail(c, absl::StrCat("a tensor ", shape_str(x.shape), " with ", numel(x.shape),
                           " elements cannot be converted to a Scalar; accepted: exactly one element"));
    return std::vector<TensorMeta>{{Shape{}, x.dtype}};
  };
  item.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
    return std::vector<Tensor>{in[0].reshape({}).clone()};  // a copy: not a view of self
  };
  item.samples = [] {
    return std::vector<Sample>{sample({{}}, {T(0)}), sample({{1, 1}}, {T(0)}, {}, {DType::kInt64}),
                               sample({{1}}, {T(0)}, {}, {DType::kComplex64})};
  };
}

}  // namespace

DTENSOR_FAMILY_PART("metadata", kDefinitions, define_metadata_ops);

}  // namespace dtensor::ops
