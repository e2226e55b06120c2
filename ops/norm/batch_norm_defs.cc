// ATen's _native_batch_norm_legit_functional (nn.BatchNorm's op after functionalization; the bridge
// runs _native_batch_norm_legit, .no_stats and _native_batch_norm_legit_no_training through it):
//   (input [N, C, *], weight [C]?, bias [C]?, running_mean [C], running_var [C], training, momentum, eps)
//   -> (out like input, save_mean, save_invstd, running_mean_out [C], running_var_out [C])
// Training: per channel the mean and biased variance over every dim but 1, out = (x - mean) *
// invstd * weight + bias with invstd = 1 / sqrt(var + eps); save_mean and save_invstd [C] in the
// input's dtype; running_mean_out = (1 - momentum) * running_mean + momentum * mean and
// running_var_out likewise with the unbiased variance (n / (n - 1)), as ATen's CPU kernel.
// Evaluation: the running statistics normalize; save_mean and save_invstd are empty [0] (float32
// for a bfloat16 / float16 input, as ATen's), the running statistics come back unchanged.
// Statistics in float64. Rules (batch_norm_rules.cc): channels sharded alike everywhere; a batch or
// spatial dim sharded in evaluation with the [C] tensors replicated, and in training through the
// step "sync_stats" (SyncBatchNorm: one all_reduce of 2 C float64 values, the channel sums).
#include "dtensor/dtensor_spec.h"
#include "dtensor/partial_split.h"
#include "ops/common/defs.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

constexpr const char* kStats[] = {"running_mean", "running_var"};

bool reduced_precision(DType d) { return d == DType::kBFloat16 || d == DType::kFloat16; }

