// The alpha-beta cost model of DESIGN §4: a collective of `kind` over a group of n ranks on a link
// costs base_latency + steps(kind, n) * alpha + bytes_sent / bus bandwidth, with the link's model for
// that kind (LinkModel::model, propagation/hardware.h) and ring step counts (ring_steps): n-1 for
// all_gather, reduce_scatter, all_to_all and broadcast, 2(n-1) for all_reduce, 1 for send_recv, 0 for
// local steps. Bytes are what each rank sends (comm_bytes_sent, dtensor/collectives/comm_kind.h).
// A measured profile (dtensor calibrate) replaces the formula, for the group sizes it measured, by
// that group size's fitted message-size ranges (CollectiveModel::by_group_size, hardware.h).
#pragma once

#include <string>
#include <vector>

#include "dtensor/redistribute.h"
#include "propagation/hardware.h"

namespace dtensor {

// One collective a call performs, as `dtensor explain` reports it.
struct CollectiveRecord {
  CommKind kind = CommKind::kLocal;
  int mesh_dim = 0;
  int64_t bytes = 0;  // sent by each rank
  double time_us = 0;
};

// Time in µs of one collective of `kind` sending `bytes` per rank in a group of `group_size`.
double collective_time_us(CommKind kind, int64_t bytes, int64_t group_size, const LinkModel& link);

// The collectives (local steps dropped) and total time of a redistribution plan.
double plan_time_us(const RedistributePlan& plan, const Shape& mesh_shape,
                    const std::vector<LinkModel>& links, std::vector<CollectiveRecord>* out);

}  // namespace dtensor
