// Pipeline schedules (planner/pipeline.h plans the stages): each schedule's step time and bubble
// from its slowest stage, the micro-batches each stage holds in flight, and the partition of the
// layers over the stages.
//
// Schedules (m micro-batches, p stages):
//   - 1F1B (PipeDream-flush; Narayanan et al., "Efficient Large-Scale Language Model Training on
//     GPU Clusters Using Megatron-LM", SC'21, section 2.2.1): step = (m + p - 1) t + optimizer +
//     2 (p - 1) t_p2p; stage i holds min(p - i, m) micro-batches' activations (it runs p - i
//     forwards before its first backward).
//   - interleaved 1F1B with v model chunks per device (ibid., section 2.2.2): bubble (p - 1) t / v,
//     2 (p - 1) v sends on the critical path; in flight, the warm-up count of Megatron-LM's
//     interleaved schedule (megatron/core/pipeline_parallel/schedules.py: 2 (p - i - 1) + (v - 1) p
//     chunk forwards) plus the steady state's first forward, in chunks of 1/v of the device's
//     layers: min(2 (p - i - 1) + (v - 1) p + 1, m v) / v micro-batches; device 0 holds
//     p (1 + (p - 1) / (p v)), that much more than 1F1B's p.
//   - ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2.1): the backward
//     split into B (the inputs' gradients) and W (the weights'); W passes are deferred to fill the
//     drain, so the bubble is (p - 1)(T_F + T_B - T_W) (0 if negative) instead of 1F1B's
//     (p - 1)(T_F + T_B + T_W), at 1F1B's peak memory (the same in-flight counts); the sends as
//     1F1B's. The optimizer step's synchronization is counted as in 1F1B (the paper's post-update
//     validation, which removes it, is not modelled).
// T_F, T_B, T_W of a stage come from its plan: T_F its ops' forward compute and forward collectives;
// the cost model prices an op's backward as twice its forward (planner/cost.h: the input's gradient
// and the weight's, one product each), so T_W is one forward's compute of every op that takes a
// parameter (a linear's weight-gradient product; an approximation for norms and embeddings, whose
// weight gradients are cheaper) and T_B the rest of the backward with every backward collective
// (the weights' gradient reductions are the optimizer's, once a step). t_p2p: one activation of
// the stage boundary sent over the inter-host link (each rank its share; the fill and drain sends
// are on the critical path, steady-state sends overlap compute).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor::planner {

enum class Schedule : uint8_t { k1F1B, kInterleaved, kZeroBubbleH1 };
const char* schedule_name(Schedule s);  // "1f1b", "interleaved", "zb-h1"
// Throws dtensor::Error naming the accepted values.
Schedule schedule_from_name(const std::string& name);

// Micro-batches whose activations stage `stage` (0-based) holds at its peak; see the top of this file.
double micro_batches_in_flight(Schedule s, int stages, int micro_batches, int virtual_stages, int stage);

// One micro-batch through a stage: forward, the backward's input gradients (B) and weight
// gradients (W), in µs.
struct StageTimes {
  double f_us = 0, b_us = 0, w_us = 0;
  double total() const { return f_us + b_us + w_us; }
};

// The schedule's step from its slowest stage's times (see the top of this file): busy = m t, the bubble, the
// sends on the critical path, and step = busy + bubble + once + sends.
struct ScheduleTimes {
  double busy_us = 0, bubble_us = 0, sends_us = 0, step_us = 0;
  double bubble_fraction() const { return busy_us + bubble_us > 0 ? bubble_us / (busy_us + bubble_us) : 0; }
};
ScheduleTimes schedule_times(Schedule s, int stages, int micro_batches, int virtual_stages, const StageTimes& slowest,
                             double once_us, double p2p_us);

// Layers per stage minimizing the slowest stage's time under the memory limit, then, among the
// partitions as fast, the longest optimizer update (the step takes the slowest stage's micro-batches
// and the longest update). Stage i with n layers takes fixed_us + n * layer_us a micro-batch and
// fixed_once_us + n * layer_once_us a step, and needs fixed_bytes + n * layer_bytes; it holds
// min_layers to max_layers. Returns the counts (summing to `layers`). Greedy water-filling, exact
// for each min-max: each layer goes where the stage it lengthens ends least (ties: where it needs
// the least memory, then the later stage). Throws dtensor::Error naming each stage's most layers and
// why when no partition fits.
struct StageModel {
  double fixed_us = 0, layer_us = 0;
  double fixed_once_us = 0, layer_once_us = 0;
  double fixed_bytes = 0, layer_bytes = 0;
  int min_layers = 1, max_layers = 1 << 30;
};
std::vector<int> balance_layers(const std::vector<StageModel>& stages, int layers, double limit_bytes);

}  // namespace dtensor::planner
