// Op families: each family is one folder under ops/ (ops/<family>/) holding its ops' definitions
// (schema, output metadata, local kernel, samples), distributed steps, sharding rules and backward
// formulas, as Bazel targets :defs, :rules and :backward that keep DESIGN §1's layering. A family's
// files register their parts here at static initialization (DTENSOR_FAMILY_PART); the registry runs
// each part of every linked family when it is first used, part by part in the order below, so a
// family's steps or rules may refer to any family's ops. Within a part, registrations run in order
// of their file path (family folder, then file), which fixes the registration order of overloads.
// Adding a family: its folder and one name in ops/families.bzl (docs/ADDING_AN_OP.md).
#pragma once

#include <string>
#include <vector>

namespace dtensor {

class Registry;

namespace ops {

// The parts, in the order they run.
enum class FamilyPart {
  kDefinitions,  // Registry::define of the family's ops (//ops/<family>:defs)
  kSteps,        // distributed steps attached to ops (OpDef::steps; same target)
  kRules,        // single-mesh-dim sharding rules (OpDef::rules; //ops/<family>:rules)
  kBackward,     // backward formulas (OpDef::backward; //ops/<family>:backward)
};

using FamilyFn = void (*)(Registry&);

// Records `fn` as part `part` of `family`, registered from source file `file` (__FILE__). Called
// at static initialization only (by DTENSOR_FAMILY_PART); returns true. Not thread-safe.
bool add_family_part(const char* family, FamilyPart part, FamilyFn fn, const char* file);

// Runs every recorded `part` in order of file path. Throws dtensor::Error naming the family and
// the file when a registration throws, or when a file outside ops/<family>/ registered for
// `family`. Callers run each part once (define_all_ops, register_all_rules, init_autograd).
void run_family_parts(FamilyPart part, Registry& reg);

// The families that registered `part`, sorted, each once (completeness_test lists them).
std::vector<std::string> family_names(FamilyPart part);

}  // namespace ops
}  // namespace dtensor

#define DTENSOR_FAMILY_PART_CAT2(a, b) a##b
#define DTENSOR_FAMILY_PART_CAT(a, b) DTENSOR_FAMILY_PART_CAT2(a, b)
// At namespace scope in an ops/<family>/ source file: registers `fn` (void(Registry&)) as the
// family's `part` (a FamilyPart enumerator name, e.g. kRules). The file's target must be
// alwayslink, so that a binary linking it keeps the registration.
#define DTENSOR_FAMILY_PART(family, part, fn)                                                  \
  [[maybe_unused]] static const bool DTENSOR_FAMILY_PART_CAT(dtensor_family_part_, __LINE__) = \
      ::dtensor::ops::add_family_part(family, ::dtensor::ops::FamilyPart::part, fn, __FILE__)
