// Factories: ATen's ops with no tensor input, each rank computing only its block of the output from
// the block's shape and global offset (LocalContext::out_block), so a Shard costs no communication
// and a Replicate is the same whole tensor on every rank. Called through dispatch/factory.h
// (call_factory: the caller gives the mesh and the output placements); the rules are in rules.cc.
//   arange(end), arange.start(start, end), arange.start_step(start, end, step=1)
//       element i is start + i * step: in int64 for an integral dtype (start and step truncated, as
//       ATen's accumulate type does), in float64 then rounded for a floating one; dtype int64 when
//       every bound is an int (or bool), else float32; size as ATen computes it (RangeUtils)
//   empty.memory_format(size), empty_strided(size, stride)   zeros (any value is allowed)
//   full(size, fill_value)                 dtype bool / int64 / float32 from fill_value's type
//   rand(size, *, seed, offset), randn(...)  dtensor's Philox draw (kernels/cpu/random.h): the
//       values philox_rand_like / philox_randn_like give a tensor of this shape with (seed, offset)
//   randperm(n, *, seed, offset)           the stable argsort of n float64 Philox uniforms
//   scalar_tensor(s)                       0-d, float32 unless dtype
// Schemas are ATen's, without layout, device, pin_memory and memory_format (the Python factories
// check those; blocks are contiguous host tensors) and, for the random ones, with the Philox key
// `seed, offset` that ATen's generator supplies implicitly (dtensor.rand passes the mesh's agreed
// seed and a per-call offset, python/dtensor/factories.py). Sizes are checked here: no negative
// size, no element count past int64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/random.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

constexpr char kNoBackward[] = "a factory: no tensor input to differentiate (requires_grad makes a leaf)";

// A Scalar argument as given: its int (bools as 0/1) or float value.
struct Number {
  bool integral = true;
  int64_t i = 0;
  double d = 0;
};

Number number(const OpCall& c, const char* arg) {
  const IValue& v = c.value(arg);
  if (const auto* b = std::get_if<bool>(&v)) return {true, *b ? 1 : 0, *b ? 1.0 : 0.0};
  if (const auto* i = std::get_if<int64_t>(&v)) return {true, *i, static_cast<double>(*i)};
  if (const auto* d = std::get_if<double>(&v)) return {false, static_cast<int64_t>(*d), *d};
  fail(c, absl::StrCat(arg, " = ", ivalue_str(v), "; accepted: a number"));
}

DType dtype_or(const OpCall& c, DType fallback) {
  return c.has("dtype") ? guard(c, [&] { return dtype_from_name(c.get_str("dtype")); }) : fallback;
}

bool integral(DType d) { return is_integral(d) && d != DType::kBool; }

