#include "dtensor/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>

#include "absl/strings/str_format.h"
#include "dtensor/core/limits.h"

namespace dtensor {

int64_t wrap_dim(int64_t dim, int64_t rank, const char* what) {
  int64_t r = std::max<int64_t>(rank, 1);
  DT_CHECK(dim >= -r && dim < r, what, ": dim ", dim, " out of range for a ", rank,
           "-d tensor (accepted: ", -r, " to ", r - 1, ")");
  return dim < 0 ? dim + r : dim;
}

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes) DT_CHECK(s >= 0, "Tensor::empty: negative size in ", shape_str(sizes));
  Tensor t;
  const int64_t nbytes = checked_mul(dtensor::numel(sizes), static_cast<int64_t>(itemsize(dtype)),
                                     "Tensor::empty: bytes of the tensor");
  t.storage_ = Storage::allocate(static_cast<size_t>(nbytes), device);
  t.sizes_ = sizes;
  t.strides_ = contiguous_strides(sizes);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& sizes, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  if (!device.is_cpu()) return t.fill_(0);
  std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& sizes, double value, DType dtype, Device device) {
  return empty(sizes, dtype, device).fill_(value);
}

namespace {

struct DeviceCopyTable {
  std::mutex mu;
  DeviceCopyFn by_type[2];
};

DeviceCopyTable& device_copies() {
  static DeviceCopyTable* t = new DeviceCopyTable;  // never destroyed: used at exit by storages
  return *t;
}

DeviceCopyFn device_copy_of(DeviceType type) {
  DeviceCopyTable& t = device_copies();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.by_type[static_cast<int>(type)];
}

}  // namespace

