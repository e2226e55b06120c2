#include "dtensor/collectives/membership.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dtensor/collectives/store_util.h"
#include "dtensor/core/error.h"
#include "gloo/rendezvous/store.h"

namespace dtensor {
namespace {

using Clock = std::chrono::steady_clock;
using store_util::from_bytes;
using store_util::probe;
using store_util::to_bytes;

std::string ranks_str(const std::vector<int>& r) { return absl::StrCat("[", absl::StrJoin(r, ", "), "]"); }

std::vector<int> parse_ranks(const std::string& s, int world, const std::string& what) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int r = -1;
    if (!absl::SimpleAtoi(part, &r) || r < 0 || r >= world)
      throw CommError(absl::StrCat("membership: malformed rank list '", s, "' in ", what));
    out.push_back(r);
  }
  return out;
}

bool contains(const std::vector<int>& v, int r) { return std::find(v.begin(), v.end(), r) != v.end(); }

}  // namespace

std::string Generation::group_prefix() const { return absl::StrCat("g", number, "/"); }

int Generation::index_of(int rank) const {
  auto it = std::find(members.begin(), members.end(), rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

Membership::Membership(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int world_size, std::string prefix)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      prefix_(std::move(prefix)),
      last_seen_(static_cast<size_t>(std::max(world_size, 0))) {
  DT_CHECK(store_ != nullptr, "Membership: no store");
  DT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "Membership: rank ", rank, " of world size ",
           world_size, "; accepted: 0 <= rank < world size");
}

void Membership::remember(int64_t n, int r) {
  try {
    last_seen_[r] = from_bytes(store_->get(key(n, absl::StrCat("here/", r))));
  } catch (const std::exception&) {
    // unreadable: keep what was known
  }
}

bool Membership::known_dead(int r) {
  if (last_seen_[r].empty()) {
    // Not seen in a generation yet: the world's start entry (GlooBackend's join, "host pid").
    const std::string world = absl::StrCat("world/alive/", r);
    if (probe(*store_, world)) {
      try {
        last_seen_[r] = from_bytes(store_->get(world));
      } catch (const std::exception&) {
      }
    }
  }
  const PeerInfo peer = store_util::parse_peer(last_seen_[r]);
  return peer.pid > 0 && peer.host == store_util::this_host() && !store_util::pid_running(peer.pid);
}

std::string Membership::key(int64_t n, const std::string& what) const {
  return absl::StrCat(prefix_, "/g", n, "/", what);
}

Generation Membership::first() const {
  Generation g;
  for (int r = 0; r < world_size_; ++r) g.members.push_back(r);
  return g;
}

int64_t Membership::newest_decided() const {
  // Generations that failed to agree leave gaps (each next() tries at most max_attempts numbers);
  // 16 consecutive misses end the scan.
  int64_t newest = 0;
  for (int64_t n = 1, misses = 0; misses < 16; ++n) {
    if (probe(*store_, key(n, "decided"))) {
      newest = n;
      misses = 0;
    } else {
      ++misses;
    }
  }
  return newest;
}

bool Membership::joiners_waiting(const Generation& current) const {
  for (int r = 0; r < world_size_; ++r)
    if (!contains(current.members, r) && probe(*store_, key(current.number + 1, absl::StrCat("join/", r))))
      return true;
  return false;
}

std::vector<int> Membership::attempt(int64_t n, const std::vector<int>& before, const MembershipOptions& o,
                                     bool* evicted) {
  *evicted = false;
  const std::string here = key(n, "here/");
  try {
    store_->set(here + std::to_string(rank_), to_bytes(absl::StrCat(store_util::this_host(), " ", getpid())));
  } catch (const std::exception& e) {
    throw CommError(absl::StrCat("membership: rank ", rank_, " cannot report for generation ", n, ": ", e.what()));
  }
  // 1. Wait for the previous members and the joiners, at most `settle`.
  std::vector<int> expected = before;
  for (int r = 0; r < world_size_; ++r)
    if (!contains(expected, r) && probe(*store_, key(n, absl::StrCat("join/", r)))) expected.push_back(r);
  const auto deadline = Clock::now() + o.settle;
  std::vector<int> missing = expected;
  while (true) {
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [&](int r) { return probe(*store_, here + std::to_string(r)) || known_dead(r); }),
                  missing.end());
    if (missing.empty() || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // 2. This rank's view: every rank that reported (a late one still counts if it made it by now).
  std::vector<int> view;
  for (int r = 0; r < world_size_; ++r)
    if (r == rank_ || probe(*store_, here + std::to_string(r))) view.push_back(r);
  for (int r : view) remember(n, r);
  const std::string mine = absl::StrJoin(view, ",");
  store_->set(key(n, absl::StrCat("view/", rank_)), to_bytes(mine));
  bool agree = true;
  for (int r : view) {
    if (r == rank_) continue;
    const std::string k = key(n, absl::StrCat("view/", r));
    try {
      store_->wait({k}, o.timeout);
    } catch (const std::exception&) {
      agree = false;  // r died during the agreement: the next generation leaves it out
      break;
    }
    if (from_bytes(store_->get(k)) != mine) {
      agree = false;
      break;
    }
  }
  if (agree) {
    // Every rank of the view agreed alike: its lowest rank records the decision (a store key is
    // written once).
    if (view.front() == rank_) store_->set(key(n, "decided"), to_bytes(mine));
    return view;
  }
  // 3. Views differ: did the others agree without this rank (or with it, when its read timed out)?
  const auto until = Clock::now() + o.settle;
  while (Clock::now() < until) {
    if (probe(*store_, key(n, "decided"))) {
      std::vector<int> decided = parse_ranks(from_bytes(store_->get(key(n, "decided"))), world_size_,
                                             key(n, "decided"));
      if (contains(decided, rank_)) return decided;
      *evicted = true;
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

Generation Membership::next(const Generation& ended, const MembershipOptions& o) {
  DT_CHECK(ended.index_of(rank_) >= 0, "Membership::next: rank ", rank_, " is not a member of generation ",
           ended.number, " ", ranks_str(ended.members));
  std::vector<int> before = ended.members;
  for (int i = 0; i < o.max_attempts; ++i) {
    const int64_t n = ended.number + 1 + i;
    bool evicted = false;
    std::vector<int> members = attempt(n, before, o, &evicted);
    if (evicted)
      throw CommError(absl::StrCat("membership: rank ", rank_, " was left out of generation ", n,
                                   " (it reported after the others had agreed): rejoin or exit"));
    if (!members.empty()) return Generation{n, members};
    // The views differed: try the next number with the ranks seen present this time.
    std::vector<int> seen;
    for (int r = 0; r < world_size_; ++r)
      if (probe(*store_, key(n, absl::StrCat("here/", r)))) seen.push_back(r);
    before = seen;
  }
  throw CommError(absl::StrCat("membership: rank ", rank_, ": no agreement on the generation after ", ended.number,
                               " within ", o.max_attempts, " attempts"));
}

Generation Membership::rejoin(const MembershipOptions& o) {
  const int64_t last = newest_decided();
  std::vector<int> before;
  if (last == 0) {
    before = first().members;
  } else {
    before = parse_ranks(from_bytes(store_->get(key(last, "decided"))), world_size_, key(last, "decided"));
  }
  before.erase(std::remove(before.begin(), before.end(), rank_), before.end());
  const int64_t n = last + 1;
  store_->set(key(n, absl::StrCat("join/", rank_)), to_bytes(absl::StrCat(store_util::this_host(), " ", getpid())));
  // The members come at their next step boundary: wait for them up to the timeout.
  MembershipOptions wait = o;
  wait.settle = o.timeout;
  bool evicted = false;
  std::vector<int> members = attempt(n, before, wait, &evicted);
  if (members.empty() || !contains(members, rank_))
    throw CommError(absl::StrCat("membership: rank ", rank_, " asked to join generation ", n, " (after ",
                                 ranks_str(before), ") but was not taken in"));
  return Generation{n, members};
}

}  // namespace dtensor
