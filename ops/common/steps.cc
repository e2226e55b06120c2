#include "ops/common/steps.h"

namespace dtensor::ops {

uint8_t step_id(const OpDef& op, const std::string& name) {
  for (size_t i = 0; i < op.steps.size(); ++i)
    if (op.steps[i].name == name) return static_cast<uint8_t>(i + 1);
  DT_FAIL(op.name(), ": no distributed step '", name, "'");
}

}  // namespace dtensor::ops
