// Elastic membership: the ranks of a run agree, through the job's key-value store (File or Redis,
// open_store), on who takes part in each generation. Generation 0 is the launch (every rank of the
// world). A failed or timed-out collective, a closed connection or a missed step boundary ends a
// generation; its survivors, and any restarted rank that asked to join, agree on the next one, and
// build that generation's process groups under Generation::group_prefix(), never reusing a group of
// an earlier generation (a Gloo group is unusable after a CommError).
//
// The agreement needs no compare-and-set, only keys written once per (generation, rank):
//   1. each candidate writes elastic/g<n>/here/<rank> ("host pid"), then waits until every member of
//      the previous generation (and every joiner) has done so, or `settle` has passed (a dead or
//      stopped rank never does); a rank on this host whose last known process is gone (its pid from
//      its last report, or from the world's start entries) is not waited for, so a killed rank
//      costs no settle time, while a stopped one does;
//   2. each writes elastic/g<n>/view/<rank>: the ranks it saw present, and reads the views of those
//      ranks (each within `timeout`);
//   3. a rank whose view every rank of its view shares has agreed; the lowest of them writes
//      elastic/g<n>/decided (the store's keys are written once).
//      If one rank agrees, every rank of its view agrees (they saw the same views). A rank that sees
//      views differ (it reported late, or a rank died during the agreement) looks for a decided
//      generation n: if one exists without it, it was evicted from n (a stopped rank that wakes up
//      never rejoins the generation that left it out) and takes the joiner's path; otherwise
//      everyone retries with generation n + 1.
// A rank that restarts (the launcher's --max-restarts) calls rejoin(): it asks to join the generation
// after the newest decided one (elastic/g<n+1>/join/<rank>), which the members take up at their next
// step boundary (joiners_waiting), and then agrees on it as above.
//
// Times are bounded: next() returns or throws within about (attempts) x (settle + 2 timeout).
// Errors: dtensor::CommError naming the generation, this rank and what was missing; DTensorError
// (dtensor::Error) for bad arguments.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"

namespace gloo::rendezvous {
class Store;
}

namespace dtensor {

// One generation of an elastic run.
struct Generation {
  int64_t number = 0;
  std::vector<int> members;  // launch ranks, ascending
  // The prefix of this generation's process-group names: "g<number>/".
  std::string group_prefix() const;
  // This rank's index among the members, or -1.
  int index_of(int rank) const;
};

struct MembershipOptions {
  // How long a candidate waits for the previous generation's other members to report before the
  // missing ones are left out (at least the skew between the ranks' detection of a failure: a rank
  // blocked in a collective notices only at its timeout).
  Timeout settle = std::chrono::milliseconds(2000);
  // Bound on each read of another rank's view and on a joiner's wait for the members (ms).
  Timeout timeout = std::chrono::milliseconds(30000);
  int max_attempts = 8;  // generations tried by one next() before giving up
};

class Membership {
 public:
  // `store`: the job's store (open_store(ProcessEnv::store)); `rank` in [0, world_size): this
  // process's launch rank. Throws dtensor::Error for a null store or a rank out of range.
  Membership(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int world_size,
             std::string prefix = "elastic");

  // Generation 0: every rank of the world (the launch agreed on it; no store traffic).
  Generation first() const;

  // The generation after `ended`, which this rank was a member of: agreed with the other
  // survivors and any joiners as described above. Returns a generation this rank is a member of.
  // Throws CommError when this rank was evicted (a later generation was decided without it: it
  // should exit or rejoin()), or when no agreement came after max_attempts generations.
  Generation next(const Generation& ended, const MembershipOptions& o);

  // A restarted process (same launch rank): asks to join the generation after the newest decided
  // one and agrees on it with its members once they reach their next step boundary. Throws
  // CommError when the members do not take it in within `o.timeout` (plus settle).
  Generation rejoin(const MembershipOptions& o);

  // Whether a rank outside `current` has asked to join the generation after it (members call it at
  // a step boundary and then agree, for example by an all_reduce of the answer, to call next()).
  // Probes the store: about 1 ms per rank outside `current`.
  bool joiners_waiting(const Generation& current) const;

  // The newest decided generation number, or 0 when only the launch exists.
  int64_t newest_decided() const;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  // One attempt at generation n with the previous members `before`; empty when the views differed.
  std::vector<int> attempt(int64_t n, const std::vector<int>& before, const MembershipOptions& o,
                           bool* evicted);
  std::string key(int64_t n, const std::string& what) const;

  // Whether rank r's last known process ran on this host and is gone (store_util::pid_running).
  bool known_dead(int r);
  void remember(int64_t n, int r);  // r's "host pid" from its report in generation n

  std::shared_ptr<gloo::rendezvous::Store> store_;
  int rank_;
  int world_size_;
  std::string prefix_;
  std::vector<std::string> last_seen_;  // per rank: "host pid" of its last report ("" unknown)
};

}  // namespace dtensor
