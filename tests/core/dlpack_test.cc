#include "dtensor/core/dlpack.h"

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
  m.dl_tensor.dtype = {kDLComplex, 64, 1};
  try {
    from_dlpack(&m);
    FAIL() << "complex64 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("accepted"), std::string::npos) << e.what();
  }
  m.dl_tensor.dtype = {kDLUInt, 8, 1};
  EXPECT_THROW(from_dlpack(&m), Error);
  m.dl_tensor.dtype = {kDLFloat, 32, 4};  // vector lanes
  EXPECT_THROW(from_dlpack(&m), Error);
}

}  // namespace
}  // namespace dtensor
