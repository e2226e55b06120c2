// Ops between complex tensors and their real parts, with ATen's schemas and torch's semantics:
// view_as_real ([..., 2] real pairs) and view_as_complex (its inverse) are views, real and imag
// views of one part, conj_physical and _conj the conjugate (dtensor has no conjugate bit: _conj
// materializes it), complex(real, imag) builds one. Kernels: kernels/cpu/complex.h.
#include "kernels/cpu/complex.h"

#include "absl/strings/str_cat.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

void need_complex(const OpCall& c, int t) {
  if (!is_complex(c.tensor(t).dtype))
    fail(c, absl::StrCat("input ", t, " is ", dtype_name(c.tensor(t).dtype), "; accepted: complex64, complex128"));
}

void need_real_float(const OpCall& c, int t) {
  const DType d = c.tensor(t).dtype;
  if (d != DType::kFloat32 && d != DType::kFloat64)
    fail(c, absl::StrCat("input ", t, " is ", dtype_name(d), "; accepted: float32, float64"));
}

OpDef& define(Registry& reg, const std::string& schema, CostClass cls, MetaFn meta, KernelFn kernel,
              std::vector<Sample> samples) {
  OpDef& op = reg.define(schema, "complex");
  op.complex = true;
  op.cost = cost(cls, Keeps::kNothing);
  op.meta = std::move(meta);
  op.kernel = std::move(kernel);
  op.samples = [samples] { return samples; };
  return op;
}

void define_complex_ops(Registry& reg) {
  const DType c64 = DType::kComplex64, c128 = DType::kComplex128;
  define(reg, "view_as_real(Tensor self) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           need_complex(c, 0);
           Shape s = c.tensor(0).shape;
           s.push_back(2);
           return std::vector<TensorMeta>{{s, real_of_complex(c.tensor(0).dtype)}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(guard(c, [&] { return kernels::view_as_real(in[0]); }));
         },
         {sample({{4, 3}}, {T(0)}, {}, {c64}), sample({{2, 3, 5}}, {T(0)}, {}, {c128})});
  define(reg, "view_as_complex(Tensor self) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           need_real_float(c, 0);
           Shape s = c.tensor(0).shape;
           if (s.empty() || s.back() != 2)
             fail(c, absl::StrCat("input ", shape_str(s), " must end in a dim of size 2 (the real and imaginary parts)"));
           s.pop_back();
           return std::vector<TensorMeta>{{s, complex_of(c.tensor(0).dtype)}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           // A block made elsewhere may not be viewable (odd strides): its contiguous copy is.
           return one(guard(c, [&] { return kernels::view_as_complex(in[0].contiguous()); }));
         },
         // float64: the validator also runs float32 samples as bfloat16, which it does not take.
         {sample({{4, 2}}, {T(0)}, {}, {DType::kFloat64}), sample({{3, 5, 2}}, {T(0)}, {}, {DType::kFloat64})});
  define(reg, "real(Tensor self) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           const DType d = c.tensor(0).dtype;
           return std::vector<TensorMeta>{{c.tensor(0).shape, is_complex(d) ? real_of_complex(d) : d}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(guard(c, [&] { return kernels::real_part(in[0]); }));
         },
         {sample({{4, 3}}, {T(0)}, {}, {c64}), sample({{5}}, {T(0)}, {}, {c128})});
  define(reg, "imag(Tensor self) -> Tensor", CostClass::kView,
         [](const OpCall& c) {
           need_complex(c, 0);
           return std::vector<TensorMeta>{{c.tensor(0).shape, real_of_complex(c.tensor(0).dtype)}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(guard(c, [&] { return kernels::imag_part(in[0]); }));
         },
         {sample({{4, 3}}, {T(0)}, {}, {c64}), sample({{5}}, {T(0)}, {}, {c128})});
  for (const char* schema : {"conj_physical(Tensor self) -> Tensor", "_conj(Tensor self) -> Tensor"}) {
    OpDef& op = define(reg, schema, CostClass::kElementwise,
           [](const OpCall& c) { return std::vector<TensorMeta>{c.tensor(0)}; },
           [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
             return one(guard(c, [&] { return kernels::conj_physical(in[0]); }));
           },
           {sample({{4, 3}}, {T(0)}, {}, {c64}), sample({{2, 5}}, {T(0)}, {}, {c128}), sample({{3}}, {T(0)})});
    // The bridge's blocks get conj_physical too: ATen's _conj only sets a conjugate bit, which a
    // block cannot carry through dtensor's collectives (DLPack refuses it).
    if (op.name() == "_conj") op.aten.aliases = {{"_conj", "", false, "conj_physical"}};
  }
  define(reg, "complex(Tensor real, Tensor imag) -> Tensor", CostClass::kElementwise,
         [](const OpCall& c) {
           need_real_float(c, 0);
           need_real_float(c, 1);
           if (c.tensor(0).dtype != c.tensor(1).dtype)
             fail(c, "real and imag differ in dtype; accepted: both float32 or both float64");
           Shape s = guard(c, [&] { return kernels::broadcast_shapes(c.tensor(0).shape, c.tensor(1).shape); });
           return std::vector<TensorMeta>{{s, complex_of(c.tensor(0).dtype)}};
         },
         [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
           return one(guard(c, [&] { return kernels::complex_from_parts(in[0], in[1]); }));
         },
         {sample({{4, 3}, {4, 3}}, {T(0), T(1)}, {}, {DType::kFloat64, DType::kFloat64}),
          sample({{2, 5}, {5}}, {T(0), T(1)}, {}, {DType::kFloat64, DType::kFloat64})});
}

}  // namespace

DTENSOR_FAMILY_PART("complex", kDefinitions, define_complex_ops);

}  // namespace dtensor::ops