std::vector<int64_t> all_but_channels(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// [C] -> [1, C, 1, ...] for a rank-`rank` input.
Shape channel_shape(int64_t ch, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[1] = ch;
  return s;
}

std::vector<TensorMeta> batch_norm_meta(const OpCall& c) {
  const TensorMeta& x = c.tensor(0);
  if (x.shape.size() < 2)
    fail(c, absl::StrCat("input ", shape_str(x.shape), "; accepted: input [N, C, ...] of rank 2 or more"));
  if (!is_floating(x.dtype)) fail(c, "accepted dtypes: float32, float64, bfloat16, float16");
  const int64_t ch = x.shape[1];
  for (const char* name : {"weight", "bias", kStats[0], kStats[1]}) {
    const int i = c.tensor_index(name);
    if (i >= 0 && c.tensor(i).shape != Shape{ch})
      fail(c, absl::StrCat(name, " ", shape_str(c.tensor(i).shape), "; accepted: [", ch, "] (the input's C)"));
  }
  const bool training = c.get_bool("training");
  const TensorMeta save = training ? TensorMeta{{ch}, x.dtype}
                                   : TensorMeta{{0}, reduced_precision(x.dtype) ? DType::kFloat32 : x.dtype};
  return {x, save, save, c.tensor(c.tensor_index(kStats[0])), c.tensor(c.tensor_index(kStats[1]))};
}

using Reduce = std::function<Tensor(Tensor)>;

// The outputs from this rank's block; `reduce` sums per-channel partial sums over the ranks that
// share the channels (identity when the block holds every element of its channels); `count` is
// the global number of elements per channel. Training statistics come from one reduction of the
// sums of d = x - shift and of d^2 with shift = running_mean (the same on every rank, and near the
// mean once training is under way, so var = E[d^2] - E[d]^2 in float64 loses nothing that matters):
// one collective instead of a mean first and squared deviations after.
std::vector<Tensor> batch_norm_outputs(const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                                       const Reduce& reduce, double count) {
  const Tensor& x = in[0];
  const int64_t rank = x.dim(), ch = x.size(1);
  const Shape cs = channel_shape(ch, rank);
  const Tensor x64 = x.to(DType::kFloat64);
  const double momentum = c.get_double("momentum"), eps = c.get_double("eps");
  const Tensor rm = in[c.tensor_index(kStats[0])], rv = in[c.tensor_index(kStats[1])];
  Tensor mean, var;
  if (c.get_bool("training")) {
    const Tensor shift = rm.to(DType::kFloat64).reshape(cs);
    const Tensor d = kernels::sub(x64, shift);
    const std::vector<int64_t> dims = all_but_channels(rank);
    // [2, 1, C, 1, ...]: the sums of d and d^2, reduced together.
    const Tensor sums = reduce(kernels::stack({kernels::sum(d, dims, true), kernels::sum(kernels::mul(d, d), dims, true)}));
    const Tensor m1 = kernels::div(sums.narrow(0, 0, 1).reshape(cs), Scalar(count));
    const Tensor m2 = kernels::div(sums.narrow(0, 1, 1).reshape(cs), Scalar(count));
    mean = kernels::add(shift, m1);
    var = kernels::maximum(kernels::sub(m2, kernels::mul(m1, m1)), Tensor::zeros(cs, DType::kFloat64, x.device()));
  } else {
    mean = rm.to(DType::kFloat64).reshape(cs);
    var = rv.to(DType::kFloat64).reshape(cs);
  }
  const Tensor invstd = kernels::pow(kernels::add(var, Scalar(eps)), Scalar(-0.5));
  Tensor y = kernels::mul(kernels::sub(x64, mean), invstd);
  if (const int wi = c.tensor_index("weight"); wi >= 0) y = kernels::mul(y, in[wi].to(DType::kFloat64).reshape(cs));
  if (const int bi = c.tensor_index("bias"); bi >= 0) y = kernels::add(y, in[bi].to(DType::kFloat64).reshape(cs));
  const std::vector<TensorMeta>& out = ctx.out_meta;
  const Device dev = x.device();
  if (!c.get_bool("training"))
    return {y.to(out[0].dtype), Tensor::empty({0}, out[1].dtype, dev), Tensor::empty({0}, out[2].dtype, dev),
            rm.clone(), rv.clone()};
  // The running variance takes the unbiased estimate (ATen: var * n / (n - 1); n = 1 gives inf).
  const Tensor unbiased = kernels::mul(var, Scalar(count / (count - 1)));
  const Tensor rm_out = kernels::add(kernels::mul(rm.to(DType::kFloat64), Scalar(1 - momentum)),
                                     kernels::mul(mean.reshape({ch}), Scalar(momentum)));
  const Tensor rv_out = kernels::add(kernels::mul(rv.to(DType::kFloat64), Scalar(1 - momentum)),
                                     kernels::mul(unbiased.reshape({ch}), Scalar(momentum)));
  return {y.to(out[0].dtype), mean.reshape({ch}).to(out[1].dtype), invstd.reshape({ch}).to(out[2].dtype),
          rm_out.to(out[3].dtype), rv_out.to(out[4].dtype)};
}

double channel_count(const Shape& x) { return x[1] == 0 ? 0.0 : static_cast<double>(numel(x) / x[1]); }

std::vector<Sample> batch_norm_samples() {
  auto args = [](bool w, bool b, bool training, double momentum, double eps) {
    const int stats = 1 + (w ? 1 : 0) + (b ? 1 : 0);
    return std::vector<ArgValue>{T(0), w ? T(1) : V(IValue()), b ? T(w ? 2 : 1) : V(IValue()), T(stats),
                                 T(stats + 1), V(training), V(momentum), V(eps)};
  };
  return {sample({{5, 4, 3}, {4}, {4}, {4}, {4}}, args(true, true, true, 0.1, 1e-5)),
          sample({{3, 6, 2, 4}, {6}, {6}, {6}, {6}}, args(true, true, false, 0.1, 1e-3)),
          sample({{7, 3}, {3}, {3}}, args(false, false, true, 0.3, 1e-5)),
          sample({{4, 5, 6}, {5}, {5}, {5}}, args(true, false, false, 0.0, 1e-5))};
}

// Running variances must be positive; everything else any value.
Tensor batch_norm_input(int index, const OpCall& c, uint64_t seed) {
  const TensorMeta& m = c.tensor(index);
  return index == c.tensor_index(kStats[1]) ? positive_input(m, seed) : random_tensor(m.shape, m.dtype, seed);
}

void define_batch_norm(Registry& reg) {
  OpDef& op = reg.define(
      "_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, "
      "Tensor running_var, bool training, float momentum, float eps) -> (Tensor out, Tensor save_mean, "
      "Tensor save_invstd, Tensor running_mean_out, Tensor running_var_out)",
      "norm");
  op.cost = cost(CostClass::kNormalization, Keeps::kInputsAndOutput);
  op.meta = batch_norm_meta;
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return batch_norm_outputs(in, c, ctx, [](Tensor t) { return t; }, channel_count(in[0].sizes()));
  };
  op.samples = batch_norm_samples;
  op.make_input = batch_norm_input;
}

// Training with a batch or spatial dim sharded: the per-channel sums (batch_norm_outputs) all-reduced
// over the sharding mesh dims in one collective of 2 C float64 values; every rank then holds the
// global statistics (save and running outputs replicated).
StepDef sync_stats_step() {
  StepDef step;
  step.name = "sync_stats";
  step.runs_on_device = true;  // kernels and the mesh's collectives on the input's device
  step.traffic = [](const OpCall& c, const Strategy&, const std::vector<int>& dims) {
    int64_t group = 1;
    for (int i : dims) group *= c.mesh_shape()[i];
    return StepTraffic{CommKind::kAllReduce, comm_bytes_sent(CommKind::kAllReduce, 16 * c.tensor(0).shape[1], group), 1};
  };
  step.run = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
    const Reduce reduce = [&](Tensor t) {
      t = t.contiguous().clone();
      for (int md : dims) mesh.group(md).all_reduce(t, ReduceOp::kSum, to);
      return t;
    };
    return batch_norm_outputs(in, c, ctx, reduce, channel_count(c.tensor(0).shape));
  };
  return step;
}

void add_batch_norm_step(Registry& reg) {
  reg.mutable_find("_native_batch_norm_legit_functional").steps.push_back(sync_stats_step());
}

}  // namespace

DTENSOR_FAMILY_PART("norm", kDefinitions, define_batch_norm);
DTENSOR_FAMILY_PART("norm", kSteps, add_batch_norm_step);

}  // namespace dtensor::ops