// The size argument `arg`, checked: no negative size and an element count int64 can hold.
Shape size_arg(const OpCall& c, const char* arg) {
  const std::vector<int64_t> v = c.get_int_list(arg);
  const Shape s(v.begin(), v.end());
  int64_t n = 1;
  bool overflow = false, zero = false;
  for (int64_t d : s) {
    if (d < 0) fail(c, absl::StrCat(arg, " ", shape_str(s), " has a negative size; accepted: sizes >= 0"));
    zero |= d == 0;
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  if (overflow && !zero)
    fail(c, absl::StrCat(arg, " ", shape_str(s), ": its element count overflows int64; accepted: a product of "
                         "sizes below 2^63"));
  return s;
}

// This rank's block of output 0 (its shape and global offset).
std::pair<Shape, Shape> block(const LocalContext& ctx) { return ctx.out_block(0); }

// ---- arange ----------------------------------------------------------------------------------

struct Range {
  Number start, end, step;
  DType dtype;
  int64_t size;
};

Range range_of(const OpCall& c) {
  const OpSchema& sc = c.op().schema;
  Range r;
  r.start = sc.index_of("start") >= 0 ? number(c, "start") : Number{};
  r.end = number(c, "end");
  r.step = sc.index_of("step") >= 0 ? number(c, "step") : Number{true, 1, 1.0};
  const bool ints = r.start.integral && r.end.integral && r.step.integral;
  r.dtype = dtype_or(c, ints ? DType::kInt64 : DType::kFloat32);
  if (r.dtype == DType::kBool) fail(c, "dtype bool; accepted: int32, int64 or a floating dtype (as ATen)");
  const double s = r.start.d, e = r.end.d, st = r.step.d;
  if (st == 0) fail(c, "step must be nonzero");
  if (!std::isfinite(s) || !std::isfinite(e))
    fail(c, absl::StrCat("unsupported range: ", s, " -> ", e, "; accepted: finite bounds"));
  if (!((st > 0 && e >= s) || (st < 0 && e <= s)))
    fail(c, absl::StrCat("upper bound and lower bound inconsistent with step sign (start ", s, ", end ", e,
                         ", step ", st, "); accepted: end >= start for step > 0, end <= start for step < 0"));
  double size_d;
  if (r.dtype == DType::kInt64 && ints) {
    // ATen's exact int64 formula for int bounds: ceil((end - start + step - sign) / step); any other
    // call takes the float64 one (torch.arange(0, 2.5, 1, dtype=torch.int64) has 3 elements).
    const int64_t xs = r.start.i, xe = r.end.i, xst = r.step.i;
    int64_t num;
    if (__builtin_sub_overflow(xe, xs, &num) || __builtin_add_overflow(num, xst - (xst > 0 ? 1 : -1), &num))
      fail(c, "invalid size, possible overflow: (end - start) does not fit int64");
    size_d = static_cast<double>(num / xst);
  } else {
    size_d = std::ceil((e - s) / st);
  }
  if (!(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max())))
    fail(c, absl::StrCat("invalid size ", size_d, ", possible overflow; accepted: (end - start) / step within int64"));
  r.size = static_cast<int64_t>(size_d);
  return r;
}

Tensor arange_block(const OpCall& c, const LocalContext& ctx) {
  const Range r = range_of(c);
  const auto [shape, offset] = block(ctx);
  const int64_t n = shape[0], o = offset[0];
  if (integral(r.dtype)) {
    std::vector<int64_t> v(n);
    // Wrapping int64 arithmetic, as ATen's kernel (the size check keeps it in range).
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<int64_t>(static_cast<uint64_t>(r.start.i) + static_cast<uint64_t>(r.step.i) * static_cast<uint64_t>(o + i));
    return Tensor::from_vector(v, shape).to(r.dtype);
  }
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = r.start.d + r.step.d * static_cast<double>(o + i);
  return Tensor::from_vector(v, shape).to(r.dtype);
}

void define_arange(Registry& reg) {
  for (const char* schema : {"arange(Scalar end, *, ScalarType? dtype=None) -> Tensor",
                             "arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None) -> Tensor",
                             "arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None) -> Tensor"}) {
    OpDef& op = reg.define(schema, "factory");
    op.cost = cost(CostClass::kElementwise, Keeps::kNothing);
    op.aten.layout_dependent = true;  // a block computes the elements at its global positions
    op.no_backward = kNoBackward;
    op.meta = [](const OpCall& c) {
      const Range r = range_of(c);
      return std::vector<TensorMeta>{{{r.size}, r.dtype}};
    };
    op.kernel = [](const std::vector<Tensor>&, const OpCall& c, const LocalContext& ctx) {
      return one(arange_block(c, ctx));
    };
  }
  reg.mutable_find("arange").samples = [] {
    return std::vector<Sample>{sample({}, {V(int64_t{11})}), sample({}, {V(int64_t{0})}),
                               sample({}, {V(7.5)}, {{"dtype", V(std::string("float64"))}})};
  };
  reg.mutable_find("arange.start").samples = [] {
    return std::vector<Sample>{sample({}, {V(int64_t{-4}), V(int64_t{9})}),
                               sample({}, {V(0.25), V(int64_t{6})}, {{"dtype", V(std::string("int32"))}})};
  };
  reg.mutable_find("arange.start_step").samples = [] {
    return std::vector<Sample>{sample({}, {V(int64_t{7}), V(int64_t{-6}), V(int64_t{-3})}),
                               sample({}, {V(-1.0), V(2.0), V(0.3)}, {{"dtype", V(std::string("float64"))}}),
                               sample({}, {V(int64_t{1}), V(int64_t{4}), V(0.25)}),
                               sample({}, {V(int64_t{5}), V(int64_t{100}), V(int64_t{9})}, {{"dtype", V(std::string("bfloat16"))}})};
  };
}

