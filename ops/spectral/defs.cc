// The discrete Fourier transforms as ATen defines them (native_functions.yaml: _fft_r2c, _fft_c2r,
// _fft_c2c; normalization is torch's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n) and the backward
// ops of r2c and c2r, torch's fft_r2c_backward / fft_c2r_backward (FunctionsManual), which the
// derivatives.yaml of torch 2.15 (torchgen/packaged/autograd/derivatives.yaml) names for them.
#include "kernels/cpu/fft.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

bool is_real_float(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// The call's `dim` normalized against tensor 0's rank: non-empty, distinct, in range; each transformed
// size of `sizes` (the signal's) at least 1.
std::vector<int64_t> fft_dims(const OpCall& c, const Shape& sizes) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  std::vector<int64_t> dims = c.get_int_list("dim");
  if (dims.empty()) fail(c, "dim is empty; accepted: at least one dim to transform");
  for (int64_t& d : dims) {
    d = guard(c, [&] { return wrap_dim(d, rank, "dim"); });
    if (std::count(dims.begin(), dims.end(), d) > 1)
      fail(c, absl::StrCat("dim ", d, " appears more than once in dim; accepted: distinct dims"));
  }
  for (int64_t d : dims)
    if (sizes[d] < 1)
      fail(c, absl::StrCat("dim ", d, " has ", sizes[d], " points to transform; accepted: at least 1"));
  const int64_t norm = c.get_int("normalization");
  if (norm < 0 || norm > 2)
    fail(c, absl::StrCat("normalization ", norm, "; accepted: 0 (none), 1 (by 1/sqrt(n)), 2 (by 1/n)"));
  return dims;
}

void check_dtype(const OpCall& c, int t, bool complex, const char* what) {
  const DType dt = c.tensor(t).dtype;
  if (complex ? !is_complex(dt) : !is_real_float(dt))
    fail(c, absl::StrCat(what, " is ", dtype_name(dt), "; accepted: ",
                         complex ? "complex64, complex128" : "float32, float64"));
}

// c2r: the output shape (last transformed dim = last_dim_size), after checking the input has the
// last_dim_size / 2 + 1 entries there that the transform reads.
Shape c2r_shape(const OpCall& c, const char* size_arg, int64_t n) {
  Shape out = c.tensor(0).shape;
  if (n < 1) fail(c, absl::StrCat(size_arg, " ", n, "; accepted: at least 1"));
  const int64_t last = guard(c, [&] {
    return wrap_dim(c.get_int_list("dim").empty() ? 0 : c.get_int_list("dim").back(),
                    static_cast<int64_t>(out.size()), "dim");
  });
  if (out[last] < n / 2 + 1)
    fail(c, absl::StrCat("input has ", out[last], " entries along dim ", last, "; ", size_arg, " ", n,
                         " reads ", n / 2 + 1, " (", size_arg, " / 2 + 1)"));
  out[last] = n;
  return out;
}

void common(OpDef& op) {
  op.complex = true;
  op.cost = cost(CostClass::kTranscendental, Keeps::kNothing);  // n log n per point: priced as 8 FLOPs
}

void define_fft(Registry& reg) {
  {
    OpDef& op = reg.define("_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor", "spectral");
    common(op);
    op.meta = [](const OpCall& c) {
      check_dtype(c, 0, false, "self");
      const std::vector<int64_t> dims = fft_dims(c, c.tensor(0).shape);
      Shape out = c.tensor(0).shape;
      if (c.get_bool("onesided")) out[dims.back()] = out[dims.back()] / 2 + 1;
      return std::vector<TensorMeta>{{out, complex_of(c.tensor(0).dtype)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{guard(c, [&] {
        return kernels::fft_r2c(in[0], c.get_int_list("dim"), c.get_int("normalization"), c.get_bool("onesided"));
      })};
    };
    op.samples = [] {
      return std::vector<Sample>{
          // float64: the validator also runs float32 samples as bfloat16, which r2c does not take.
          sample({{4, 6}}, {T(0), L({1}), I(0), V(IValue(true))}, {}, {DType::kFloat64}),
          sample({{3, 4, 5}}, {T(0), L({2, 0}), I(1), V(IValue(false))}, {}, {DType::kFloat64}),
          sample({{2, 3, 5}}, {T(0), L({1, 2}), I(2), V(IValue(true))}, {}, {DType::kFloat64}),
      };
    };
  }
  {
    OpDef& op = reg.define("_fft_c2r(Tensor self, int[] dim, int normalization, int last_dim_size) -> Tensor", "spectral");
    common(op);
    op.meta = [](const OpCall& c) {
      check_dtype(c, 0, true, "self");
      Shape out = c2r_shape(c, "last_dim_size", c.get_int("last_dim_size"));
      fft_dims(c, out);
      return std::vector<TensorMeta>{{out, real_of_complex(c.tensor(0).dtype)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{guard(c, [&] {
        return kernels::fft_c2r(in[0], c.get_int_list("dim"), c.get_int("normalization"), c.get_int("last_dim_size"));
      })};
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{4, 4}}, {T(0), L({1}), I(0), I(6)}, {}, {DType::kComplex64}),
          sample({{3, 5, 3}}, {T(0), L({0, 2}), I(2), I(5)}, {}, {DType::kComplex128}),
          sample({{2, 4, 3}}, {T(0), L({1, 2}), I(1), I(4)}, {}, {DType::kComplex64}),
      };
    };
  }
  {
    OpDef& op = reg.define("_fft_c2c(Tensor self, int[] dim, int normalization, bool forward) -> Tensor", "spectral");
    common(op);
    op.meta = [](const OpCall& c) {
      check_dtype(c, 0, true, "self");
      fft_dims(c, c.tensor(0).shape);
      return std::vector<TensorMeta>{c.tensor(0)};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{guard(c, [&] {
        return kernels::fft_c2c(in[0], c.get_int_list("dim"), c.get_int("normalization"), c.get_bool("forward"));
      })};
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{4, 5}}, {T(0), L({1}), I(0), V(IValue(true))}, {}, {DType::kComplex64}),
          sample({{3, 4, 6}}, {T(0), L({0, 2}), I(1), V(IValue(false))}, {}, {DType::kComplex128}),
          sample({{2, 3, 4}}, {T(0), L({2, 1}), I(2), V(IValue(true))}, {}, {DType::kComplex64}),
      };
    };
  }
}

