// Random ops with DTensor semantics: counter-based Philox draws (kernels/cpu/random.h) with the seed
// and offset as arguments, so a call is a pure function of its arguments and every block draws
// exactly its slice of the whole tensor's draw: a Shard holds what one device draws there, a
// Replicate the same values on every rank, with no communication.
//   philox_rand_like(self, seed, offset, *, dtype)   uniform [0, 1), self's shape
//   philox_randn_like(self, seed, offset, *, dtype)  standard normal
//   philox_bernoulli(self, p, seed, offset, *, dtype) 1 with probability p
//   philox_dropout(input, p, seed, offset)           (input * mask / (1 - p), mask): native_dropout
//                                                    in training, mask kept with probability 1 - p
// No ATen op has these names; ATen's native_dropout, bernoulli.p, rand_like and randn_like are their
// aliases (OpDef::aten), whose bridge adapters add the mesh's agreed seed and an offset advanced per
// call, as PyTorch DTensor's RNG tracker advances its Philox offset; torch's own
// rngprims.philox_rand takes seed and offset the same way.
#include "kernels/cpu/random.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

uint64_t seed_of(const OpCall& c) { return static_cast<uint64_t>(c.get_int("seed")); }
uint64_t offset_of(const OpCall& c) { return static_cast<uint64_t>(c.get_int("offset")); }

// The output's dtype: the dtype argument when given, else self's; floating when `floating`.
DType out_dtype(const OpCall& c, bool floating) {
  const DType d = c.has("dtype") ? guard(c, [&] { return dtype_from_name(c.get_str("dtype")); }) : c.tensor(0).dtype;
  if (floating && !is_floating(d))
    fail(c, absl::StrCat("dtype ", dtype_name(d), "; accepted: float32, float64, bfloat16, float16"));
  return d;
}

double probability(const OpCall& c) {
  const double p = c.get_double("p");
  if (!(p >= 0 && p <= 1)) fail(c, absl::StrCat("p = ", p, "; accepted: a probability in [0, 1]"));
  return p;
}

// The draw of this rank's block of output 0, on self's device.
template <typename Draw>
Tensor block_draw(const std::vector<Tensor>& in, const LocalContext& ctx, Draw draw) {
  auto [shape, start] = ctx.out_block(0);
  return draw(ctx.out_meta[0].shape, start, shape).to(in[0].device());
}

std::vector<Sample> like_samples(std::vector<ArgValue> before_seed) {
  auto args = [&](int64_t seed, int64_t offset) {
    std::vector<ArgValue> a{T(0)};
    a.insert(a.end(), before_seed.begin(), before_seed.end());
    a.push_back(I(seed));
    a.push_back(I(offset));
    return a;
  };
  return {sample({{7, 5}}, args(1234, 0)), sample({{3, 9, 4}}, args(-1, 77)),
          sample({{11}}, args(5, 1LL << 40), {{"dtype", V(std::string("float64"))}})};
}

void define_like(Registry& reg, const char* name, bool normal) {
  OpDef& op = reg.define(absl::StrCat(name, "(Tensor self, int seed, int offset, *, ScalarType? dtype=None) -> Tensor"),
                         "random");
  op.cost = cost(CostClass::kTranscendental, Keeps::kNothing);
  op.aten.layout_dependent = true;  // a block draws the elements at its global positions
  op.aten.aliases = {{normal ? "randn_like" : "rand_like", "philox_like"}};  // + the mesh's seed and offset
  op.no_backward = "a random draw: its value does not depend on self's values";
  op.meta = [](const OpCall& c) { return std::vector<TensorMeta>{{c.tensor(0).shape, out_dtype(c, true)}}; };
  op.kernel = [normal](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return one(block_draw(in, ctx, [&](const Shape& g, const Shape& s, const Shape& b) {
      const DType d = ctx.out_meta[0].dtype;
      return normal ? kernels::philox_normal(g, s, b, seed_of(c), offset_of(c), d)
                    : kernels::philox_uniform(g, s, b, seed_of(c), offset_of(c), d);
    }));
  };
  op.samples = [] { return like_samples({}); };
}

void define_bernoulli(Registry& reg) {
  OpDef& op = reg.define("philox_bernoulli(Tensor self, float p, int seed, int offset, *, ScalarType? dtype=None) -> Tensor",
                         "random");
  op.cost = cost(CostClass::kTranscendental, Keeps::kNothing);
  op.aten.layout_dependent = true;
  op.aten.aliases = {{"bernoulli.p", "philox_bernoulli"}};
  op.no_backward = "a random draw: its value does not depend on self's values";
  op.meta = [](const OpCall& c) {
    probability(c);
    return std::vector<TensorMeta>{{c.tensor(0).shape, out_dtype(c, false)}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return one(block_draw(in, ctx, [&](const Shape& g, const Shape& s, const Shape& b) {
      return kernels::philox_bernoulli(g, s, b, seed_of(c), offset_of(c), probability(c), ctx.out_meta[0].dtype);
    }));
  };
  op.samples = [] {
    std::vector<Sample> s = like_samples({V(0.3)});
    s.push_back(sample({{6, 4}}, {T(0), V(0.5), I(9), I(3)}, {{"dtype", V(std::string("bool"))}}));
    return s;
  };
}

void define_dropout(Registry& reg) {
  OpDef& op = reg.define("philox_dropout(Tensor input, float p, int seed, int offset) -> (Tensor output, Tensor mask)",
                         "random");
  op.cost = cost(CostClass::kElementwise, Keeps::kOutput);  // the backward reads the mask
  op.aten.layout_dependent = true;
  op.aten.aliases = {{"native_dropout", "philox_dropout"}};  // train=False: p = 0
  op.meta = [](const OpCall& c) {
    probability(c);
    check_floating(c, 0, "input");
    const TensorMeta& x = c.tensor(0);
    return std::vector<TensorMeta>{{x.shape, x.dtype}, {x.shape, DType::kBool}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const double p = probability(c);
    const Tensor mask = block_draw(in, ctx, [&](const Shape& g, const Shape& s, const Shape& b) {
      return kernels::philox_bernoulli(g, s, b, seed_of(c), offset_of(c), 1.0 - p, DType::kBool);
    });
    // torch's native_dropout: input * mask * (1 / (1 - p)), all zeros when p = 1.
    const double scale = p == 1 ? 0.0 : 1.0 / (1.0 - p);
    return std::vector<Tensor>{kernels::mul(kernels::mul(in[0], mask.to(in[0].dtype())), Scalar(scale)), mask};
  };
  op.samples = [] {
    return std::vector<Sample>{sample({{8, 6}}, {T(0), V(0.25), I(42), I(0)}),
                               sample({{5, 3, 7}}, {T(0), V(0.5), I(-7), I(12)}),
                               sample({{9}}, {T(0), V(1.0), I(3), I(1)}, {}, {DType::kFloat64})};
  };
}

void define_random_ops(Registry& reg) {
  define_like(reg, "philox_rand_like", false);
  define_like(reg, "philox_randn_like", true);
  define_bernoulli(reg);
  define_dropout(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("random", kDefinitions, define_random_ops);

}  // namespace dtensor::ops