// ---- empty, empty_strided, full, scalar_tensor -----------------------------------------------

// `value` filled into this rank's block, cast to `dtype` as torch.full does (an int kept exact).
Tensor filled(const LocalContext& ctx, const Number& value, DType dtype) {
  const Shape shape = block(ctx).first;
  if (value.integral) {
    Tensor t = Tensor::empty(shape, DType::kInt64);
    std::fill_n(t.data<int64_t>(), t.numel(), value.i);
    return t.to(dtype);
  }
  return Tensor::full(shape, value.d, dtype);
}

// torch.full's check that the value fits the dtype ("value cannot be converted without overflow").
void check_fits(const OpCall& c, const Number& value, DType dtype) {
  double lo = 0, hi = 0;
  switch (dtype) {
    case DType::kInt32: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(); break;
    case DType::kInt16: lo = std::numeric_limits<int16_t>::min(), hi = std::numeric_limits<int16_t>::max(); break;
    case DType::kInt8: lo = std::numeric_limits<int8_t>::min(), hi = std::numeric_limits<int8_t>::max(); break;
    case DType::kUInt8: lo = 0, hi = std::numeric_limits<uint8_t>::max(); break;
    case DType::kInt64: lo = -0x1p63, hi = 0x1p63; break;
    case DType::kFloat32: hi = std::numeric_limits<float>::max(); break;
    case DType::kFloat16: hi = 65504.0; break;
    case DType::kBFloat16: hi = 0x1.fep127; break;
    default: return;  // float64 and bool take every value
  }
  if (is_floating(dtype)) lo = -hi;
  const bool ok = value.integral && dtype == DType::kInt64 ? true
                  : is_floating(dtype) && !std::isfinite(value.d) ? true
                  : value.d >= lo && (dtype == DType::kInt64 ? value.d < hi : value.d <= hi);
  if (!ok)
    fail(c, absl::StrCat("value ", value.integral ? absl::StrCat(value.i) : absl::StrCat(value.d),
                         " cannot be converted to ", dtype_name(dtype), " without overflow; accepted: a value in [",
                         lo, ", ", hi, "]"));
}

