// `dtensor demo`: distributes a tensor over a 2x2 mesh and redistributes it through a chain of
// placements, printing every rank's local shape and the collectives each step used. With the Gloo
// backend (the default) and no RANK in the environment it launches itself on 4 local processes.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/dtensor.h"
#include "tools/launcher.h"
#include "tools/subcommands.h"

namespace dtensor::tools {
namespace {

struct DemoOptions {
  std::string backend = "gloo";
  std::vector<int64_t> shape{9, 5};
  int timeout_s = 60;
};

// Every rank's local shape, gathered to all ranks over `world`.
std::vector<Shape> gather_shapes(ProcessGroup& world, const Shape& mine) {
  const int64_t nd = static_cast<int64_t>(mine.size());
  Tensor in = Tensor::from_vector(std::vector<int64_t>(mine.begin(), mine.end()), {nd});
  Tensor out = Tensor::empty({nd * world.size()}, DType::kInt64);
  world.all_gather(in, out, std::vector<int64_t>(world.size(), nd));
  auto v = out.to_vector<int64_t>();
  std::vector<Shape> shapes;
  for (int r = 0; r < world.size(); ++r) shapes.emplace_back(v.begin() + r * nd, v.begin() + (r + 1) * nd);
  return shapes;
}

int run_rank(std::shared_ptr<Backend> backend, const DemoOptions& opt, std::ostream& out) {
  Timeout timeout{std::chrono::seconds(opt.timeout_s)};
  DT_CHECK(backend->world_size() == 4, "dtensor demo: needs 4 ranks for its 2x2 mesh, got ",
           backend->world_size());
  auto mesh = DeviceMesh::create(backend, {2, 2}, {"dp", "tp"}, {}, timeout);
  auto world = backend->new_group({0, 1, 2, 3}, "demo/world", timeout);
  const bool lead = backend->rank() == 0;
  Shape shape(opt.shape.begin(), opt.shape.end());
  Tensor x = Tensor::arange(numel(shape)).view(shape);
  if (lead)
    out << "dtensor demo: " << backend->kind() << " backend, 4 ranks, mesh " << mesh->str()
        << ", tensor float32" << shape_str(shape) << "\n";

  DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
  auto report = [&](const std::string& title, const DTensor& t, const std::string& how) {
    auto shapes = gather_shapes(*world, t.local_tensor().sizes());
    if (!lead) return;
    out << "\n" << title << " " << placements_str(t.placements()) << "   " << how << "\n";
    for (int r = 0; r < 4; ++r)
      out << "  rank " << r << " (dp=" << r / 2 << ", tp=" << r % 2 << "): local "
          << shape_str(shapes[r]) << "\n";
  };
  report("distribute_tensor ->", d, "(local chunks, no communication)");
  const std::vector<Placements> chain = {
      {Replicate(), Shard(1)}, {Shard(1), Shard(0)}, {Partial(), Replicate()},
      {Shard(0), Replicate()}, {Replicate(), Replicate()}};
  for (const Placements& p : chain) {
    auto plan = plan_redistribute(d.spec(), p);
    CommStats before = mesh->stats();
    d = d.redistribute(p, timeout);
    CommStats after = mesh->stats();
    report("redistribute ->", d,
           absl::StrCat(plan->str(), "; rank 0 sent ", after.bytes_sent - before.bytes_sent, " B in ",
                        after.calls - before.calls, " collective call(s)"));
  }
  bool match = equal(d.local_tensor(), x);
  if (lead) out << "\nfull tensor equals the original on rank 0: " << (match ? "yes" : "NO") << "\n";
  return match ? 0 : 1;
}

void run_demo(const DemoOptions& opt) {
  if (opt.backend == "threads") {
    std::vector<std::ostringstream> outs(4);
    std::vector<int> codes(4, 0);
    run_threads(4, [&](std::shared_ptr<Backend> b) { codes[b->rank()] = run_rank(b, opt, outs[b->rank()]); });
    std::cout << outs[0].str();
    for (int c : codes)
      if (c != 0) throw CLI::RuntimeError(c);
    return;
  }
  if (std::getenv("RANK") == nullptr) {
    // Not started by a launcher: start 4 copies of this command through `dtensor launch`.
    LaunchOptions lo;
    lo.nprocs = 4;
    lo.command = {"/proc/self/exe", "demo", "--backend", "gloo", "--shape",
                  absl::StrJoin(opt.shape, ","), "--timeout", std::to_string(opt.timeout_s)};
    lo.timeout = std::chrono::seconds(opt.timeout_s + 30);
    int status = launch(lo);
    if (status != 0) throw CLI::RuntimeError(status);
    return;
  }
  auto backend = init_backend_from_env(Timeout{std::chrono::seconds(opt.timeout_s)});
  int code = run_rank(backend, opt, std::cout);
  std::cout.flush();
  if (code != 0) throw CLI::RuntimeError(code);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto opt = std::make_shared<DemoOptions>();
  CLI::App* sub = app.add_subcommand(
      "demo", "Distribute a tensor on a 2x2 mesh of 4 ranks and redistribute it through several "
              "placements, printing local shapes and collectives");
  sub->add_option("--backend", opt->backend, "gloo (4 processes, default) or threads")
      ->check(CLI::IsMember({"gloo", "threads"}));
  // The demo prints every element's move: 2-d, and small enough to read.
  sub->add_option("--shape", opt->shape, "global 2-d tensor shape, each size 0 to 1024 (default 9,5: uneven chunks)")
      ->delimiter(',')
      ->expected(2)
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  sub->add_option("--timeout", opt->timeout_s, "collective timeout in seconds")->check(CLI::Range(1, 86400));
  sub->callback([opt] { run_demo(*opt); });
}

}  // namespace dtensor::tools
