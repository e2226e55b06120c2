// `dtensor train --elastic` (issue #28): training on Gloo processes that survives lost ranks.
//
// Each generation (dtensor/collectives/membership.h) trains the GPT on a 2-d mesh dp x tp over its
// members, with every process group named under Generation::group_prefix() (a group of an ended
// generation is never used again). When a step throws a CommError (a peer died, or stopped and timed
// out), every survivor:
//   1. detection: the time from the failed step's start to the error (up to --timeout for a rank
//      whose peer is alive but already recovering);
//   2. rendezvous: Membership::next with settle = the collective timeout + 1 s (a survivor blocked in
//      a collective notices only at its timeout), a group over the new members, and an agreement on
//      each survivor's completed steps (a rank that finished one more step than another is not used
//      as a source: the run goes on from the lowest count);
//   3. re-plan: plan_elastic_layout below (the planner's prediction for each candidate mesh);
//   4. reshard: a new model and AdamW on the new mesh, filled from the old layout's blocks: for each
//      tensor (parameters, exp_avg, exp_avg_sq) every distinct block of the old layout is taken from
//      the lowest surviving rank that holds it, the blocks are summed into the full tensor over the
//      survivors' group (one all_reduce of one buffer; each element has one source) and each rank
//      keeps its new block; the AdamW step count carries over. No disk is read.
//      When some block has no surviving holder (both dp replicas of a tp shard lost) the run loads
//      the last --save checkpoint (--save-every N writes one every N steps) into the new layout and
//      replays from its step, saying so; without one it stops with an error naming the tensor, the
//      block and the lost ranks that held it (exit 1).
// Then it redoes the failed step with the same global batch (the batch of step s is drawn from the
// seed and s alone), re-split over the new dp shares: no batch is skipped or trained twice.
//
// Grow back (--max-restarts N): the launcher restarts a dead rank's process, which asks to join
// (Membership::rejoin); the members look for joiners at every step boundary (joiners_waiting, agreed
// by an all_reduce), agree on the generation with it, and recover as above with the joiner holding
// nothing: the layout rule starts from the launch's tp, so with every rank back the run returns to
// the launch mesh, and the joiner's blocks come from the members (no disk). A process restarted
// while the survivors still agree is taken into their generation at once.
//
// Each part's time (the largest over the survivors) is printed by the new lead (the lowest member):
//   "elastic: generation 1, members 0,1,3 (lost 2): mesh dp=3,tp=1 (...); recovery: detection
//   0.012 s, rendezvous 3.1 s, re-plan 0.000 s, reshard 0.021 s"
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"
#include "tools/train.h"

namespace dtensor::tools {

// The layout of a generation: mesh dp x tp over its members in order (row-major: tp varies
// fastest), the batch rows of each dp rank, and why it was chosen.
struct ElasticLayout {
  int64_t dp = 1, tp = 1;
  std::vector<int64_t> rows;  // batch rows per dp rank (sum: --batch)
  bool weighted = false;      // rows are not the even split: the data placement is S(0)[rows...]
  std::string reason;
  std::string str() const;  // "dp=3,tp=1, batch rows 2,1,1 (S(0)[2:1:1])"
};

// The rule for a generation of `ranks` members of a run launched with tp size `tp`: keep tp when it divides the ranks; else the
// largest tp' < tp dividing the ranks, --heads and --dim; dp = ranks / tp'; the batch split evenly
// over dp when dp divides it, else by equal weights (weighted_range: the first ranks get a row
// more). Throws dtensor::Error when no tp' leaves every dp rank a batch row.
ElasticLayout choose_elastic_layout(int64_t ranks, int64_t tp, const TrainOptions& o,
                                    const std::vector<int64_t>& rank_weights = {});

// The planner's predicted step time in µs of this run on mesh dp x tp: planner/models/zoo.h's
// char-gpt at the run's sizes and `vocab`, priced as the planner's "megatron" baseline (linears split
// column/row on tp, data parallel on dp: the layout dtensor train runs) with --hardware's profile
// (default h100-nvlink). Throws dtensor::Error when the planner has no such plan.
double predicted_step_us(const TrainOptions& o, int64_t vocab, int64_t dp, int64_t tp);

// A generation's layout for `ranks` members of a run launched on mesh `launch` ({dp, tp} or {tp}):
// the launch mesh when every launch rank is a member; else among the meshes dp x tp whose tp divides
// the ranks, --heads and --dim (each dp rank at least a batch row), the fastest predicted step
// (predicted_step_us; ties: the larger tp), with the batch rows as choose_elastic_layout gives them.
// The reason names every candidate's prediction and the launch mesh's. Throws dtensor::Error when no
// tp fits (as choose_elastic_layout).
ElasticLayout plan_elastic_layout(int64_t ranks, const std::vector<int64_t>& launch, const TrainOptions& o,
                                  int64_t vocab);

// Test-only hook: $DTENSOR_TEST_KILL_AT="R[,R...]:S" makes each listed launch rank of an elastic run
// SIGKILL itself when it has completed S steps (before step S + 1), in generation 0 only. Unset or
// empty: none. Throws dtensor::Error naming the variable for a malformed value.
struct KillAt {
  std::vector<int> ranks;
  int64_t step = -1;
};
KillAt kill_at_from_env();
// Test-only as well: $DTENSOR_TEST_REJOIN_AFTER=G makes a restarted process (--max-restarts) wait,
// up to 60 s, until generation G was decided before it rejoins.

// Trains o on this Gloo process, elastically (see above). `log`: the lead's progress (may be null).
TrainResult train_elastic_rank(std::shared_ptr<Backend> backend, const TrainOptions& o, std::ostream* log);

}  // namespace dtensor::tools
