// Random redistribution cases shared by the threads and Gloo property tests: random shapes (dims
// smaller than the mesh included), random src/dst placements, and src local blocks whose Partial
// values are split adversarially among ranks (uneven, both signs).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::testing {

struct RedistCase {
  Shape mesh;
  Shape shape;
  DType dtype;
  Placements src, dst;
  uint64_t seed;
  std::string str() const;
};

// A random case on `mesh`; Partial dims of src (and of dst) share one reduce op. With `weighted`,
// shard placements are weighted (random weights 1..4 per rank) two times in three.
RedistCase random_case(std::mt19937_64& rng, const Shape& mesh, bool weighted = false);

// The global tensor of a case (deterministic from its seed).
Tensor case_global(const RedistCase& c);

// The local block the rank at `coord` holds under c.src, Partial values split adversarially so that
// reducing them over the mesh gives case_global(c).
Tensor case_local(const RedistCase& c, const std::vector<int64_t>& coord);

// Runs the case on this rank: builds the src DTensor on `mesh`, redistributes to c.dst, gathers
// full_tensor(), and compares with case_global(c): bit-exact unless src has a Partial (then float
// tolerance). Returns an empty string on success, else a description of the mismatch.
std::string run_case(const RedistCase& c, MeshPtr mesh);

}  // namespace dtensor::testing
