// The planner's discrete optimizer: minimize  sum_v unary_v(x_v) + sum_f f(x_a, x_b)  over one choice
// x_v per variable (a pairwise min-sum problem, a "Markov random field" MAP problem).
//
// Algorithm: variable elimination (non-serial dynamic programming). A variable with one neighbour is
// folded into that neighbour's unary costs, a variable with two neighbours into a pairwise factor
// between them (series reduction); parallel factors are summed. This is exact, and runs in
// O(sum of |domain| * |classes|^2), on chains, trees and every series-parallel graph (treewidth <= 2:
// transformer layers with residual and attention diamonds are). When every remaining variable has
// three or more neighbours the solver conditions on one of them: it branches over all its values while
// the product of branched domain sizes stays within `branch_budget` (exact: cutset conditioning), and
// otherwise fixes it to its locally best value (heuristic; Solution::exact is then false).
//
// Factor tables are indexed by *classes* of the two variables' domains (ClassMap): the cost of an edge
// between two ops depends only on the producer's output placement and the consumer's input placement,
// not on the whole strategy, so tables are small.
//
// Costs are doubles in any unit (the planner uses µs plus lambda * bytes); +infinity forbids a choice.
// Errors: dtensor::Error for malformed problems (a factor on an unknown variable, a table of the wrong
// size, a class map of the wrong length).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace dtensor::planner {

// Classes of a variable's domain: value s belongs to class of[s] in [0, count).
struct ClassMap {
  std::vector<int32_t> of;
  int32_t count = 0;
};
using ClassMapPtr = std::shared_ptr<const ClassMap>;
ClassMapPtr identity_classes(int n);
// Classes from arbitrary keys: equal keys, equal class (classes numbered by first appearance).
ClassMapPtr classes_from_keys(const std::vector<uint64_t>& keys);

using Table = std::shared_ptr<const std::vector<double>>;  // shared, never modified in place

struct Factor {
  int a = -1, b = -1;        // variables, a != b
  ClassMapPtr ma, mb;        // classes of a's and b's domains
  Table t;                   // (*t)[ca * mb->count + cb]
};

class MinSumProblem {
 public:
  // Adds a variable with |unary| choices (>= 1); returns its id.
  int add_var(std::vector<double> unary);
  void add_factor(int a, ClassMapPtr ma, int b, ClassMapPtr mb, std::vector<double> table);
  void add_factor(int a, ClassMapPtr ma, int b, ClassMapPtr mb, Table table);

  int num_vars() const { return static_cast<int>(unary_.size()); }
  int domain(int v) const { return static_cast<int>(unary_[v].size()); }
  const std::vector<double>& unary(int v) const { return unary_[v]; }
  std::vector<double>& mutable_unary(int v) { return unary_[v]; }
  const std::vector<Factor>& factors() const { return factors_; }
  // The objective at a full assignment.
  double cost(const std::vector<int>& x) const;

 private:
  std::vector<std::vector<double>> unary_;
  std::vector<Factor> factors_;
};

struct SolveOptions {
  // Most leaves of the conditioning tree (product of branched domain sizes); beyond, heuristic.
  int64_t branch_budget = 4096;
};

struct Solution {
  std::vector<int> x;  // per variable
  double cost = 0;
  bool exact = true;
};

// The result of eliminating every variable except up to two kept ones: table[va * |D_b| + vb] (or
// table[va], or table[0] with none kept) is the least cost of the whole problem with the kept
// variables fixed, and backtrack() gives an assignment of every variable reaching it.
class Reduction {
 public:
  virtual ~Reduction() = default;
  const std::vector<int>& kept() const { return kept_; }
  const std::vector<double>& table() const { return *table_; }
  const Table& shared_table() const { return table_; }
  bool exact() const { return exact_; }
  // Assignment of every variable of the problem with kept variables at `kept_values`.
  virtual std::vector<int> backtrack(const std::vector<int>& kept_values) const = 0;

 protected:
  std::vector<int> kept_;
  Table table_;
  bool exact_ = true;
};

std::shared_ptr<const Reduction> reduce(const MinSumProblem& p, const std::vector<int>& keep,
                                        const SolveOptions& options = {});
Solution solve(const MinSumProblem& p, const SolveOptions& options = {});
// Every assignment (the product of domain sizes must be at most `limit`); for tests.
Solution solve_exhaustive(const MinSumProblem& p, int64_t limit = 50'000'000);

}  // namespace dtensor::planner
