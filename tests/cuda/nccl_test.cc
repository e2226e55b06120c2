// NCCL backend with real processes, one GPU per rank: every collective on several dtypes against
// values computed by hand, and a peer that stays away from a collective (a CommError naming the op
// and the group within the timeout, the communicator aborted); host tensors staged through the GPU.
//
// One binary, two roles, as tests/collectives/gloo_test.cc: the GoogleTest driver starts one rank
// of itself per GPU (at most 4) through the launcher library; a rank runs the scenario named in
// DTENSOR_NCCL_TEST_SCENARIO and exits 0 or 1. Skips without a GPU.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/nccl_backend.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/rank_worker.h"
#include "tools/launcher.h"

namespace dtensor {
namespace {

using cuda::testing::G;
using cuda::testing::H;
using std::chrono::milliseconds;

constexpr char kScenarioVar[] = "DTENSOR_NCCL_TEST_SCENARIO";
constexpr Timeout kOkTimeout = milliseconds(60000);
constexpr Timeout kFailTimeout = milliseconds(3000);

Tensor make(const std::vector<double>& v, DType dt) {
  return G(Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dt));
}

// Equal values, or within a relative `tol` (averages of 16-bit floats).
void check_values(const Tensor& t, const std::vector<double>& want, const std::string& what,
                  double tol = 0) {
  std::vector<double> got = H(t).to_vector<double>();
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i)
    ok = std::abs(got[i] - want[i]) <= tol * std::abs(want[i]);
  WCHECK(ok, what, ": got [", absl::StrJoin(got, ", "), "], expected [", absl::StrJoin(want, ", "),
         "]");
}

std::vector<int> all_ranks(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

void scenario_collectives(Backend& b) {
  const int n = b.world_size(), me = b.rank();
  auto world = b.new_group(all_ranks(n), "world", kOkTimeout);
  auto value = [](int r, int i) { return (r + 1) * (i + 1) * (i % 2 == 0 ? 1.0 : -1.0); };
  constexpr int kN = 5;
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<double> mine(kN), want(kN);
      for (int i = 0; i < kN; ++i) {
        mine[i] = value(me, i);
        double acc = value(0, i);
        for (int r = 1; r < n; ++r) {
          const double v = value(r, i);
          acc = op == ReduceOp::kMax   ? std::max(acc, v)
                : op == ReduceOp::kMin ? std::min(acc, v)
                                       : acc + v;
        }
        if (op == ReduceOp::kAvg) acc = dt == DType::kInt64 ? std::trunc(acc / n) : acc / n;
        want[i] = acc;
      }
      Tensor t = make(mine, dt);
      world->all_reduce(t, op, kOkTimeout);
      const double tol = op == ReduceOp::kAvg && is_floating(dt) ? 1e-2 : 0;
      check_values(t, want, absl::StrCat("all_reduce ", reduce_op_name(op), " ", dtype_name(dt)),
                   tol);
    }
  }
  // all_gather, even and uneven (rank r contributes r + 1 elements, rank 0 none when uneven).
  for (bool even : {true, false}) {
    std::vector<int64_t> counts(n);
    for (int r = 0; r < n; ++r) counts[r] = even ? 3 : r;
    std::vector<double> mine(counts[me]), want;
    for (int64_t i = 0; i < counts[me]; ++i) mine[i] = 10 * me + i;
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < counts[r]; ++i) want.push_back(10 * r + i);
    Tensor in = make(mine, DType::kFloat32);
    Tensor out = G(Tensor::zeros({static_cast<int64_t>(want.size())}));
    world->all_gather(in, out, counts, kOkTimeout);
    check_values(out, want, even ? "all_gather" : "all_gather uneven");
    // reduce_scatter of the gathered vector: every rank holds it, so its block times n.
    Tensor rs = G(Tensor::zeros({counts[me]}));
    world->reduce_scatter(out, rs, counts, ReduceOp::kSum, kOkTimeout);
    std::vector<double> block(mine.size());
    for (size_t i = 0; i < mine.size(); ++i) block[i] = mine[i] * n;
    check_values(rs, block, even ? "reduce_scatter" : "reduce_scatter uneven");
  }
  // all_to_all: rank r sends (r + 1) elements valued 100 * r + dst to each dst.
  {
    std::vector<int64_t> send(n), recv(n);
    std::vector<double> mine, want;
    for (int d = 0; d < n; ++d) {
      send[d] = me + 1;
      recv[d] = d + 1;
      for (int i = 0; i <= me; ++i) mine.push_back(100 * me + d);
      for (int i = 0; i <= d; ++i) want.push_back(100 * d + me);
    }
    Tensor in = make(mine, DType::kInt32);
    Tensor out = G(Tensor::zeros({static_cast<int64_t>(want.size())}, DType::kInt32));
    world->all_to_all(in, send, out, recv, kOkTimeout);
    check_values(out, want, "all_to_all");
  }
  {
    Tensor t = make({me == n - 1 ? 7.0 : 0.0, me == n - 1 ? 8.0 : 0.0}, DType::kFloat16);
    world->broadcast(t, n - 1, kOkTimeout);
    check_values(t, {7, 8}, "broadcast");
  }
  if (n > 1) {  // a ring of send / recv
    Tensor out = make({static_cast<double>(me), 1}, DType::kFloat64);
    Tensor in = G(Tensor::zeros({2}, DType::kFloat64));
    std::vector<P2POp> ops{{P2POp::kSend, out, (me + 1) % n}, {P2POp::kRecv, in, (me + n - 1) % n}};
    world->batch_isend_irecv(ops, kOkTimeout);
    check_values(in, {static_cast<double>((me + n - 1) % n), 1}, "send_recv");
  }
  world->barrier(kOkTimeout);
  WCHECK(world->stats().of(CommKind::kAllReduce) == 16, "all_reduce calls counted");
  // Host tensors are staged through the GPU (ProcessGroup::home()) and stay on the host.
  Tensor host = Tensor::from_vector<double>({static_cast<double>(me), 1}, {2});
  world->all_reduce(host, ReduceOp::kSum, kOkTimeout);
  WCHECK(host.device().is_cpu(), "a staged host tensor moved to ", host.device().str());
  check_values(host, {n * (n - 1) / 2.0, static_cast<double>(n)}, "all_reduce of a host tensor");
}

