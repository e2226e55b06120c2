// Gloo backend: one rank per process, CPU tensors, TCP between every pair of ranks of a group
// (device tensors are staged through host copies, ProcessGroup::staged).
//
// Rendezvous goes through a key-value store: a directory on a (shared) file system ("file:/dir",
// gloo::rendezvous::FileStore) or a Redis server ("redis://host:port", RedisStore). The store must
// be fresh for each job: keys left over from an earlier run with the same directory or Redis
// database make the rendezvous of the next one fail or mismatch (`dtensor launch` makes a fresh
// directory per job).
//
// Collectives map onto Gloo's options-based algorithms:
//   all_reduce      gloo::allreduce (ring); the reduce function is dtensor's reduce_pair, so every
//                   dtype (bf16, fp16 and bool included) reduces exactly as in the threads backend;
//                   avg = sum, then divided by the group size (integer avg truncates).
//   all_gather      gloo::allgatherv (uneven and empty per-rank counts allowed).
//   reduce_scatter  Gloo has no options-based reduce-scatter: a direct exchange over unbound
//                   buffers. Block r of `in` is sent from `in` itself to rank r; the blocks for this
//                   rank land in a scratch buffer and are reduced into `out` in rank order (the
//                   threads backend's order, so both give the same bits). Each rank sends (k-1)/k
//                   of `in`, the ring formula CommStats counts.
//   all_to_all      gloo::alltoallv.
//   broadcast       gloo::broadcast.
//   barrier         gloo::barrier.
//   send/recv       unbound buffers (context->createUnboundBuffer, send/recv on a slot derived from
//                   the user tag, waitSend/waitRecv with the timeout).
// Each collective gets its own Gloo tag from a per-group counter, so consecutive ops never mix.
// A group is used by one thread at a time.
//
// Failures never hang: every Gloo wait is bounded by the call's timeout, and every error is a
// dtensor::CommError naming the op, the group, this rank and, when it can tell, the culprit:
//   - new_group first runs a join check through the store: each member publishes
//     `<group>/alive/<global rank>` = "<hostname> <pid>" and waits for all members; a member
//     missing after `timeout` is named: "rank(s) 3 did not join group 'mesh0/dim0' ranks [0, 1, 2,
//     3] within 2000 ms".
//   - A Gloo exception inside an op (timeout, "connection closed by peer", ...) is rethrown as a
//     CommError. For peers on the same host the message says which ones are dead ("peer rank 3 (pid
//     1234) is no longer running"). When no peer is known dead, the failing ranks compare notes
//     through the store for a short window (at most 500 ms, and at most a quarter of the timeout)
//     and name the members that never reached the op ("rank 3 did not enter all_reduce #7 (alive,
//     silent)"). The error is therefore raised at most `timeout + 500 ms` after the call.
//   - After a CommError the group is unusable: later calls on it throw CommError at once.
// The constructor ignores SIGPIPE if it is at its default action (a write to a dead peer's socket
// must be an error, not the death of this process).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"

namespace gloo {
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace dtensor {

// Where a rank was when it joined: for telling dead peers from slow ones.
struct PeerInfo {
  std::string host;  // gethostname() of the peer
  int pid = 0;
};

class GlooBackend : public Backend {
 public:
  // Connects to the store, creates the TCP device and waits (up to `timeout`) until all
  // `world_size` ranks have started; records each rank's host and pid.
  //   store_spec: "file:/path/to/dir" (created if missing) or "redis://host:port" (port defaults to
  //               6379).
  //   host: address the device binds to and advertises to peers; "iface:NAME" binds to network
  //         interface NAME instead. Empty: $DTENSOR_GLOO_HOST, else "127.0.0.1" (one machine).
  //   restart: 0 for a process of the launch; k > 0 for the k-th restart of this rank's process
  //         (dtensor launch --max-restarts): the world started already, so it reads the others'
  //         entries (its own is its predecessor's) instead of publishing one, and an elastic run
  //         takes it in through dtensor/collectives/membership.h.
  // Throws dtensor::Error on bad arguments (rank outside [0, world_size), malformed store_spec) and
  // dtensor::CommError when the store or device cannot be set up or a rank does not start in time
  // (naming the missing ranks).
  GlooBackend(int rank, int world_size, const std::string& store_spec, const std::string& host = "",
              Timeout timeout = default_timeout(), int restart = 0);
  ~GlooBackend() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string kind() const override { return "gloo"; }
  // Join check (see above), then a Gloo full-mesh connection of the members through a store prefix
  // unique to (name, how many groups of that name this rank created before). Group rank i is
  // global_ranks[i]. Throws dtensor::Error on bad ranks, dtensor::CommError naming the members that
  // did not join or the connection that failed within `timeout`.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks,
                                          const std::string& name,
                                          Timeout timeout = default_timeout()) override;

  // Host and pid of every global rank, as published when the world started.
  const std::vector<PeerInfo>& peers() const { return peers_; }

  // Closes every group this backend created that is still alive (DTensors and meshes may hold
  // them): each drops its Gloo connections, and a later collective on it throws CommError saying
  // the process group was destroyed. Then the TCP device (and its I/O thread) is released, so that
  // no Gloo thread outlives the call: dtensor.destroy_process_group() and the interpreter's exit
  // call it, before Python tears down the objects still holding a group; so does the destructor (a
  // group must not be used after its backend is gone). Idempotent; new_group after it throws
  // dtensor::Error. Call it when no collective of this process is running.
  void close();

 private:
  int rank_;
  int world_size_;
  std::string store_spec_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;  // null once close() ran
  std::vector<PeerInfo> peers_;
  std::map<std::string, int> group_generations_;  // name -> groups created with it so far
  std::vector<std::weak_ptr<ProcessGroup>> groups_;  // every group new_group made, for close()
};

// Parses a store spec and opens the store; "file:DIR" or "redis://host[:port]". Keys are escaped to
// [A-Za-z0-9_-%] (group names contain '/'), and waits honour millisecond timeouts (Gloo's own
// stores round them to whole seconds). Throws dtensor::Error on a malformed spec,
// dtensor::CommError when the directory cannot be created or Redis cannot be reached.
std::shared_ptr<gloo::rendezvous::Store> open_store(const std::string& spec);

}  // namespace dtensor
