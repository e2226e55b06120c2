// Rules of the spectral ops: a transformed dim must be whole (each output point reads every input
// point along it), so only the dims not in `dim` may be sharded, alike on input and output (their
// sizes are equal). The transforms are linear over the reals, so Partial(sum) and Partial(avg) pass
// (not max/min: complex numbers have no order, and a transform is not monotone).
#include <algorithm>

#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_spectral_rules(Registry& reg) {
  for (const char* name : {"_fft_r2c", "_fft_c2r", "_fft_c2c", "_fft_r2c_backward", "_fft_c2r_backward"}) {
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      std::vector<int64_t> dims = c.get_int_list("dim");
      for (int64_t& d : dims) d = norm_dim(d, rank);
      RuleList rules;
      for (int64_t d = 0; d < rank; ++d)
        if (std::find(dims.begin(), dims.end(), d) == dims.end())
          rules.push_back(uniform(1, 1, Shard(static_cast<int32_t>(d))));
      add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg});
      return rules;
    };
  }
}

DTENSOR_FAMILY_PART("spectral", kRules, register_spectral_rules);

}  // namespace dtensor::strategies
