#include "dtensor/core/dlpack.h"

#include <complex>

#include "gtest/gtest.h"

namespace dtensor {
namespace {

TEST(DLPack, RoundTripSharesMemory) {
  Tensor t = Tensor::arange(12, DType::kFloat64).view({3, 4}).transpose(0, 1);
  DLManagedTensor* m = to_dlpack(t);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.strides[0], 1);
  Tensor back = from_dlpack(m);
  EXPECT_EQ(back.data_ptr(), t.data_ptr());
  EXPECT_TRUE(equal(back, t));
  back.fill_(7.0);
  EXPECT_EQ(t.to_vector<double>()[0], 7.0);
}

// complex64 / complex128 export as kDLComplex with 64 / 128 bits and come back the same, sharing
// memory, both parts intact.
TEST(DLPack, ComplexRoundTrip) {
  for (DType dt : {DType::kComplex64, DType::kComplex128}) {
    Tensor t = Tensor::empty({2, 3}, DType::kComplex128);
    auto* p = t.data<std::complex<double>>();
    for (int i = 0; i < 6; ++i) p[i] = {0.5 * i, -1.0 - i};
    t = t.to(dt).transpose(0, 1);
    DLManagedTensor* m = to_dlpack(t);
    EXPECT_EQ(m->dl_tensor.dtype.code, kDLComplex);
    EXPECT_EQ(m->dl_tensor.dtype.bits, dt == DType::kComplex64 ? 64 : 128);
    EXPECT_EQ(m->dl_tensor.dtype.lanes, 1);
    Tensor back = from_dlpack(m);
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.data_ptr(), t.data_ptr());
    EXPECT_TRUE(equal(back, t));
    Tensor c = back.contiguous().to(DType::kComplex128);
    EXPECT_EQ(c.data<std::complex<double>>()[1], std::complex<double>(1.5, -4.0));  // [0][1] of the transpose
  }
}

struct Foreign {
  std::vector<int32_t> data{1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  bool deleted = false;
};

TEST(DLPack, ImportsForeignBufferAndCallsDeleter) {
  Foreign f;
  DLManagedTensor m{};
  m.dl_tensor.data = f.data.data();
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype = {kDLInt, 32, 1};
  m.dl_tensor.shape = f.shape;
  m.dl_tensor.strides = nullptr;
  m.manager_ctx = &f;
  m.deleter = [](DLManagedTensor* self) { static_cast<Foreign*>(self->manager_ctx)->deleted = true; };
  {
    Tensor t = from_dlpack(&m);
    EXPECT_EQ(t.dtype(), DType::kInt32);
    EXPECT_EQ(t.data_ptr(), f.data.data());
    EXPECT_EQ(t.select(0, 1).to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6}));
    EXPECT_FALSE(f.deleted);
  }
  EXPECT_TRUE(f.deleted);
}

TEST(DLPack, RejectsUnsupportedDtype) {
  float buf[4] = {};
  int64_t shape[1] = {4};
  DLManagedTensor m{};
  m.dl_tensor.data = buf;
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = 1;
  m.dl_tensor.shape = shape;
  m.dl_tensor.dtype = {kDLComplex, 32, 1};  // complex32 (two float16): no dtensor dtype
  try {
    from_dlpack(&m);
    FAIL() << "complex32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("accepted"), std::string::npos) << e.what();
  }
  m.dl_tensor.dtype = {kDLUInt, 16, 1};  // uint16: torch's barely-supported unsigned types are not ours
  EXPECT_THROW(from_dlpack(&m), Error);
  m.dl_tensor.dtype = {kDLFloat, 32, 4};  // vector lanes
  EXPECT_THROW(from_dlpack(&m), Error);
}

// torch's byte, char and short arrive as uint8, int8 and int16, and leave with the same type code.
TEST(DLPack, NarrowIntegers) {
  int16_t buf[4] = {};
  int64_t shape[1] = {4};
  const std::pair<DLDataType, DType> cases[] = {
      {{kDLUInt, 8, 1}, DType::kUInt8}, {{kDLInt, 8, 1}, DType::kInt8}, {{kDLInt, 16, 1}, DType::kInt16}};
  for (const auto& [dl, want] : cases) {
    DLManagedTensor m{};
    m.dl_tensor.data = buf;
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = 1;
    m.dl_tensor.shape = shape;
    m.dl_tensor.dtype = dl;
    Tensor t = from_dlpack(&m);
    EXPECT_EQ(t.dtype(), want) << dtype_name(want);
    DLManagedTensor* back = to_dlpack(t);
    EXPECT_EQ(back->dl_tensor.dtype.code, dl.code) << dtype_name(want);
    EXPECT_EQ(back->dl_tensor.dtype.bits, dl.bits) << dtype_name(want);
    back->deleter(back);
  }
}

// A foreign tensor whose sizes, strides or offset overflow is refused before any view is built.
TEST(DLPack, RejectsOverflowingExtents) {
  float buf[4] = {};
  auto import = [&](std::vector<int64_t> shape, std::vector<int64_t> strides, uint64_t offset, int ndim) {
    DLManagedTensor m{};
    m.dl_tensor.data = buf;
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = ndim;
    m.dl_tensor.shape = shape.data();
    m.dl_tensor.strides = strides.empty() ? nullptr : strides.data();
    m.dl_tensor.byte_offset = offset;
    m.dl_tensor.dtype = {kDLFloat, 32, 1};
    from_dlpack(&m);
  };
  const int64_t big = int64_t{1} << 62;
  EXPECT_THROW(import({big, big}, {}, 0, 2), Error);               // element count past int64
  EXPECT_THROW(import({4, 4}, {big, 1}, 0, 2), Error);             // extent past int64
  EXPECT_THROW(import({-4}, {}, 0, 1), Error);                     // negative size
  EXPECT_THROW(import({4}, {1}, uint64_t{1} << 63, 1), Error);     // offset past the limits
  EXPECT_THROW(import({4}, {1}, 0, 100), Error);                   // rank past kMaxTensorRank
  EXPECT_NO_THROW(import({0, big}, {big, 1}, 0, 2));               // empty: no extent to check
}

}  // namespace
}  // namespace dtensor
