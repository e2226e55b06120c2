#include "ops/family.h"

#include <algorithm>
#include <string_view>
#include <tuple>

#include "dtensor/core/error.h"
#include "ops/registry.h"

namespace dtensor::ops {
namespace {

struct Entry {
  std::string family;
  FamilyPart part;
  FamilyFn fn;
  std::string file;
};

// Function-local, so registrations from any translation unit's static initializers find it built.
std::vector<Entry>& entries() {
  static std::vector<Entry>* e = new std::vector<Entry>();
  return *e;
}

}  // namespace

bool add_family_part(const char* family, FamilyPart part, FamilyFn fn, const char* file) {
  entries().push_back({family, part, fn, file});
  return true;
}

void run_family_parts(FamilyPart part, Registry& reg) {
  std::vector<const Entry*> todo;
  for (const Entry& e : entries())
    if (e.part == part) todo.push_back(&e);
  std::sort(todo.begin(), todo.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->family, a->file) < std::tie(b->family, b->file);
  });
  // The folder is the family: a registration from another folder would split a family's facts.
  // Checked for all before any runs.
  for (const Entry* e : todo) {
    const std::string folder = "ops/" + e->family + "/";
    DT_CHECK(std::string_view(e->file).find(folder) != std::string_view::npos, "op family '", e->family,
             "': registered from ", e->file, ", which is not in ", folder,
             "; accepted: a family's parts live in its own folder");
  }
  for (const Entry* e : todo) {
    const std::vector<std::string> before = part == FamilyPart::kDefinitions ? reg.names() : std::vector<std::string>{};
    try {
      e->fn(reg);
    } catch (const Error& err) {
      DT_FAIL("op family '", e->family, "' (", e->file, "): ", err.what());
    }
    if (part != FamilyPart::kDefinitions) continue;
    // OpDef::family is the folder that defined the op (reports, docs and tests name it).
    for (const std::string& name : reg.names())
      if (!std::binary_search(before.begin(), before.end(), name))
        DT_CHECK(reg.find(name).family == e->family, "op family '", e->family, "' (", e->file, "): defines ",
                 name, " with family '", reg.find(name).family, "'; accepted: the folder's name, '", e->family, "'");
  }
}

std::vector<std::string> family_names(FamilyPart part) {
  std::vector<std::string> names;
  for (const Entry& e : entries())
    if (e.part == part) names.push_back(e.family);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace dtensor::ops
