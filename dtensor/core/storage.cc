#include "dtensor/core/storage.h"

#include <cstdlib>

#include "dtensor/core/error.h"

namespace dtensor {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  DT_CHECK(device.is_cpu(), "Storage::allocate: device ", device.str(),
           " is not available in this build path; only cpu storage is allocated here");
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  DT_CHECK(p != nullptr, "Storage::allocate: out of memory allocating ", nbytes, " bytes");
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [p] { std::free(p); }));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device device,
                                         std::function<void()> deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(deleter)));
}

Storage::~Storage() {
  if (deleter_) deleter_();
}

}  // namespace dtensor