void define_empty(Registry& reg) {
  for (const char* schema : {"empty.memory_format(SymInt[] size, *, ScalarType? dtype=None) -> Tensor",
                             "empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None) -> Tensor"}) {
    OpDef& op = reg.define(schema, "factory");
    op.cost = cost(CostClass::kCopy, Keeps::kNothing);
    op.aten.layout_dependent = true;  // the block's shape is its own, not the size argument
    op.no_backward = kNoBackward;
    op.meta = [](const OpCall& c) {
      const Shape size = size_arg(c, "size");
      if (c.op().schema.index_of("stride") >= 0) {
        // The blocks are contiguous: the stride describes no block's memory, but must be valid.
        const std::vector<int64_t> stride = c.get_int_list("stride");
        if (stride.size() != size.size() || std::any_of(stride.begin(), stride.end(), [](int64_t s) { return s < 0; }))
          fail(c, absl::StrCat("stride [", absl::StrJoin(stride, ", "), "] for size ", shape_str(size),
                               "; accepted: one non-negative int per dim"));
      }
      return std::vector<TensorMeta>{{size, dtype_or(c, DType::kFloat32)}};
    };
    // Uninitialized in ATen; zeros here, so that every layout holds the same (deterministic) values.
    op.kernel = [](const std::vector<Tensor>&, const OpCall&, const LocalContext& ctx) {
      return one(Tensor::zeros(block(ctx).first, ctx.out_meta[0].dtype));
    };
  }
  reg.mutable_find("empty.memory_format").samples = [] {
    return std::vector<Sample>{sample({}, {L({5, 3})}), sample({}, {L({0, 4})}, {{"dtype", V(std::string("int64"))}}),
                               sample({}, {L({2, 3, 5})})};
  };
  reg.mutable_find("empty_strided").samples = [] {
    return std::vector<Sample>{sample({}, {L({5, 3}), L({1, 5})}), sample({}, {L({7}), L({1})}, {{"dtype", V(std::string("bool"))}})};
  };

  OpDef& full = reg.define("full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor", "factory");
  full.cost = cost(CostClass::kCopy, Keeps::kNothing);
  full.aten.layout_dependent = true;
  full.no_backward = kNoBackward;
  auto full_dtype = [](const OpCall& c) {
    const IValue& v = c.value("fill_value");
    const DType d = dtype_or(c, std::holds_alternative<bool>(v)      ? DType::kBool
                                : std::holds_alternative<int64_t>(v) ? DType::kInt64
                                                                     : DType::kFloat32);
    check_fits(c, number(c, "fill_value"), d);
    return d;
  };
  full.meta = [full_dtype](const OpCall& c) {
    return std::vector<TensorMeta>{{size_arg(c, "size"), full_dtype(c)}};
  };
  full.kernel = [](const std::vector<Tensor>&, const OpCall& c, const LocalContext& ctx) {
    return one(filled(ctx, number(c, "fill_value"), ctx.out_meta[0].dtype));
  };
  full.samples = [] {
    return std::vector<Sample>{sample({}, {L({5, 3}), V(-2.5)}), sample({}, {L({9}), V(int64_t{(1LL << 40) + 1})}),
                               sample({}, {L({3, 0}), V(true)}),
                               sample({}, {L({2, 3, 4}), V(int64_t{7})}, {{"dtype", V(std::string("float16"))}})};
  };

  OpDef& st = reg.define("scalar_tensor(Scalar s, *, ScalarType? dtype=None) -> Tensor", "factory");
  st.cost = cost(CostClass::kCopy, Keeps::kNothing);
  st.no_backward = kNoBackward;
  st.replicate_only = "a 0-d tensor: no dim to shard";
  st.meta = [](const OpCall& c) {
    const DType d = dtype_or(c, DType::kFloat32);
    check_fits(c, number(c, "s"), d);
    return std::vector<TensorMeta>{{Shape{}, d}};
  };
  st.kernel = [](const std::vector<Tensor>&, const OpCall& c, const LocalContext& ctx) {
    return one(filled(ctx, number(c, "s"), ctx.out_meta[0].dtype));
  };
  st.samples = [] {
    return std::vector<Sample>{sample({}, {V(-5.0)}), sample({}, {V(int64_t{3})}, {{"dtype", V(std::string("int64"))}})};
  };
}

// ---- rand, randn, randperm -------------------------------------------------------------------

uint64_t seed_of(const OpCall& c) { return static_cast<uint64_t>(c.get_int("seed")); }
uint64_t offset_of(const OpCall& c) { return static_cast<uint64_t>(c.get_int("offset")); }

