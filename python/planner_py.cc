// The offline planner from Python (python/dtensor/planning.py): plans a graph file in the JSON graph
// format (planner/graph_json.h) through the same entry point as `dtensor plan --graph FILE`, so
// Python and the command line cannot disagree. Errors are dtensor::Error (DTensorError in Python).
#include <sstream>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "planner/command.h"

namespace nb = nanobind;
using namespace nb::literals;

void bind_planner(nb::module_& m) {
  m.def(
      "_plan_graph_file",
      [](const std::string& path, const std::string& mesh, const std::string& hardware, double memory_limit_gb,
         bool compare, bool baseline_ops) {
        dtensor::planner::CommandOptions o;
        o.graph_file = path;
        o.mesh = mesh;
        o.hardware = hardware;
        o.memory_limit_gb = memory_limit_gb;
        o.compare = compare;
        o.format = "json";
        o.ops = baseline_ops;
        std::ostringstream out, err;
        {
          nb::gil_scoped_release release;  // a search takes up to seconds; other threads may run
          dtensor::planner::run_plan_command(o, out, err);
        }
        return out.str();
      },
      "path"_a, "mesh"_a, "hardware"_a, "memory_limit_gb"_a = 0.0, "compare"_a = true,
      "baseline_ops"_a = false,
      "The plan of the graph file as `dtensor plan --graph PATH --format json [--ops]` prints it.");
}