void define_fft_backward(Registry& reg) {
  {
    OpDef& op = reg.define(
        "_fft_r2c_backward(Tensor grad, int[] dim, int normalization, bool onesided, int last_dim_size) -> Tensor",
        "spectral");
    common(op);
    op.no_backward = kNoDoubleBackward;
    op.aten.not_aten = "torch computes it in FunctionsManual's fft_r2c_backward, not an ATen op";
    op.meta = [](const OpCall& c) {
      check_dtype(c, 0, true, "grad");
      Shape out = c.tensor(0).shape;
      const std::vector<int64_t> dims = fft_dims(c, out);
      const int64_t n = c.get_int("last_dim_size");
      const int64_t want = c.get_bool("onesided") ? n / 2 + 1 : n;
      if (n < 1 || out[dims.back()] != want)
        fail(c, absl::StrCat("grad has ", out[dims.back()], " entries along dim ", dims.back(), "; last_dim_size ",
                             n, " gives ", want));
      out[dims.back()] = n;
      return std::vector<TensorMeta>{{out, real_of_complex(c.tensor(0).dtype)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{guard(c, [&] {
        return kernels::fft_r2c_backward(in[0], c.get_int_list("dim"), c.get_int("normalization"),
                                         c.get_bool("onesided"), c.get_int("last_dim_size"));
      })};
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{4, 4}}, {T(0), L({1}), I(0), V(IValue(true)), I(6)}, {}, {DType::kComplex64}),
          sample({{3, 4, 5}}, {T(0), L({0, 2}), I(1), V(IValue(false)), I(5)}, {}, {DType::kComplex128}),
          sample({{2, 3, 3}}, {T(0), L({1, 2}), I(2), V(IValue(true)), I(5)}, {}, {DType::kComplex64}),
      };
    };
  }
  {
    OpDef& op = reg.define("_fft_c2r_backward(Tensor grad, int[] dim, int normalization) -> Tensor", "spectral");
    common(op);
    op.no_backward = kNoDoubleBackward;
    op.aten.not_aten = "torch computes it in FunctionsManual's fft_c2r_backward, not an ATen op";
    op.meta = [](const OpCall& c) {
      check_dtype(c, 0, false, "grad");
      Shape out = c.tensor(0).shape;
      const std::vector<int64_t> dims = fft_dims(c, out);
      out[dims.back()] = out[dims.back()] / 2 + 1;
      return std::vector<TensorMeta>{{out, complex_of(c.tensor(0).dtype)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return std::vector<Tensor>{guard(c, [&] {
        return kernels::fft_c2r_backward(in[0], c.get_int_list("dim"), c.get_int("normalization"));
      })};
    };
    op.samples = [] {
      return std::vector<Sample>{
          sample({{4, 6}}, {T(0), L({1}), I(0)}, {}, {DType::kFloat64}),
          sample({{3, 5, 5}}, {T(0), L({0, 2}), I(2)}, {}, {DType::kFloat64}),
          sample({{2, 4, 4}}, {T(0), L({1, 2}), I(1)}, {}, {DType::kFloat64}),
      };
    };
  }
}

void define_spectral_ops(Registry& reg) {
  define_fft(reg);
  define_fft_backward(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("spectral", kDefinitions, define_spectral_ops);

}  // namespace dtensor::ops
