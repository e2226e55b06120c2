// The cpu side of the device routing (kernels/device_dispatch.h): the cpu kernels in the slots of
// kernels/kernel_list.h, which the host fallback runs. Filling the table is also the check that
// each listed function is declared here with exactly the list's type: the static_cast picks that
// overload or fails to compile.
#include <utility>

#include "kernels/cpu/kernels.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

constexpr DeviceKernels make_host_kernels() {
  DeviceKernels k;
#define DT_HOST_SLOT(slot, function, type) \
  k.slot = static_cast<decltype(k.slot)>(&::dtensor::kernels::function);
  DT_KERNEL_LIST(DT_HOST_SLOT)
#undef DT_HOST_SLOT
  return k;
}

constexpr DeviceKernels kHostKernels = make_host_kernels();

}  // namespace

const DeviceKernels& host_kernels() { return kHostKernels; }

namespace device_detail {

AttentionGrads to_dev(AttentionGrads g, Device d) {
  return {to_dev(std::move(g.query), d), to_dev(std::move(g.key), d), to_dev(std::move(g.value), d)};
}

AttentionWithLse to_dev(AttentionWithLse a, Device d) {
  return {to_dev(std::move(a.out), d), to_dev(std::move(a.lse), d)};
}

}  // namespace device_detail
}  // namespace dtensor::kernels
