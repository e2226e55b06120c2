// Pipeline-parallel schedules as data: for each pipeline rank (stage) the order of its forwards and
// backwards over micro-batches and model chunks, their timeline under unit costs, and the program a
// rank runs (computations and the send/recv batches between them). No tensors, no processes: the
// executor (nn/pipeline.h) runs a program; tests check the orders and the memory they keep alive.
//
// Model chunks: the layers split into p * v consecutive chunks (p stages, v virtual stages per rank);
// virtual stage j of rank r is chunk j * p + r (Megatron-LM's interleaving), so chunk c runs on rank
// c % p, chunk 0 holds the embedding and chunk p v - 1 the head and the loss. v = 1: chunk = rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor::nn {

struct PipelineOp {
  enum Kind : uint8_t { kForward, kBackward };
  Kind kind = kForward;
  int micro_batch = 0;
  int chunk = 0;  // global model chunk (see above); its virtual stage on the rank is chunk / p
  bool operator==(const PipelineOp& o) const {
    return kind == o.kind && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};
std::string op_str(const PipelineOp& op);  // "F3.1": forward of micro-batch 3 on chunk 1; "B3.1"

using RankSchedule = std::vector<PipelineOp>;  // one rank's ops in the order it runs them

// 1F1B (PipeDream-flush; Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", SC'21, §2.2): rank r runs min(p - r - 1, m) warm-up forwards, then
// alternates one forward and one backward, then the remaining backwards (the cool-down).
// Interleaved 1F1B (same paper, §2.2.2; Megatron-LM's forward_backward_pipelining_with_interleaving):
// v chunks per rank, micro-batches in groups of p, forwards over chunks 0..v-1 and backwards over
// chunks v-1..0 of each group; rank r's warm-up is min(2 (p - r - 1) + (v - 1) p, m v) forwards.
// Throws dtensor::Error for p < 1, v < 1, m < 1, or v > 1 with m not a multiple of p (what
// Megatron-LM accepts).
std::vector<RankSchedule> pipeline_schedule(int stages, int virtual_stages, int micro_batches);

// The schedule's timeline when every forward takes `forward_cost` and every backward
// `backward_cost` (any unit) and transfers take none: each op starts when its rank is free and its
// inputs exist (forward: the previous chunk's forward of that micro-batch; backward: its own
// forward and the next chunk's backward).
struct PipelineTimeline {
  std::vector<std::vector<double>> start, finish;  // [rank][i] for schedule[rank][i]
  double makespan = 0;
  // Idle time over all ranks / (ranks x makespan): for 1F1B with uniform stages this equals
  // (p - 1) / (m + p - 1), interleaved (p - 1) / v / (m + (p - 1) / v) (planner/pipeline.h).
  double bubble_fraction = 0;
  // Per rank, the most chunk activations held at once (forward run, backward not yet): 1F1B
  // min(p - r, m); in units of a chunk's layers for one micro-batch.
  std::vector<int> peak_activations;
};
// Throws dtensor::Error naming the rank and op when the schedule cannot run: an op on a chunk the
// rank does not hold, a missing or repeated op, or an order that waits forever (a deadlock).
PipelineTimeline simulate_pipeline(const std::vector<RankSchedule>& schedule, int stages, int virtual_stages,
                                   int micro_batches, double forward_cost = 1, double backward_cost = 2);

// One transfer between ranks: the output of a forward (activation, to the next chunk's rank) or of a
// backward (the gradient of the chunk's input, to the previous chunk's rank).
struct PipelineMessage {
  enum Kind : uint8_t { kActivation, kGradient };
  Kind kind = kActivation;
  int micro_batch = 0;
  int chunk = 0;  // the chunk whose op produced it
  int src = 0, dst = 0;  // pipeline ranks
  int tag = 0;           // unique within a step
};

// One step of a rank's program: a computation, or a batch of sends and recvs posted together.
struct PipelineAction {
  enum Kind : uint8_t { kCompute, kExchange };
  Kind kind = kCompute;
  PipelineOp op;                                // kCompute
  std::vector<PipelineMessage> sends, recvs;    // kExchange
};

// Each rank's program for `schedule`: its ops in order, with a batch of p2p transfers at each time of
// the timeline (simulate_pipeline's, with the given costs) at which a message is produced: the
// producer sends right after its op and the consumer posts the matching recv at the same point of
// its own program, before any op that starts later. Every rank meets the batches of its peers in the
// same global order and posts all of a batch before waiting, so blocking send/recv (Gloo's, which
// waits for the matching recv) cannot deadlock. Messages between chunks on one rank (p = 1) are not
// sent: the executor hands them over locally. Throws what simulate_pipeline throws.
std::vector<std::vector<PipelineAction>> pipeline_program(const std::vector<RankSchedule>& schedule, int stages,
                                                          int virtual_stages, int micro_batches,
                                                          double forward_cost = 1, double backward_cost = 2);

}  // namespace dtensor::nn
