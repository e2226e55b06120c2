// The collective interface every backend implements (in-process threads, Gloo, later NCCL).
//
// A ProcessGroup is an ordered set of ranks ("group ranks" 0..size()-1) that run collectives together.
// Every call is blocking and collective (all members call it in the same order, with matching
// arguments) unless noted, works on contiguous CPU tensors, and ends within `timeout` — with a
// dtensor::CommError that names the op, the group and the rank(s) that failed — never hangs.
// Byte counts in CommStats are the bytes this rank sends, counted with the ring formulas below.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

using Timeout = std::chrono::milliseconds;
inline constexpr Timeout kDefaultTimeout{std::chrono::minutes(5)};

// The timeout of every collective, mesh and backend start that is given none: set_default_timeout's
// value if it was called, else $DTENSOR_TIMEOUT (seconds, a number > 0, fractions allowed) when set,
// else kDefaultTimeout (5 min). So any rank, whatever launched it, can bound how long it waits for a
// stopped or lost peer. Throws dtensor::Error when $DTENSOR_TIMEOUT is not a number > 0 or is above
// kMaxTimeout.
Timeout default_timeout();
// Sets the process-wide default (`dtensor train --timeout`). Throws dtensor::Error outside
// (0, kMaxTimeout].
void set_default_timeout(Timeout t);
inline constexpr Timeout kMaxTimeout{std::chrono::hours(24)};

// One point-to-point operation of a batch.
struct P2POp {
  enum Kind : uint8_t { kSend, kRecv } kind;
  Tensor tensor;  // contiguous; a recv writes into it
  int peer;       // group rank
  int tag = 0;
};

enum class CommKind : uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv, kBarrier };
inline constexpr int kNumCommKinds = 7;
const char* comm_kind_name(CommKind k);  // "all_reduce", ...

// What a rank has sent through a group, for tests and the `collectives used` reports.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t calls_by_kind[kNumCommKinds] = {};
  int64_t of(CommKind k) const { return calls_by_kind[static_cast<int>(k)]; }
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }  // this rank within the group
  int size() const { return static_cast<int>(global_ranks_.size()); }
  // Global rank of each group rank.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::string& name() const { return name_; }
  // e.g. "group 'mesh0/dim1' ranks [0, 2]".
  std::string describe() const;
  const CommStats& stats() const { return stats_; }

  // In place: every rank ends with op over all ranks' `t` (avg = sum / size; integer avg truncates).
  // dtype: any. Bytes counted: 2 (n-1)/n of t.
  virtual void all_reduce(Tensor& t, ReduceOp op, Timeout timeout = default_timeout()) = 0;
  // Out of place: `out` (same numel and dtype as `in`, contiguous) receives op over all ranks' `in`;
  // `in` is not written. Same bytes as the in-place form. (Default: copy, then in place.)
  virtual void all_reduce(const Tensor& in, Tensor& out, ReduceOp op, Timeout timeout = default_timeout());
  // `out` (contiguous, numel = sum of all ranks' `in` numel, same dtype) receives the ranks' `in`
  // buffers concatenated in rank order; the sizes may differ between ranks (all_gatherv).
  // `counts[r]` is rank r's element count and must be known to every rank.
  virtual void all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                          Timeout timeout = default_timeout()) = 0;
  // `in` holds size() consecutive blocks of counts[r] elements; rank r receives op over all ranks'
  // block r in `out` (numel counts[rank()]).
  virtual void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                              ReduceOp op, Timeout timeout = default_timeout()) = 0;
  // `in` holds send_counts[r] elements for each rank r, in order; `out` receives recv_counts[r]
  // from each rank r, in order. recv_counts[r] must equal rank r's send_counts[rank()].
  virtual void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                          const std::vector<int64_t>& recv_counts,
                          Timeout timeout = default_timeout()) = 0;
  // `t` of rank `root` is copied into every rank's `t`.
  virtual void broadcast(Tensor& t, int root, Timeout timeout = default_timeout()) = 0;
  // Point to point; not collective. Ops of one batch may complete in any order; the call returns when
  // all have. A send matches the recv of the same (peer, tag) in posting order.
  virtual void batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout = default_timeout()) = 0;
  void send(const Tensor& t, int dst, int tag = 0, Timeout timeout = default_timeout());
  void recv(Tensor& t, int src, int tag = 0, Timeout timeout = default_timeout());
  virtual void barrier(Timeout timeout = default_timeout()) = 0;

 protected:
  ProcessGroup(std::string name, int rank, std::vector<int> global_ranks)
      : name_(std::move(name)), rank_(rank), global_ranks_(std::move(global_ranks)) {}
  // Validates arguments shared by every backend; throws dtensor::Error naming op and group.
  void check_tensor(const char* op, const Tensor& t) const;
  void check_counts(const char* op, const std::vector<int64_t>& counts) const;
  // Staging for a backend whose transport reads one kind of memory (`home`: the cpu for threads
  // and Gloo, the rank's GPU for NCCL): a tensor elsewhere is copied home (contiguous) for the
  // call and the results are copied back (Tensor::copy_, through the registered device copy).
  // Correct for any device with a copy function; it costs two copies, so it is the fallback, not
  // the fast path.
  static bool away(const Tensor& t, Device home) { return t.defined() && t.device() != home; }
  static Tensor staged(const Tensor& t, Device home) {
    return t.device() == home ? t : t.to(home).contiguous();
  }
  // Runs `ops` with every tensor away from `home` staged: sends are copied home, receives land
  // home and are copied back. Returns false (and does nothing) when all are home.
  bool stage_p2p(std::vector<P2POp>& ops, Device home, Timeout timeout);
  void count(CommKind kind, int64_t bytes) {
    ++stats_.calls;
    ++stats_.calls_by_kind[static_cast<int>(kind)];
    stats_.bytes_sent += bytes;
  }

  std::string name_;
  int rank_;
  std::vector<int> global_ranks_;
  CommStats stats_;
};

// Creates groups over the ranks of one "world" (all ranks of a job). Every member of a new group must
// call new_group with the same ranks and name; non-members must not.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;        // global rank
  virtual int world_size() const = 0;
  virtual std::string kind() const = 0;  // "threads", "gloo"
  // global_ranks: sorted or not, distinct, containing rank(). Throws dtensor::CommError if a member
  // does not join within `timeout`, naming it.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks,
                                                  const std::string& name,
                                                  Timeout timeout = default_timeout()) = 0;
  // Numbers the meshes a rank creates, to give their groups matching names on every rank (all ranks
  // create meshes in the same order, as with torch.distributed.new_group).
  int next_mesh_sequence() { return mesh_sequence_++; }

 private:
  int mesh_sequence_ = 0;
};

}  // namespace dtensor
