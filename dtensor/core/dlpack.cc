#include "dtensor/core/dlpack.h"

#include "absl/strings/str_format.h"
#include "dtensor/core/limits.h"

namespace dtensor {
namespace {

DType dtype_from_dl(DLDataType t) {
  std::string what = absl::StrFormat("code=%d bits=%d lanes=%d", t.code, t.bits, t.lanes);
  DT_CHECK(t.lanes == 1, "from_dlpack: unsupported dtype (", what,
           "): vector lanes are not supported; accepted: float32, float64, bfloat16, float16, "
           "int64, int32, int16, int8, uint8, bool, complex64, complex128");
  if (t.code == kDLFloat && t.bits == 32) return DType::kFloat32;
  if (t.code == kDLFloat && t.bits == 64) return DType::kFloat64;
  if (t.code == kDLFloat && t.bits == 16) return DType::kFloat16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBFloat16;
  if (t.code == kDLInt && t.bits == 64) return DType::kInt64;
  if (t.code == kDLInt && t.bits == 32) return DType::kInt32;
  if (t.code == kDLInt && t.bits == 16) return DType::kInt16;
  if (t.code == kDLInt && t.bits == 8) return DType::kInt8;
  if (t.code == kDLUInt && t.bits == 8) return DType::kUInt8;
  if (t.code == kDLBoolCode && t.bits == 8) return DType::kBool;
  if (t.code == kDLComplex && t.bits == 64) return DType::kComplex64;
  if (t.code == kDLComplex && t.bits == 128) return DType::kComplex128;
  DT_FAIL("from_dlpack: unsupported dtype (", what,
          "); accepted: float32, float64, bfloat16, float16, int64, int32, int16, int8, uint8, bool, complex64, "
          "complex128");
}

DLDataType dtype_to_dl(DType t) {
  DLDataType d;
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(itemsize(t) * 8);
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16: d.code = kDLFloat; break;
    case DType::kBFloat16: d.code = kDLBfloat; break;
    case DType::kInt64:
    case DType::kInt32:
    case DType::kInt16:
    case DType::kInt8: d.code = kDLInt; break;
    case DType::kUInt8: d.code = kDLUInt; break;
    case DType::kBool: d.code = kDLBoolCode; break;
    case DType::kComplex64:
    case DType::kComplex128: d.code = kDLComplex; break;  // bits = 64 / 128: both parts
  }
  return d;
}

struct ExportCtx {
  Tensor tensor;
  Shape shape, strides;
  DLManagedTensor managed;
};

}  // namespace

Tensor from_dlpack(DLManagedTensor* m) {
  DT_CHECK(m != nullptr, "from_dlpack: null DLManagedTensor");
  const DLTensor& dl = m->dl_tensor;
  DType dtype = dtype_from_dl(dl.dtype);
  Device dev;
  if (dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost) {
    dev = cpu();
  } else if (dl.device.device_type == kDLCUDA) {
    dev = Device{DeviceType::kCUDA, dl.device.device_id};
  } else {
    DT_FAIL("from_dlpack: unsupported device type ", static_cast<int>(dl.device.device_type),
            "; accepted: CPU (1), CUDA (2), CUDA host (3)");
  }
  DT_CHECK(dl.ndim >= 0 && dl.ndim <= kMaxTensorRank, "from_dlpack: ndim ", dl.ndim, "; accepted: 0 to ",
           kMaxTensorRank);
  DT_CHECK(dl.ndim == 0 || dl.shape != nullptr, "from_dlpack: null shape for a ", dl.ndim, "-d tensor");
  Shape sizes(dl.shape, dl.shape + dl.ndim);
  numel(sizes);  // throws on a negative size or an element count past int64
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguous_strides(sizes);
  const int64_t item = static_cast<int64_t>(itemsize(dtype));
  DT_CHECK(dl.byte_offset % item == 0 && dl.byte_offset <= static_cast<uint64_t>(kMaxTensorBytes),
           "from_dlpack: byte_offset ", dl.byte_offset, " must be a multiple of the element size ", item,
           " and at most ", kMaxTensorBytes);
  // The storage spans from data to the furthest element the view can reach; sizes and strides come
  // from another library, so every product is checked.
  int64_t hi = 0;
  for (int i = 0; i < dl.ndim; ++i) {
    DT_CHECK(strides[i] >= 0, "from_dlpack: negative strides are not supported");
    if (sizes[i] == 0) hi = -1;
    if (hi >= 0) hi = checked_add(hi, checked_mul(sizes[i] - 1, strides[i], "from_dlpack: extent"), "from_dlpack: extent");
  }
  const int64_t offset = static_cast<int64_t>(dl.byte_offset) / item;
  const size_t nbytes = static_cast<size_t>(
      checked_mul(checked_add(offset, hi + 1, "from_dlpack: extent"), item, "from_dlpack: bytes"));
  auto storage = Storage::borrow(dl.data, nbytes, dev, [m] {
    if (m->deleter) m->deleter(m);
  });
  return Tensor::from_storage(std::move(storage), offset, std::move(sizes), std::move(strides),
                              dtype);
}

DLManagedTensor* to_dlpack(const Tensor& t) {
  DT_CHECK(t.defined(), "to_dlpack: undefined tensor");
  auto* ctx = new ExportCtx{t, t.sizes(), t.strides(), {}};
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.storage()->data();
  dl.byte_offset = static_cast<uint64_t>(t.storage_offset()) * t.element_size();
  dl.device.device_type = t.device().is_cuda() ? kDLCUDA : kDLCPU;
  dl.device.device_id = t.device().index;
  dl.ndim = static_cast<int>(t.dim());
  dl.dtype = dtype_to_dl(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportCtx*>(self->manager_ctx);
  };
  return &ctx->managed;
}

}  // namespace dtensor