DeviceCopyFn register_device_copy(DeviceType type, DeviceCopyFn fn) {
  DT_CHECK(type != DeviceType::kCPU,
           "register_device_copy: cpu copies are built in; accepted: non-cpu device types");
  DeviceCopyTable& t = device_copies();
  std::lock_guard<std::mutex> lock(t.mu);
  std::swap(t.by_type[static_cast<int>(type)], fn);
  return fn;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>(i);
  return t.to(dtype);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes,
                            Shape strides, DType dtype) {
  DT_CHECK(storage != nullptr, "Tensor::from_storage: null storage");
  DT_CHECK(sizes.size() == strides.size(), "Tensor::from_storage: sizes ", shape_str(sizes),
           " and strides ", shape_str(strides), " differ in rank");
  int64_t lo = offset, hi = offset;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    DT_CHECK(sizes[i] >= 0, "Tensor::from_storage: negative size in ", shape_str(sizes));
    if (sizes[i] == 0) empty = true;
    if (empty) continue;
    // Sizes and strides may come from outside (DLPack): overflow is an error, not a wrapped extent.
    const int64_t ext = checked_mul(sizes[i] - 1, strides[i], "Tensor::from_storage: extent of a view");
    int64_t& end = ext < 0 ? lo : hi;
    end = checked_add(end, ext, "Tensor::from_storage: extent of a view");
  }
  if (!empty) {
    const int64_t end_bytes = checked_mul(checked_add(hi, 1, "Tensor::from_storage: extent of a view"),
                                          static_cast<int64_t>(itemsize(dtype)), "Tensor::from_storage: bytes of a view");
    DT_CHECK(lo >= 0 && static_cast<size_t>(end_bytes) <= storage->nbytes(),
             "Tensor::from_storage: view of shape ", shape_str(sizes), " strides ",
             shape_str(strides), " offset ", offset, " exceeds storage of ", storage->nbytes(),
             " bytes");
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  t.sizes_ = std::move(sizes);
  t.strides_ = std::move(strides);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::size(int64_t d) const { return sizes_[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = static_cast<int>(sizes_.size()) - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (sizes_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  DT_CHECK(defined(), "Tensor::data_ptr on an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize(dtype_));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  DT_CHECK(start >= 0 && length >= 0 && start + length <= sizes_[d], "narrow: start ", start,
           " length ", length, " out of range for dim ", d, " of size ", sizes_[d], " in ",
           shape_str(sizes_));
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.sizes_[d] = length;
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  DT_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = sizes_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.sizes_[d] = (end - start + step - 1) / step;
  t.strides_[d] *= step;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  int64_t n = sizes_[d];
  DT_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d,
           " of size ", n);
  if (index < 0) index += n;
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.sizes_.erase(t.sizes_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Tensor t = *this;
  std::swap(t.sizes_[d0], t.sizes_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  DT_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", dims.size(),
           " dims given for a ", dim(), "-d tensor");
  Tensor t = *this;
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    DT_CHECK(!seen[d], "permute: dim ", d, " repeated");
    seen[d] = true;
    t.sizes_[i] = sizes_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::movedim(int64_t src, int64_t dst) const {
  src = wrap_dim(src, dim(), "movedim");
  dst = wrap_dim(dst, dim(), "movedim");
  std::vector<int64_t> order;
  for (int64_t i = 0; i < dim(); ++i)
    if (i != src) order.push_back(i);
  order.insert(order.begin() + dst, src);
  return permute(order);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Tensor t = *this;
  int64_t st = d < dim() ? sizes_[d] * strides_[d] : 1;
  t.sizes_.insert(t.sizes_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  return t;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes_[d] != 1) return *this;
  Tensor t = *this;
  t.sizes_.erase(t.sizes_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

namespace {

Shape infer_shape(const Shape& req, int64_t n, const char* op, const Shape& from) {
  Shape out = req;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DT_CHECK(infer < 0, op, ": only one dim can be -1 in ", shape_str(req));
      infer = static_cast<int64_t>(i);
    } else {
      DT_CHECK(out[i] >= 0, op, ": invalid size in ", shape_str(req));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    DT_CHECK(known > 0 && n % known == 0, op, ": shape ", shape_str(req), " is invalid for ",
             shape_str(from), " (", n, " elements)");
    out[infer] = n / known;
  }
  DT_CHECK(dtensor::numel(out) == n, op, ": shape ", shape_str(req), " is invalid for ",
           shape_str(from), " (", n, " elements)");
  return out;
}

// Strides that let (old sizes, old strides) be viewed as `shape`, if any: groups of old dims that are
// contiguous among themselves may be split or merged freely.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides,
                                  const Shape& shape) {
  if (old_sizes.empty()) return Shape(shape.size(), 1);
  if (dtensor::numel(old_sizes) == 0) return contiguous_strides(shape);
  Shape out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t base = old_strides.back();
  int64_t tensor_n = 1, view_n = 1;
  for (int64_t td = static_cast<int64_t>(old_sizes.size()) - 1; td >= 0; --td) {
    tensor_n *= old_sizes[td];
    bool chunk_ends = td == 0 || (old_sizes[td - 1] != 1 &&
                                  old_strides[td - 1] != tensor_n * base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_n < tensor_n || shape[view_d] == 1)) {
      out[view_d] = view_n * base;
      view_n *= shape[view_d];
      --view_d;
    }
    if (view_n != tensor_n) return std::nullopt;
    if (td > 0) {
      base = old_strides[td - 1];
      tensor_n = 1;
      view_n = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor Tensor::view(const Shape& req) const {
  Shape shape = infer_shape(req, numel(), "view", sizes_);
  auto st = view_strides(sizes_, strides_, shape);
  DT_CHECK(st.has_value(), "view: shape ", shape_str(shape), " is incompatible with the strides ",
           shape_str(strides_), " of a ", shape_str(sizes_), " tensor; use reshape (copies)");
  Tensor t = *this;
  t.sizes_ = shape;
  t.strides_ = *st;
  return t;
}

Tensor Tensor::reshape(const Shape& req) const {
  Shape shape = infer_shape(req, numel(), "reshape", sizes_);
  if (auto st = view_strides(sizes_, strides_, shape)) {
    Tensor t = *this;
    t.sizes_ = shape;
    t.strides_ = *st;
    return t;
  }
  return contiguous().view(shape);
}

Tensor Tensor::expand(const Shape& req) const {
  DT_CHECK(req.size() >= sizes_.size(), "expand: target ", shape_str(req), " has fewer dims than ",
           shape_str(sizes_));
  size_t lead = req.size() - sizes_.size();
  Tensor t = *this;
  t.sizes_ = Shape(req.size());
  t.strides_ = Shape(req.size());
  for (size_t i = 0; i < req.size(); ++i) {
    if (i < lead) {
      DT_CHECK(req[i] >= 0, "expand: new leading dim ", i, " cannot be -1 in ", shape_str(req));
      t.sizes_[i] = req[i];
      t.strides_[i] = 0;
      continue;
    }
    int64_t own = sizes_[i - lead];
    int64_t want = req[i] == -1 ? own : req[i];
    if (own == want) {
      t.sizes_[i] = own;
      t.strides_[i] = strides_[i - lead];
    } else {
      DT_CHECK(own == 1, "expand: cannot expand ", shape_str(sizes_), " to ", shape_str(req),
               " (dim ", i, " has size ", own, ", only size-1 dims expand)");
      t.sizes_[i] = want;
      t.strides_[i] = 0;
    }
  }
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(sizes_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(sizes_, dtype, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(sizes_, dtype_, device);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  DT_CHECK(sizes_ == src.sizes_, "copy_: destination ", shape_str(sizes_), " and source ",
           shape_str(src.sizes_), " differ in shape");
  if (!device().is_cpu() || !src.device().is_cpu()) {
    const Device via = device().is_cpu() ? src.device() : device();
    DeviceCopyFn fn = device_copy_of(via.type);
    DT_CHECK(fn, "copy_: ", src.str(), " -> ", str(), " needs the copy function of ", via.str(),
             ", which is not registered; link //kernels/cuda (accepted without it: cpu tensors)");
    if (numel() > 0) fn(*this, src);
    return *this;
  }
  copy_strided(data_ptr(), strides_, dtype_, src.data_ptr(), src.strides_, src.dtype_, sizes_);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  Tensor one = empty({}, DType::kFloat64);
  *one.data<double>() = value;
  if (!device().is_cpu()) {
    // One element crosses to the device; the device copy broadcasts it (stride 0).
    Tensor dev = empty({}, dtype_, device());
    dev.copy_(one);
    return copy_(dev.expand(sizes_));
  }
  Shape zero_strides(sizes_.size(), 0);
  copy_strided(data_ptr(), strides_, dtype_, one.data_ptr(), zero_strides, DType::kFloat64, sizes_);
  return *this;
}

double Tensor::item() const {
  DT_CHECK(numel() == 1, "item: tensor of shape ", shape_str(sizes_), " has ", numel(),
           " elements, not 1");
  if (!device().is_cpu()) return to(dtensor::cpu()).item();
  double v = 0;
  copy_strided(&v, Shape(sizes_.size(), 0), DType::kFloat64, data_ptr(), strides_, dtype_,
               sizes_);
  return v;
}

std::string Tensor::str() const {
  return absl::StrFormat("Tensor[%s, %s, %s]", dtype_name(dtype_), shape_str(sizes_),
                         device().str());
}

Tensor cat(const std::vector<Tensor>& ts, int64_t d) {
  DT_CHECK(!ts.empty(), "cat: no tensors");
  const Tensor& first = ts[0];
  d = wrap_dim(d, first.dim(), "cat");
  Shape out_shape = first.sizes();
  int64_t total = 0;
  for (const Tensor& t : ts) {
    DT_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype(), "cat: tensor ", t.str(),
             " does not match ", first.str());
    for (int64_t i = 0; i < t.dim(); ++i)
      DT_CHECK(i == d || t.size(i) == first.size(i), "cat: sizes ", shape_str(t.sizes()), " and ",
               shape_str(first.sizes()), " differ outside dim ", d);
    total += t.size(d);
  }
  out_shape[d] = total;
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& t : ts) {
    out.narrow(d, at, t.size(d)).copy_(t);
    at += t.size(d);
  }
  return out;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.to(cpu()).contiguous(), cb = b.to(cpu()).contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

namespace {

// The values of t as doubles; a complex tensor (when either compared one is) as its real and
// imaginary parts interleaved, so that comparisons see both.
std::vector<double> parts(const Tensor& t, bool complex) {
  if (!complex) return t.to_vector<double>();
  Tensor c = t.to(cpu()).to(DType::kComplex128).contiguous();
  const double* p = reinterpret_cast<const double*>(c.data_ptr());
  return std::vector<double>(p, p + 2 * c.numel());
}

}  // namespace

double max_abs_diff(const Tensor& a, const Tensor& b) {
  DT_CHECK(a.sizes() == b.sizes(), "max_abs_diff: shapes ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()), " differ");
  const bool complex = is_complex(a.dtype()) || is_complex(b.dtype());
  auto va = parts(a, complex), vb = parts(b, complex);
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    bool na = std::isnan(va[i]), nb = std::isnan(vb[i]);
    if (na || nb) {
      if (na != nb) return std::nan("");
      continue;
    }
    if (va[i] == vb[i]) continue;  // equal infinities
    m = std::max(m, std::abs(va[i] - vb[i]));
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.sizes() != b.sizes()) return false;
  const bool complex = is_complex(a.dtype()) || is_complex(b.dtype());
  auto va = parts(a, complex), vb = parts(b, complex);
  for (size_t i = 0; i < va.size(); ++i) {
    bool na = std::isnan(va[i]), nb = std::isnan(vb[i]);
    if (na || nb) {
      if (na != nb) return false;
      continue;
    }
    if (va[i] == vb[i]) continue;
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  }
  return true;
}

}  // namespace dtensor