void define_draws(Registry& reg) {
  for (bool normal : {false, true}) {
    OpDef& op = reg.define(absl::StrCat(normal ? "randn" : "rand",
                                        "(SymInt[] size, *, int seed, int offset, ScalarType? dtype=None) -> Tensor"),
                           "factory");
    op.cost = cost(CostClass::kTranscendental, Keeps::kNothing);
    op.aten.layout_dependent = true;  // a block draws the elements at its global positions
    op.no_backward = kNoBackward;
    op.meta = [](const OpCall& c) {
      const DType d = dtype_or(c, DType::kFloat32);
      if (!is_floating(d)) fail(c, absl::StrCat("dtype ", dtype_name(d), "; accepted: float32, float64, bfloat16, float16"));
      return std::vector<TensorMeta>{{size_arg(c, "size"), d}};
    };
    op.kernel = [normal](const std::vector<Tensor>&, const OpCall& c, const LocalContext& ctx) {
      const auto [shape, start] = block(ctx);
      const TensorMeta& m = ctx.out_meta[0];
      return one(normal ? kernels::philox_normal(m.shape, start, shape, seed_of(c), offset_of(c), m.dtype)
                        : kernels::philox_uniform(m.shape, start, shape, seed_of(c), offset_of(c), m.dtype));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({}, {L({7, 5})}, {{"seed", I(1234)}, {"offset", I(0)}}),
                                 sample({}, {L({3, 9, 4})}, {{"seed", I(-1)}, {"offset", I(77)}}),
                                 sample({}, {L({11})}, {{"seed", I(5)}, {"offset", I(1LL << 40)},
                                                        {"dtype", V(std::string("float64"))}})};
    };
  }

  OpDef& perm = reg.define("randperm(SymInt n, *, int seed, int offset, ScalarType? dtype=None) -> Tensor", "factory");
  perm.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  perm.aten.layout_dependent = true;
  perm.no_backward = kNoBackward;
  perm.meta = [](const OpCall& c) {
    const int64_t n = c.get_int("n");
    if (n < 0) fail(c, absl::StrCat("n = ", n, "; accepted: n >= 0"));
    const DType d = dtype_or(c, DType::kInt64);
    // Every value 0..n-1 must be exact in the dtype (torch's check_supported_max_int_with_precision).
    // std::numeric_limits<T>::digits of the dtype's C++ type, as ATen takes it.
    const int digits = d == DType::kInt64 ? 63 : d == DType::kInt32 ? 31 : d == DType::kInt16 ? 15
                       : d == DType::kInt8 ? 7 : d == DType::kUInt8 ? 8 : d == DType::kFloat64 ? 53
                       : d == DType::kFloat32 ? 24 : d == DType::kFloat16 ? 11 : d == DType::kBFloat16 ? 8 : 0;
    if (digits == 0)
      fail(c, absl::StrCat("dtype ", dtype_name(d), "; accepted: an integer or floating dtype other than bool (as ATen)"));
    if (digits < 63 && n > (int64_t{1} << digits) + 1)
      fail(c, absl::StrCat("n = ", n, " is more than ", dtype_name(d), " counts exactly; accepted: n <= 2^", digits, " + 1"));
    return std::vector<TensorMeta>{{{n}, d}};
  };
  perm.kernel = [](const std::vector<Tensor>&, const OpCall& c, const LocalContext& ctx) {
    // The permutation of any block depends on every key, so each rank sorts all n (O(n log n), the
    // size of the result) and keeps its block: one permutation on every layout.
    const int64_t n = ctx.out_meta[0].shape[0];
    const std::vector<double> keys =
        kernels::philox_uniform({n}, {0}, {n}, seed_of(c), offset_of(c), DType::kFloat64).to_vector<double>();
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
    const auto [shape, start] = block(ctx);
    std::vector<int64_t> mine(order.begin() + start[0], order.begin() + start[0] + shape[0]);
    return one(Tensor::from_vector(mine, shape).to(ctx.out_meta[0].dtype));
  };
  perm.samples = [] {
    return std::vector<Sample>{sample({}, {I(37)}, {{"seed", I(4)}, {"offset", I(1)}}),
                               sample({}, {I(3)}, {{"seed", I(9)}, {"offset", I(2)}, {"dtype", V(std::string("float32"))}})};
  };
}

void define_factories(Registry& reg) {
  define_arange(reg);
  define_empty(reg);
  define_draws(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("factory", kDefinitions, define_factories);

}  // namespace dtensor::ops
