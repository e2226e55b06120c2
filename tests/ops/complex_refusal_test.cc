// complex64/complex128 reach only the ops that declare them (OpDef::complex): any other op refuses a
// complex input or output in its meta, naming the call, the dtype and what is accepted; the ops
// that declare it are the ones whose kernels were written for it.
#include <string>

#include "autograd/functional.h"
#include "gtest/gtest.h"

namespace dtensor {
namespace {

OpCall bind_call(const std::string& name, DType dt, std::vector<ArgValue> extra = {}) {
  std::vector<ArgValue> pos{TensorRef{0}};
  pos.insert(pos.end(), extra.begin(), extra.end());
  return OpCall::bind(Registry::get().find(name), pos, {}, {{{4, 6}, dt}}, {Placements{Replicate()}}, {2});
}

TEST(ComplexRefusal, AnOpThatDoesNotDeclareComplexNamesTheCallAndDtype) {
  init_autograd();
  for (const char* name : {"relu", "exp", "amax", "softmax"}) {
    std::vector<ArgValue> extra;
    if (std::string(name) == "softmax") extra = {IValue(int64_t{1})};
    OpCall c = bind_call(name, DType::kComplex64, extra);
    try {
      c.op().meta(c);
      FAIL() << name << " accepted complex64";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string(name) + "("), std::string::npos) << m;
      EXPECT_NE(m.find("complex64"), std::string::npos) << m;
      EXPECT_NE(m.find("takes no complex tensors"), std::string::npos) << m;
    }
  }
  // An output made complex by an argument is refused too: cumsum(dtype=complex64) is not declared.
  OpCall cs = OpCall::bind(Registry::get().find("cumsum"), {TensorRef{0}, IValue(int64_t{1})},
                           {{"dtype", IValue(std::string("complex64"))}}, {{{4, 6}, DType::kFloat32}},
                           {Placements{Replicate()}}, {2});
  try {
    cs.op().meta(cs);
    FAIL() << "cumsum made a complex64 output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 0 is complex64"), std::string::npos) << e.what();
  }
}

TEST(ComplexRefusal, DeclaredOpsTakeComplex) {
  init_autograd();
  for (const char* name : {"neg", "clone", "view_as_real", "conj_physical", "sum"}) {
    OpCall c = bind_call(name, DType::kComplex128);
    EXPECT_NO_THROW(c.op().meta(c)) << name;
  }
  OpCall f = bind_call("_fft_c2c", DType::kComplex64, {IValue(std::vector<int64_t>{1}), IValue(int64_t{0}), IValue(true)});
  EXPECT_EQ(f.op().meta(f)[0].dtype, DType::kComplex64);
}

}  // namespace
}  // namespace dtensor
