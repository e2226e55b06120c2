// Op wiring completeness (docs/ADDING_AN_OP.md). Every registered op, the planned family's too, must
// have sharding rules (or say why it is replicate-only), a backward (or say why it
// has none) and a planner cost class. The test prints every op's wiring, with its PyTorch and ONNX
// facts (OpDef::aten, OpDef::onnx), and fails listing each op that lacks a piece. A registration
// under a name the registry does not define fails at start-up, naming the op and the registering
// file: checked here too. The facts are checked against their sources elsewhere:
// tests/ops:layout_facts_test (layout dependence against the kernels), tests/python/test_op_facts.py
// (names, aliases and schemas against torch.ops.aten), tests/python/test_onnx_import.py (ONNX names).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/backward_util.h"
#include "gtest/gtest.h"
#include "ops/family.h"

namespace dtensor {
namespace {

class Completeness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    init_autograd();               // engine ops, rules, backward formulas
    // every family, the planned one (ops/planned/) included
  }
};

// What op `op` lacks, one line each (empty: fully wired).
std::vector<std::string> gaps(const OpDef& op) {
  std::vector<std::string> out;
  const std::string& n = op.name();
  if (!op.rules && op.replicate_only.empty())
    out.push_back(absl::StrCat(n, ": no sharding rules (ops/", op.family,
                               "/rules.cc); or set OpDef::replicate_only to the reason"));
  if (op.rules && !op.replicate_only.empty())
    out.push_back(absl::StrCat(n, ": has sharding rules but is marked replicate-only ('", op.replicate_only, "')"));
  if (!op.backward && op.no_backward.empty())
    out.push_back(absl::StrCat(n, ": no backward (ops/", op.family, "/backward.cc, bw::def); or set "
                                  "OpDef::no_backward to the reason"));
  if (op.backward && !op.no_backward.empty())
    out.push_back(absl::StrCat(n, ": has a backward but is marked not differentiable ('", op.no_backward, "')"));
  if (op.cost.cls == CostClass::kUnset)
    out.push_back(absl::StrCat(n, ": no planner cost class (set OpDef::cost where the op is defined)"));
  if (!op.aten.not_aten.empty() && !op.aten.aliases.empty())
    out.push_back(absl::StrCat(n, ": says no ATen op reaches it ('", op.aten.not_aten, "') but lists ATen aliases"));
  for (const AtenAlias& a : op.aten.aliases)
    if (!a.adapt.empty() && a.adapt.rfind("keep:", 0) == 0 && a.adapt.size() == 5)
      out.push_back(absl::StrCat(n, ": alias ", a.name, " adapts 'keep:' without a count"));
  if (op.cost.cls == CostClass::kContraction && !op.cost.flops)
    out.push_back(absl::StrCat(n, ": a contraction without OpCost::flops"));
  return out;
}

// The op's PyTorch and ONNX facts, for the listing.
std::string facts(const OpDef& op) {
  std::string s;
  if (op.aten.layout_dependent) s += "  layout-dependent";
  for (const AtenAlias& a : op.aten.aliases) absl::StrAppend(&s, "  aten alias: ", a.name);
  if (!op.aten.not_aten.empty()) absl::StrAppend(&s, "  not ATen: ", op.aten.not_aten);
  if (!op.onnx.empty()) absl::StrAppend(&s, "  onnx: ", absl::StrJoin(op.onnx, ","));
  return s;
}

TEST_F(Completeness, EveryOpHasRulesBackwardAndCostClass) {
  const Registry& reg = Registry::get();
  std::vector<std::string> failing;
  for (const std::string& name : reg.names()) {
    const OpDef& op = reg.find(name);
    std::cout << absl::StrCat("  ", name, " [", op.family, "]  rules: ",
                              op.rules ? "yes" : "replicate-only (" + op.replicate_only + ")",
                              "  backward: ", op.backward ? "yes" : "none (" + op.no_backward + ")",
                              "  cost: ", cost_class_name(op.cost.cls), facts(op))
              << "\n";
    for (std::string& g : gaps(op)) failing.push_back(std::move(g));
  }
  std::cout << reg.names().size() << " registered ops, " << failing.size() << " gaps\n";
  EXPECT_TRUE(failing.empty()) << "ops missing wiring (docs/ADDING_AN_OP.md):\n  "
                               << absl::StrJoin(failing, "\n  ");
}

// Every op belongs to a family folder that registered its definitions, and every family registered
// rules (ops/family.h); a family's OpDef::family is checked at start-up (run_family_parts).
TEST_F(Completeness, EveryOpBelongsToAFamilyWithEveryPart) {
  const std::vector<std::string> defined = ops::family_names(ops::FamilyPart::kDefinitions);
  std::cout << "families: " << absl::StrJoin(defined, ", ") << "\n";
  EXPECT_GE(defined.size(), 14u);
  // Backward formulas are per op (an op says why it has none: EveryOpHasRulesBackwardAndCostClass);
  // the planned family has none at all.
  EXPECT_EQ(ops::family_names(ops::FamilyPart::kRules), defined) << "a family without rules";
  const Registry& reg = Registry::get();
  for (const std::string& name : reg.names()) {
    const std::string& family = reg.find(name).family;
    EXPECT_TRUE(std::binary_search(defined.begin(), defined.end(), family)) << name << " [" << family << "]";
  }
}

// A family's files register from its own folder, and the ops a family defines carry its name.
TEST_F(Completeness, FamilyPartsStayInTheirFolder) {
  Registry& reg = Registry::get();
  ops::add_family_part("pointwise", ops::FamilyPart::kBackward, [](Registry&) {}, "ops/matrix/backward.cc");
  try {
    ops::run_family_parts(ops::FamilyPart::kBackward, reg);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ops/matrix/backward.cc, which is not in ops/pointwise/"),
              std::string::npos) << e.what();
  }
}

// Registering for an op the registry does not define is an error naming the op and the file.
TEST_F(Completeness, RegistrationUnderAnUnknownNameFails) {
  auto expect_error = [](const std::function<void()>& f) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'no_such_op'"), std::string::npos) << m;
      EXPECT_NE(m.find("completeness_test.cc"), std::string::npos) << m;
    }
  };
  expect_error([] { bw::def("no_such_op", [](const BackwardCtx& c) { return bw::Grads(c.inputs.size()); }); });
  expect_error([] { Registry::get().mutable_find("no_such_op").rules = nullptr; });
}

// A second backward for one op is an error too (the later one would silently win).
TEST_F(Completeness, SecondBackwardFails) {
  EXPECT_THROW(bw::def("add", [](const BackwardCtx& c) { return bw::Grads(c.inputs.size()); }), Error);
}

}  // namespace
}  // namespace dtensor