// Rank 0 skips one all_reduce: the others time out, abort and name the op and group.
void scenario_silent_peer(Backend& b) {
  const int n = b.world_size(), me = b.rank();
  auto world = b.new_group(all_ranks(n), "world", kOkTimeout);
  Tensor t = make({1, 2}, DType::kFloat32);
  world->all_reduce(t, ReduceOp::kSum, kOkTimeout);
  if (me == 0) {
    std::this_thread::sleep_for(kFailTimeout * 3);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    world->all_reduce(t, ReduceOp::kSum, kFailTimeout);
    WCHECK(false, "the all_reduce without rank 0 completed");
  } catch (const CommError& e) {
    const std::string msg = e.what();
    WCHECK(msg.find("all_reduce #1 on group 'world'") != std::string::npos, msg);
    WCHECK(msg.find("aborted") != std::string::npos, msg);
  }
  WCHECK(std::chrono::steady_clock::now() - start < kFailTimeout * 2, "not within the timeout");
  try {
    world->barrier(kOkTimeout);
    WCHECK(false, "a broken group was usable");
  } catch (const CommError& e) {
    WCHECK(std::string(e.what()).find("unusable") != std::string::npos, e.what());
  }
}

// Run with CUDA_VISIBLE_DEVICES empty: the backend must say there is no device instead of failing
// inside NCCL. Exits 0 when it threw dtensor::Error.
int no_device_main() {
  if (cuda::is_available()) {
    std::fprintf(stderr, "no_device: a CUDA device is visible although CUDA_VISIBLE_DEVICES is empty\n");
    return 1;
  }
  try {
    NcclBackend(0, 1, 0, "file:/nonexistent-dtensor-store");
  } catch (const Error& e) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no_device: not a dtensor::Error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "no_device: NcclBackend was constructed without a device\n");
  return 1;
}

int worker_main(const std::string& scenario) {
  if (scenario == "no_device") return no_device_main();
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1");
  try {
    std::map<std::string, std::function<void(Backend&)>> scenarios = {
        {"collectives", scenario_collectives}, {"silent_peer", scenario_silent_peer}};
    auto it = scenarios.find(scenario);
    WCHECK(it != scenarios.end(), "unknown scenario ", scenario);
    auto backend = init_nccl_backend_from_env(kOkTimeout);
    WCHECK(backend->rank() == rank && backend->kind() == "nccl");
    it->second(*backend);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d, scenario %s: %s\n", rank, scenario.c_str(), e.what());
    return 1;
  }
}

void expect_all_pass(const std::string& scenario, int min_ranks) {
  DT_SKIP_WITHOUT_CUDA();
  const int n = std::min(cuda::device_count(), 4);
  if (n < min_ranks) GTEST_SKIP() << "needs " << min_ranks << " CUDA devices, found " << n;
  tools::LaunchOptions o;
  o.nprocs = n;
  o.command = {rank_worker::self_exe()};
  o.env = {{kScenarioVar, scenario}};
  o.timeout = milliseconds(120000);
  o.kill_grace = milliseconds(2000);
  if (const char* t = std::getenv("TEST_TMPDIR")) o.tmp_root = t;
  tools::LaunchResult r = tools::run_ranks(o);
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.timed_out);
  for (const auto& x : r.ranks) EXPECT_TRUE(x.ok()) << "rank " << x.rank << " exit " << x.exit_code;
}

TEST(Nccl, EveryCollectiveOnEveryGpu) { expect_all_pass("collectives", 1); }
TEST(NcclFailure, SilentPeerTimesOutAndAborts) { expect_all_pass("silent_peer", 2); }

// Without a device the backend says so instead of failing inside NCCL. Checked in a child process
// that sees no device (CUDA_VISIBLE_DEVICES empty), so it runs on machines with and without a GPU.
TEST(Nccl, NeedsADevice) {
  tools::LaunchOptions o;
  o.nprocs = 1;
  o.command = {rank_worker::self_exe()};
  o.env = {{kScenarioVar, "no_device"}, {"CUDA_VISIBLE_DEVICES", ""}};
  o.timeout = milliseconds(60000);
  o.kill_grace = milliseconds(2000);
  if (const char* t = std::getenv("TEST_TMPDIR")) o.tmp_root = t;
  tools::LaunchResult r = tools::run_ranks(o);
  EXPECT_EQ(r.status, 0);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_TRUE(r.ranks[0].ok()) << "exit " << r.ranks[0].exit_code << ", signal " << r.ranks[0].signal;
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv(dtensor::kScenarioVar))
    return dtensor::worker_main(scenario);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
