// Elastic membership (dtensor/collectives/membership.h) with real Gloo processes, and the launcher's
// restarts. One binary, two roles, as gloo_test: without DTENSOR_MEMBERSHIP_TEST_SCENARIO it is the
// GoogleTest driver, which starts 4 ranks of itself through the launcher; with it, a worker that runs
// the scenario, checks what it agreed on against the expected members and a sum over the new
// generation's group (the members' ranks, computed by hand), and exits 0 (pass) or 1 (fail, the
// reason on stderr).
#include <signal.h>
#include <unistd.h>

#include <chrono>
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
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/collectives/membership.h"
#include "gtest/gtest.h"
#include "tests/testing/rank_worker.h"
#include "tools/launcher.h"

namespace dtensor {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kScenarioVar[] = "DTENSOR_MEMBERSHIP_TEST_SCENARIO";
constexpr int kWorld = 4;
constexpr Timeout kOkTimeout = milliseconds(30000);
constexpr Timeout kFailTimeout = milliseconds(2000);  // a collective with a dead or stopped peer

MembershipOptions options() {
  MembershipOptions o;
  o.settle = milliseconds(3000);  // > the skew of the survivors' detection (kFailTimeout)
  o.timeout = milliseconds(10000);
  return o;
}

struct Run {
  std::shared_ptr<Backend> backend;
  Membership membership;
  Generation gen;
  std::shared_ptr<ProcessGroup> world;
};

Run start() {
  ProcessEnv env = read_process_env();
  auto backend = init_backend_from_env(kOkTimeout);
  Membership m(open_store(env.store), env.rank, env.world_size);
  Generation g = m.first();
  auto world = backend->new_group(g.members, g.group_prefix() + "world", kOkTimeout);
  return Run{backend, std::move(m), g, world};
}

// One step: an all_reduce of this rank's number over the generation's group; true when it gave the
// members' sum, false on a CommError (a member is gone).
bool step(Run& r) {
  Tensor t = Tensor::full({16}, static_cast<double>(r.backend->rank()));
  try {
    r.world->all_reduce(t, ReduceOp::kSum, kFailTimeout);
  } catch (const CommError&) {
    return false;
  }
  double want = 0;
  for (int m : r.gen.members) want += m;
  WCHECK(t.to_vector<double>()[0] == want, "sum ", t.to_vector<double>()[0], " over ",
         absl::StrJoin(r.gen.members, ","), " in generation ", r.gen.number);
  return true;
}

void move_to(Run& r, Generation g) {
  r.gen = std::move(g);
  r.world = r.backend->new_group(r.gen.members, r.gen.group_prefix() + "world", kOkTimeout);
}

// Survivors of `dead` (which die after one good step) agree on the rest and step on it.
void survive(Run& r, const std::vector<int>& dead) {
  WCHECK(step(r), "the first step failed");
  r.world->barrier(kOkTimeout);
  const int me = r.backend->rank();
  if (std::find(dead.begin(), dead.end(), me) != dead.end()) raise(SIGKILL);
  WCHECK(!step(r), "a step with ranks ", absl::StrJoin(dead, ","), " dead did not fail");
  const auto t0 = Clock::now();
  move_to(r, r.membership.next(r.gen, options()));
  std::vector<int> want;
  for (int i = 0; i < kWorld; ++i)
    if (std::find(dead.begin(), dead.end(), i) == dead.end()) want.push_back(i);
  WCHECK(r.gen.members == want, "members ", absl::StrJoin(r.gen.members, ","), ", expected ",
         absl::StrJoin(want, ","));
  WCHECK(r.gen.number == 1, "generation ", r.gen.number);
  WCHECK(step(r), "the step after recovery failed");
  std::fprintf(stderr, "rank %d: generation 1 agreed in %lld ms\n", me,
               static_cast<long long>(std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count()));
}

void scenario_one_lost(Run& r) { survive(r, {2}); }

// A killed rank's process is gone: the survivors do not wait `settle` for it. With a settle far
// beyond the launcher's limit for this scenario (40 s), waiting for it would end the test there.
void scenario_dead_not_waited_for(Run& r) {
  WCHECK(step(r), "the first step failed");
  r.world->barrier(kOkTimeout);
  if (r.backend->rank() == 1) raise(SIGKILL);
  WCHECK(!step(r), "a step with rank 1 dead did not fail");
  MembershipOptions o = options();
  o.settle = milliseconds(600000);
  move_to(r, r.membership.next(r.gen, o));
  WCHECK(r.gen.members == std::vector<int>({0, 2, 3}), "members ", absl::StrJoin(r.gen.members, ","));
  WCHECK(step(r), "the step after recovery failed");
}
void scenario_two_lost(Run& r) { survive(r, {1, 2}); }

// Rank 3 stops (SIGSTOP) instead of dying; a child continues it 9 s later, after the others have
// agreed without it: it is evicted (told so), never taken back into generation 1.
void scenario_stopped(Run& r) {
  WCHECK(step(r), "the first step failed");
  r.world->barrier(kOkTimeout);
  if (r.backend->rank() == 3) {
    const pid_t me = getpid();
    if (fork() == 0) {
      sleep(9);
      kill(me, SIGCONT);
      _exit(0);
    }
    raise(SIGSTOP);
    WCHECK(!step(r), "a step after being stopped succeeded");
    try {
      r.membership.next(r.gen, options());
    } catch (const CommError& e) {
      WCHECK(std::string(e.what()).find("left out of generation 1") != std::string::npos, e.what());
      return;
    }
    WCHECK(false, "a stopped rank was taken back into generation 1");
  }
  WCHECK(!step(r), "a step with rank 3 stopped did not fail");
  move_to(r, r.membership.next(r.gen, options()));
  WCHECK(r.gen.members == std::vector<int>({0, 1, 2}), "members ", absl::StrJoin(r.gen.members, ","));
  WCHECK(step(r), "the step after recovery failed");
  // Stay until rank 3 has been turned away (it reads this generation's keys).
  std::this_thread::sleep_for(milliseconds(12000));
}

// Rank 2 dies; the launcher restarts it (--max-restarts 1) and it rejoins: generation 1 without it,
// generation 2 with it again, where all four step together.
void scenario_rejoin(Run& r) {
  const int me = r.backend->rank();
  WCHECK(step(r), "the first step failed");
  r.world->barrier(kOkTimeout);
  if (me == 2) raise(SIGKILL);
  WCHECK(!step(r), "a step with rank 2 dead did not fail");
  move_to(r, r.membership.next(r.gen, options()));
  WCHECK(r.gen.members == std::vector<int>({0, 1, 3}), "members ", absl::StrJoin(r.gen.members, ","));
  // Step until a joiner waits; the members agree on it by an all_reduce of what each saw.
  for (int i = 0;; ++i) {
    WCHECK(i < 300, "no joiner within 300 steps");
    WCHECK(step(r), "a step of generation 1 failed");
    Tensor seen = Tensor::full({1}, r.membership.joiners_waiting(r.gen) ? 1.0 : 0.0);
    r.world->all_reduce(seen, ReduceOp::kMax, kOkTimeout);
    if (seen.to_vector<double>()[0] > 0) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  move_to(r, r.membership.next(r.gen, options()));
  WCHECK(r.gen.members == std::vector<int>({0, 1, 2, 3}) && r.gen.number == 2, "generation ", r.gen.number,
         " members ", absl::StrJoin(r.gen.members, ","));
  WCHECK(step(r), "the step of generation 2 failed");
}

// The restarted rank 2 of scenario_rejoin. It waits until the survivors have agreed without it (a
// process restarted at once may instead be taken into the survivors' own generation 1, which the
// protocol allows; this test covers the join at a step boundary).
void rejoin_restarted(Run& r) {
  for (int i = 0; r.membership.newest_decided() < 1; ++i) {
    WCHECK(i < 300, "the survivors never agreed on generation 1");
    std::this_thread::sleep_for(milliseconds(100));
  }
  move_to(r, r.membership.rejoin(options()));
  WCHECK(r.gen.members == std::vector<int>({0, 1, 2, 3}) && r.gen.number == 2, "rejoined generation ", r.gen.number,
         " members ", absl::StrJoin(r.gen.members, ","));
  WCHECK(step(r), "the step of generation 2 failed");
}

int worker_main(const std::string& scenario) {
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1");
  const char* restart = std::getenv("DTENSOR_RESTART_COUNT");
  try {
    std::map<std::string, std::function<void(Run&)>> scenarios = {
        {"one_lost", scenario_one_lost},
        {"dead_not_waited_for", scenario_dead_not_waited_for},
        {"two_lost", scenario_two_lost},
        {"stopped", scenario_stopped},
        {"rejoin", scenario_rejoin},
    };
    auto it = scenarios.find(scenario);
    WCHECK(it != scenarios.end(), "unknown scenario ", scenario);
    if (restart != nullptr && std::string(restart) != "0") {
      ProcessEnv env = read_process_env();
      auto backend = init_backend_from_env(kOkTimeout);
      Run r{backend, Membership(open_store(env.store), env.rank, env.world_size), Generation{}, nullptr};
      rejoin_restarted(r);
      return 0;
    }
    Run r = start();
    it->second(r);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d, scenario %s: %s\n", rank, scenario.c_str(), e.what());
    return 1;
  }
}

tools::LaunchResult launch(const std::string& scenario, int max_restarts = 0,
                           milliseconds limit = milliseconds(90000)) {
  tools::LaunchOptions o;
  o.nprocs = kWorld;
  o.command = {rank_worker::self_exe()};
  o.env = {{kScenarioVar, scenario}};
  o.timeout = limit;  // never hang the test
  o.failure_grace = milliseconds(60000);  // a killed rank must not end the survivors
  o.kill_grace = milliseconds(2000);
  o.max_restarts = max_restarts;
  if (const char* t = std::getenv("TEST_TMPDIR")) o.tmp_root = t;
  return tools::run_ranks(o);
}

std::string exits(const tools::LaunchResult& r) {
  std::vector<std::string> parts;
  for (const auto& x : r.ranks)
    parts.push_back(absl::StrCat("rank ", x.rank, ": code ", x.exit_code, " signal ", x.signal, " restarts ", x.restarts));
  return absl::StrJoin(parts, "; ");
}

void expect_survivors_pass(const tools::LaunchResult& r, const std::vector<int>& killed) {
  EXPECT_FALSE(r.timed_out) << exits(r);
  for (const auto& x : r.ranks) {
    if (std::find(killed.begin(), killed.end(), x.rank) != killed.end()) {
      EXPECT_EQ(x.signal, SIGKILL) << exits(r);
    } else {
      EXPECT_TRUE(x.ok()) << exits(r);
    }
  }
}

TEST(Membership, SurvivorsOfOneLostRankAgreeAndStep) { expect_survivors_pass(launch("one_lost"), {2}); }
TEST(Membership, AKilledRankIsNotWaitedFor) {
  expect_survivors_pass(launch("dead_not_waited_for", 0, milliseconds(40000)), {1});
}
TEST(Membership, SurvivorsOfTwoLostRanksAgreeAndStep) { expect_survivors_pass(launch("two_lost"), {1, 2}); }

TEST(Membership, AStoppedRankIsEvictedAndNotTakenBack) {
  tools::LaunchResult r = launch("stopped");
  EXPECT_EQ(r.status, 0) << exits(r);
  for (const auto& x : r.ranks) EXPECT_TRUE(x.ok()) << exits(r);
}

TEST(Membership, ARestartedRankRejoins) {
  tools::LaunchResult r = launch("rejoin", 1);
  EXPECT_EQ(r.status, 0) << exits(r);
  for (const auto& x : r.ranks) EXPECT_TRUE(x.ok()) << exits(r);
  EXPECT_EQ(r.ranks[2].restarts, 1) << exits(r);
}

TEST(Launcher, RestartsAFailedRankUpToMaxRestarts) {
  std::string tmp = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  tools::LaunchOptions o;
  o.nprocs = 2;
  o.tmp_root = tmp;
  o.quiet = true;
  o.max_restarts = 2;
  // Rank 1 fails on its first start only: restarted once, the job succeeds.
  o.command = {"/bin/sh", "-c", "[ \"$RANK\" = 1 ] && [ \"$DTENSOR_RESTART_COUNT\" = 0 ] && exit 3; exit 0"};
  tools::LaunchResult r = tools::run_ranks(o);
  EXPECT_EQ(r.status, 0) << exits(r);
  EXPECT_EQ(r.ranks[1].restarts, 1);
  EXPECT_EQ(r.ranks[0].restarts, 0);
  // Rank 1 always fails: two restarts, then its failure ends the job.
  o.command = {"/bin/sh", "-c", "[ \"$RANK\" = 1 ] && exit 3; exec sleep 30"};
  o.kill_grace = milliseconds(1000);
  r = tools::run_ranks(o);
  EXPECT_EQ(r.status, 3) << exits(r);
  EXPECT_EQ(r.ranks[1].restarts, 2);
  EXPECT_TRUE(r.ranks[0].terminated);
}

TEST(Membership, ArgumentsAreChecked) {
  EXPECT_THROW(Membership(nullptr, 0, 1), Error);
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/membership-args";
  EXPECT_THROW(Membership(open_store("file:" + dir), 4, 4), Error);
  Membership m(open_store("file:" + dir), 1, 4);
  EXPECT_THROW(m.next(Generation{0, {0, 2}}, options()), Error);  // not a member of what it leaves
  EXPECT_EQ(m.newest_decided(), 0);
  EXPECT_FALSE(m.joiners_waiting(m.first()));
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv(dtensor::kScenarioVar)) return dtensor::worker_main(scenario);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
