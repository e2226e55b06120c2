#include "dtensor/collectives/comm_kind.h"

#include <string>

#include "dtensor/core/error.h"

namespace dtensor {
namespace {

constexpr const char* kNames[kNumCommKinds] = {"local",      "all_reduce", "all_gather", "reduce_scatter",
                                               "all_to_all", "broadcast",  "send_recv",  "barrier"};

}  // namespace

const char* comm_kind_name(CommKind k) {
  const int i = static_cast<int>(k);
  return i >= 0 && i < kNumCommKinds ? kNames[i] : "?";
}

CommKind comm_kind_from_name(std::string_view name) {
  for (int i = 0; i < kNumCommKinds; ++i)
    if (name == kNames[i]) return static_cast<CommKind>(i);
  DT_FAIL("unknown collective kind '", std::string(name),
          "'; accepted: local, all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv, barrier");
}

int64_t comm_bytes_sent(CommKind k, int64_t group_bytes, int64_t n) {
  if (n <= 1 || group_bytes <= 0) return 0;
  // long double: group_bytes * 2 (n - 1) may pass int64 for the largest tensors (2^46 B) on 2^20 ranks.
  const long double b = static_cast<long double>(group_bytes), m = static_cast<long double>(n);
  long double sent = 0;
  switch (k) {
    case CommKind::kAllReduce: sent = 2 * b * (m - 1) / m; break;
    case CommKind::kAllGather:
    case CommKind::kReduceScatter: sent = b * (m - 1) / m; break;
    case CommKind::kAllToAll: sent = b * (m - 1) / (m * m); break;
    case CommKind::kBroadcast:
    case CommKind::kSendRecv: sent = b; break;
    case CommKind::kLocal:
    case CommKind::kBarrier: sent = 0; break;
  }
  return static_cast<int64_t>(sent);
}

}  // namespace dtensor
