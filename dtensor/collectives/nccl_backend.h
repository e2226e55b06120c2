// NCCL backend: one rank per process and one GPU per rank (cuda:LOCAL_RANK), collectives on CUDA
// tensors through NCCL, with the interface and failure contract of the Gloo backend
// (process_group.h, gloo_backend.h).
//
// Rendezvous goes through the same key-value store as Gloo ("file:/dir" or "redis://host:port",
// open_store) and the same helpers (store_util.h): the world and every new group first run the
// Gloo backend's join check (a member missing after the timeout is named), then group rank 0 of a
// group publishes an ncclUniqueId under the group's store prefix and the others read it.
// Communicators are created non-blocking (ncclConfig_t::blocking = 0), so creation is bounded by
// the timeout too.
//
// Collectives (tensors: contiguous, on this rank's device; any dtype, bool as uint8; tensors on
// the host or another device are staged through copies on this rank's device, see
// ProcessGroup::staged: distributed steps that run on the host still work over NCCL):
//   all_reduce      ncclAllReduce; avg is ncclAvg for floating dtypes, and for integers a sum
//                   divided on the host afterwards (truncating, as the other backends); bool
//                   sum / avg / max are logical or (ncclMax), min is and (ncclMin). NaN
//                   propagation through max / min is NCCL's (not guaranteed, unlike Gloo's).
//   all_gather      ncclAllGather for equal counts; uneven counts: one ncclBroadcast per rank
//                   into its block, in one NCCL group.
//   reduce_scatter  ncclReduceScatter for equal counts; uneven: one ncclReduce per rank to it.
//   all_to_all      ncclSend / ncclRecv pairs in one NCCL group (the own block is a device copy).
//   broadcast       ncclBroadcast.   barrier: an all_reduce of one element.
//   send / recv     ncclSend / ncclRecv in one NCCL group. NCCL has no tags: sends and receives
//                   between two ranks match in posting order, and `tag` is ignored.
// Every call is blocking, as the interface says: the op is queued on the group's own stream after
// the work already queued on the caller's current stream of the device, and the call returns when
// it has completed.
//
// Failures never hang: while waiting, the call polls the stream's completion and
// ncclCommGetAsyncError; an NCCL error, or no completion within the timeout, aborts the
// communicator (ncclCommAbort) and throws a dtensor::CommError naming the op (with its number in
// the group), the group, this rank, the timeout and, for peers on this host, the ones whose
// process has died. After that the group is unusable: later calls throw CommError at once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/collectives/process_group.h"
#include "dtensor/core/device.h"

namespace dtensor {

class NcclBackend : public Backend {
 public:
  // Uses cuda:local_rank (and makes it the current device of the calling thread), opens the store
  // and waits up to `timeout` until all world_size ranks have started. Throws dtensor::Error for
  // bad arguments or a missing GPU, dtensor::CommError when the store cannot be reached or a rank
  // does not start in time (naming it).
  NcclBackend(int rank, int world_size, int local_rank, const std::string& store_spec,
              Timeout timeout = default_timeout());
  ~NcclBackend() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string kind() const override { return "nccl"; }
  // Join check, then an NCCL communicator of the members (group rank i is global_ranks[i]).
  // Throws dtensor::Error on bad ranks, dtensor::CommError naming the members that did not join or
  // the communicator that was not ready within `timeout`.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks,
                                          const std::string& name,
                                          Timeout timeout = default_timeout()) override;

  Device device() const { return device_; }
  const std::vector<PeerInfo>& peers() const { return peers_; }

 private:
  int rank_;
  int world_size_;
  Device device_;
  std::string store_spec_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::vector<PeerInfo> peers_;
  std::map<std::string, int> group_generations_;
};

// read_process_env(), then an NcclBackend on cuda:LOCAL_RANK. Throws as init_backend_from_env.
std::shared_ptr<Backend> init_nccl_backend_from_env(Timeout timeout = default_timeout());

}  // namespace dtensor
