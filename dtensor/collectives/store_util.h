// Rendezvous helpers over a Gloo key-value store (rendezvous::Store, e.g. from open_store()),
// shared by the Gloo and NCCL backends. Timeouts in milliseconds; errors are dtensor::CommError.
#pragma once

#include <string>
#include <vector>

#include "dtensor/collectives/gloo_backend.h"

namespace dtensor::store_util {

std::vector<char> to_bytes(const std::string& s);
std::string from_bytes(const std::vector<char>& v);
// True when `key` is in the store; waits at most ~1 ms.
bool probe(gloo::rendezvous::Store& store, const std::string& key);
std::string this_host();  // gethostname(), or "unknown-host"
// "rank 3" or "ranks 2, 3".
std::string ranks_phrase(const std::vector<int>& ranks);
// A process on this host is running (not gone, not a zombie); true for pid <= 0 (unknown).
bool pid_running(int pid);
// A member's published "host pid" (its alive/<rank> entry, a membership report); an empty host and
// pid 0 (unknown) when malformed.
PeerInfo parse_peer(const std::string& value);
// Join check: publishes this rank's "host pid" under alive/<me> and waits up to `timeout` for
// every member's entry; returns the members' host and pid in member order. Throws CommError
// naming the members that did not join `what` in time.
std::vector<PeerInfo> join(gloo::rendezvous::Store& store, const std::vector<int>& members, int me,
                           Timeout timeout, const std::string& what);
// The members' host and pid as published (join's second half, without publishing); same errors.
std::vector<PeerInfo> read_peers(gloo::rendezvous::Store& store, const std::vector<int>& members, int me,
                                 Timeout timeout, const std::string& what);

}  // namespace dtensor::store_util
