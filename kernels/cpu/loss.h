// Classification losses with torch semantics. Inputs are floating [C], [N, C] or [N, C, d1, ...]
// (classes on dim 1, or dim 0 for 1-d input); computed in double, the result has the input dtype.
// reduction: "mean" | "sum" | "none" ("none" gives the target's shape).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// -weight[t] * logp[.., t, ..] per element of target (int64/int32, the input's shape without the
// class dim); elements whose target is ignore_index contribute 0. "mean" divides by the summed
// weights of the non-ignored targets (NaN when all are ignored). A target outside [0, C) that is
// not ignore_index throws naming it. weight: floating [C].
Tensor nll_loss(const Tensor& logp, const Tensor& target,
                const std::optional<Tensor>& weight = std::nullopt,
                const std::string& reduction = "mean", int64_t ignore_index = -100);
// nll_loss(log_softmax(logits, class dim), ...) with label smoothing:
// (1 - ls) * nll + ls / C * (-sum_c weight[c] * logp[c]), the smoothing term reduced like nll
// (ignored targets contribute 0; "mean" divides by the same summed weights).
// A floating target of the input's shape holds class probabilities instead: loss = -sum_c
// weight[c] * q[c] * logp[c] with q = (1 - ls) * target + ls / C; "mean" divides by the number of
// elements (ignore_index unused).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const std::optional<Tensor>& weight = std::nullopt,
                     const std::string& reduction = "mean", int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

}  // namespace dtensor::kernels
