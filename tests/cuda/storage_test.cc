// CUDA storage on a real device: to_device round trips, the caching allocator behind
// Tensor::empty, streams. Skips without a GPU.
#include <cuda_runtime_api.h>

#include "dtensor/core/cuda/cuda_storage.h"
#include "dtensor/core/cuda/cuda_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

using Storage_ = CudaTest;

TEST_F(Storage_, RoundTripsEveryDtypeAndLayout) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                   DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    Tensor x = rand({6, 5, 3}, 1, DType::kFloat64, -100, 100).to(dt);  // uint8: negatives wrap
    Tensor d = G(x);
    EXPECT_EQ(d.device(), gpu());
    EXPECT_TRUE(d.is_contiguous());
    EXPECT_TRUE(equal(H(d), x)) << dtype_name(dt);
    // Strided views both ways.
    EXPECT_TRUE(equal(H(G(x.transpose(0, 2))), x.transpose(0, 2).contiguous()));
    EXPECT_TRUE(equal(H(d.permute({2, 0, 1}).narrow(1, 2, 3)),
                      x.permute({2, 0, 1}).narrow(1, 2, 3).contiguous()));
    EXPECT_TRUE(
        equal(H(d.select(1, 4).expand({2, 6, 3})), x.select(1, 4).expand({2, 6, 3}).contiguous()));
  }
  Tensor empty = Tensor::zeros({0, 4});
  EXPECT_EQ(H(G(empty)).sizes(), empty.sizes());
  Tensor x = rand({3}, 2);
  EXPECT_EQ(to_device(x, cpu()).storage(), x.storage());  // already there: the same tensor
  Tensor d = G(x);
  EXPECT_EQ(to_device(d, gpu()).storage(), d.storage());
  // The core's host copies refuse device tensors instead of reading device memory.
  EXPECT_THROW(d.clone(), Error);
}

TEST_F(Storage_, MultiGpuCopies) {
  if (device_count() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, this machine has " << device_count();
  Tensor x = rand({7, 9}, 3);
  Tensor d1 = to_device(G(x), Device{DeviceType::kCUDA, 1});
  EXPECT_EQ(d1.device().index, 1);
  EXPECT_TRUE(equal(H(d1), x));
  EXPECT_TRUE(equal(H(to_device(d1.transpose(0, 1), gpu())), x.transpose(0, 1).contiguous()));
}

TEST_F(Storage_, CachingAllocatorServesTensorEmpty) {
  Stream s(0);  // outlives the tensors recorded on it
  empty_cache();
  reset_peak_memory_stats(0);
  const AllocatorStats before = memory_stats(0);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000}, DType::kFloat32, gpu());
    first = t.data_ptr();
    const AllocatorStats st = memory_stats(0);
    EXPECT_EQ(st.allocated_bytes - before.allocated_bytes, 4096);
    EXPECT_EQ(st.requested_bytes - before.requested_bytes, 4000);
  }
  Tensor again = Tensor::empty({900}, DType::kFloat32, gpu());  // same class, same stream
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_GE(memory_stats(0).cache_hits, before.cache_hits + 1);
  // Another stream gets its own blocks.
  {
    StreamGuard g(0, s.get());
    Tensor other = Tensor::empty({900}, DType::kFloat32, gpu());
    EXPECT_NE(other.data_ptr(), first);
    record_stream(again, s.get());
  }
  EXPECT_THROW(Tensor::empty({1}, DType::kFloat32, Device{DeviceType::kCUDA, device_count()}),
               Error);
  // 16 TiB: under the tensor size bound (kMaxTensorBytes, 64 TiB), so it reaches the device and
  // fails there as an out-of-memory (2^48 elements were refused by the bound before any malloc).
  const int64_t ooms = memory_stats(0).ooms;
  EXPECT_THROW(Tensor::empty({int64_t{1} << 42}, DType::kFloat32, gpu()), Error);
  EXPECT_EQ(memory_stats(0).ooms, ooms + 1);
}

}  // namespace
}  // namespace dtensor::cuda::testing
