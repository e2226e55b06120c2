// Tensors whose values are a pure function of a generation number: the checkpoint tests save a
// generation from a tp mesh of thread ranks and compare what loads, bit-exact, against a generation.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dtensor/dtensor.h"

namespace dtensor::nn::testing {

// name -> full value of generation `gen`: float32, float64 and int64 tensors, sharded evenly and
// unevenly and replicated; raw random bytes, so that any changed byte shows.
std::map<std::string, Tensor> fixture_values(int64_t gen);

// Saves generation `gen` (as step `gen`) to `dir` from `world` thread ranks on a mesh tp=world.
void save_fixture(const std::string& dir, int64_t gen, int world);

// Loads `dir` onto one rank; returns the full values and sets *step.
std::map<std::string, Tensor> load_fixture(const std::string& dir, int64_t* step);

// Same shape, dtype and bytes?
bool same_bits(const Tensor& a, const Tensor& b);
bool same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b);

}  // namespace dtensor::nn::testing
