// Non-tensor argument values of an op call: ATen's IValue, reduced to what the schemas use.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace dtensor {

// None, bool, int, float, str, int[] or float[].
using IValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>,
                            std::vector<double>>;

inline bool is_none(const IValue& v) { return std::holds_alternative<std::monostate>(v); }
std::string ivalue_str(const IValue& v);  // Python-like spelling: None, True, 3, 0.5, 'tanh', [1, 2]

}  // namespace dtensor
