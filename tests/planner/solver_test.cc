// The min-sum solver against exhaustive search: chains, trees, series-parallel graphs (exact by
// elimination), denser graphs (exact by conditioning within the budget), class-compressed tables,
// kept variables.
#include "planner/solver.h"

#include <random>

#include "dtensor/core/error.h"
#include "gtest/gtest.h"

namespace dtensor::planner {
namespace {

// Random classes for a domain of n values.
ClassMapPtr random_classes(int n, std::mt19937& rng) {
  std::uniform_int_distribution<int> k(1, n);
  const int count = k(rng);
  std::vector<uint64_t> keys(n);
  std::uniform_int_distribution<int> c(0, count - 1);
  for (auto& x : keys) x = c(rng);
  return classes_from_keys(keys);
}

MinSumProblem random_problem(int n, const std::vector<std::pair<int, int>>& edges, std::mt19937& rng,
                             int max_domain = 5) {
  MinSumProblem p;
  std::uniform_int_distribution<int> dom(1, max_domain);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int v = 0; v < n; ++v) {
    std::vector<double> u(dom(rng));
    for (double& x : u) x = cost(rng);
    p.add_var(std::move(u));
  }
  for (auto [a, b] : edges) {
    ClassMapPtr ma = random_classes(p.domain(a), rng), mb = random_classes(p.domain(b), rng);
    std::vector<double> t(static_cast<size_t>(ma->count) * mb->count);
    for (double& x : t) x = cost(rng);
    p.add_factor(a, ma, b, mb, std::move(t));
  }
  return p;
}

void expect_optimal(const MinSumProblem& p, bool must_be_exact = true) {
  Solution s = solve(p);
  Solution e = solve_exhaustive(p);
  ASSERT_EQ(s.x.size(), static_cast<size_t>(p.num_vars()));
  EXPECT_NEAR(s.cost, e.cost, 1e-9 * std::max(1.0, e.cost));
  EXPECT_NEAR(p.cost(s.x), s.cost, 1e-9 * std::max(1.0, s.cost));
  if (must_be_exact) {
    EXPECT_TRUE(s.exact);
  }
}

TEST(Solver, ChainsAreExact) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + trial % 7;
    std::vector<std::pair<int, int>> e;
    for (int v = 0; v + 1 < n; ++v) e.push_back({v, v + 1});
    expect_optimal(random_problem(n, e, rng));
  }
}

TEST(Solver, TreesAreExact) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 3 + trial % 6;
    std::vector<std::pair<int, int>> e;
    for (int v = 1; v < n; ++v) e.push_back({static_cast<int>(rng() % v), v});
    expect_optimal(random_problem(n, e, rng));
  }
}

TEST(Solver, SeriesParallelGraphsAreExactWithoutBranching) {
  // Residual blocks: a chain with skip edges over each pair, and diamonds.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::pair<int, int>> e = {{0, 1}, {1, 2}, {2, 3}, {0, 3}, {3, 4}, {4, 5}, {3, 5}, {1, 6}, {6, 2}};
    MinSumProblem p = random_problem(7, e, rng);
    SolveOptions no_branch;
    no_branch.branch_budget = 1;
    Solution s = solve(p, no_branch);
    EXPECT_TRUE(s.exact);
    EXPECT_NEAR(s.cost, solve_exhaustive(p).cost, 1e-9);
  }
}

TEST(Solver, DenseGraphsAreExactByConditioning) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<int, int>> e;
    for (int a = 0; a < 6; ++a)
      for (int b = a + 1; b < 6; ++b) e.push_back({a, b});  // K6: treewidth 5
    expect_optimal(random_problem(6, e, rng, 4));
  }
}

TEST(Solver, HeuristicBeyondTheBudgetStillGivesAConsistentPlan) {
  std::mt19937 rng(5);
  std::vector<std::pair<int, int>> e;
  for (int a = 0; a < 7; ++a)
    for (int b = a + 1; b < 7; ++b) e.push_back({a, b});
  MinSumProblem p = random_problem(7, e, rng, 4);
  SolveOptions tight;
  tight.branch_budget = 1;
  Solution s = solve(p, tight);
  EXPECT_FALSE(s.exact);
  EXPECT_NEAR(p.cost(s.x), s.cost, 1e-9);
  EXPECT_GE(s.cost, solve_exhaustive(p).cost - 1e-9);
}

TEST(Solver, ParallelFactorsWithDifferentClassesMerge) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::pair<int, int>> e = {{0, 1}, {0, 1}, {1, 2}, {1, 2}, {0, 2}};
    expect_optimal(random_problem(3, e, rng, 6));
  }
}

TEST(Solver, ReductionKeepsTwoVariables) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<int, int>> e = {{0, 1}, {1, 2}, {2, 3}, {0, 3}, {3, 4}, {1, 4}};
    MinSumProblem p = random_problem(5, e, rng);
    auto r = reduce(p, {0, 4});
    const int d0 = p.domain(0), d4 = p.domain(4);
    ASSERT_EQ(r->table().size(), static_cast<size_t>(d0 * d4));
    for (int a = 0; a < d0; ++a)
      for (int b = 0; b < d4; ++b) {
        std::vector<int> x = r->backtrack({a, b});
        EXPECT_EQ(x[0], a);
        EXPECT_EQ(x[4], b);
        EXPECT_NEAR(p.cost(x), r->table()[a * d4 + b], 1e-9);
        // No assignment with these kept values is cheaper.
        double best = 1e300;
        std::vector<int> y(5, 0);
        y[0] = a;
        y[4] = b;
        for (y[1] = 0; y[1] < p.domain(1); ++y[1])
          for (y[2] = 0; y[2] < p.domain(2); ++y[2])
            for (y[3] = 0; y[3] < p.domain(3); ++y[3]) best = std::min(best, p.cost(y));
        EXPECT_NEAR(best, r->table()[a * d4 + b], 1e-9);
      }
  }
}

TEST(Solver, InfiniteCostsForbidChoices) {
  MinSumProblem p;
  const double inf = std::numeric_limits<double>::infinity();
  p.add_var({inf, 1.0, 5.0});
  p.add_var({0.0, inf});
  p.add_factor(0, identity_classes(3), 1, identity_classes(2), std::vector<double>{0, 0, 9, 0, 0, 0});
  Solution s = solve(p);
  EXPECT_EQ(s.x[0], 2);
  EXPECT_EQ(s.x[1], 0);
  EXPECT_DOUBLE_EQ(s.cost, 5.0);
}

TEST(Solver, MalformedProblemsAreRejected) {
  MinSumProblem p;
  p.add_var({1, 2});
  EXPECT_THROW(p.add_var({}), Error);
  EXPECT_THROW(p.add_factor(0, identity_classes(2), 0, identity_classes(2), std::vector<double>(4)), Error);
  p.add_var({1});
  EXPECT_THROW(p.add_factor(0, identity_classes(2), 1, identity_classes(1), std::vector<double>(3)), Error);
}

}  // namespace
}  // namespace dtensor::planner
