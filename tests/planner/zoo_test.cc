// Every zoo model builds and plans at its published depth: the graph builder once kept a reference
// to a vertex across add_vertex and crashed (SIGSEGV) on mixtral-8x7b from 8 layers on.
#include "gtest/gtest.h"
#include "planner/models/zoo.h"
#include "planner/search.h"

namespace dtensor::planner {
namespace {

TEST(Zoo, EveryModelBuildsAndPlansAtItsPublishedDepth) {
  for (const models::ModelEntry& m : models::zoo()) {
    for (const char* spec : {"tp=2", "dp=2,tp=4"}) {
      SCOPED_TRACE(m.name + " on " + spec);
      const MeshSpec mesh = MeshSpec::parse(spec);
      ModelGraph g = models::build_model(m.name, {}, mesh);
      EXPECT_GT(g.num_vertices(), 0);
      PlanOptions o;
      o.memory_limit_bytes = 1e15;  // the question is whether it plans, not whether it fits
      PlanResult r = plan_model(g, mesh, hardware_profile("h100-nvlink"), o);
      EXPECT_GT(r.eval.step_time_us, 0);
    }
  }
}

// More layers than published (the repeated-layer path past the default depth).
TEST(Zoo, MixtralBuildsWithManyLayers) {
  for (int layers : {8, 33, 64}) {
    models::ModelOptions o;
    o.layers = layers;
    ModelGraph g = models::build_model("mixtral-8x7b", o, MeshSpec::parse("tp=8"));
    EXPECT_GT(g.num_vertices(), layers);
  }
}

}  // namespace
}  // namespace dtensor::planner
