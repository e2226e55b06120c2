// kernels/cuda/cublaslt.h: cuBLASLt is opened on a matrix product's first use, not when the process
// starts (linking it costs every process about 0.1 s and 210 MB), and then the functions dtensor
// calls resolve and run. Needs the CUDA toolkit's library, not a GPU: it runs on every machine.
#include "kernels/cuda/cublaslt.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace dtensor::kernels::cuda {
namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(library) != std::string::npos) return true;
  return false;
}

TEST(CublasLt, OpensOnFirstUse) {
  // This binary links //kernels/cuda, as dtensor and every CUDA test do.
  ASSERT_FALSE(mapped("libcublasLt.so")) << "libcublasLt is loaded at start-up: a target links it "
                                            "(-lcublasLt, @cuda//:cublas) instead "
                                            "of opening it through kernels/cuda/cublaslt.h";
  const CublasLt& lt = cublaslt();
  EXPECT_TRUE(mapped(kCublasLtLibrary));
  // Calls into the library that need no device.
  EXPECT_STREQ(lt.cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(lt.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_NE(std::string(lt.cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE)), "");
  // Resolved once: the same table on every call.
  EXPECT_EQ(&cublaslt(), &lt);
}

}  // namespace
}  // namespace dtensor::kernels::cuda
