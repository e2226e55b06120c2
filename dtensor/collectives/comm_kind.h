// The kinds of collective communication, and the one formula for the bytes a rank sends in each.
// The runtime's byte counts (CommStats), the redistribution planner, `dtensor explain`, the cost
// model and the offline planner all use these, so a prediction and a measurement speak of the same
// bytes.
#pragma once

#include <cstdint>
#include <string_view>

namespace dtensor {

// kLocal: a redistribution step that needs no communication (R -> S(d), slicing locally).
enum class CommKind : uint8_t {
  kLocal,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kSendRecv,
  kBarrier,
};
inline constexpr int kNumCommKinds = 8;

// "local", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv",
// "barrier" (torch.distributed's names).
const char* comm_kind_name(CommKind k);
// The inverse; throws dtensor::Error listing the accepted names.
CommKind comm_kind_from_name(std::string_view name);

// Bytes one rank sends for a collective of kind `k` over `n` ranks on a buffer of `group_bytes`
// (bytes, >= 0): the whole data the group holds together — all_reduce: the tensor each rank
// reduces; all_gather: the gathered output; reduce_scatter: the input each rank reduces;
// all_to_all: the sum of every rank's input; broadcast: the broadcast tensor; send_recv: the
// message. Ring algorithms (Patarasuk & Yuan 2009; the bus-bandwidth factors of nccl-tests'
// PERFORMANCE.md): all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, all_to_all
// (n-1)/n^2 (each rank keeps 1/n of its 1/n share), broadcast and send_recv 1, local and barrier 0.
// n <= 1 sends nothing. Rounded down to whole bytes.
int64_t comm_bytes_sent(CommKind k, int64_t group_bytes, int64_t n);

}  // namespace dtensor
