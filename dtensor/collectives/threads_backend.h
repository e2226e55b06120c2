// In-process backend: one rank per thread, really concurrent. Collectives rendezvous through shared
// memory: each rank publishes its buffers, then every rank computes its own share of the result,
// reading the others' buffers directly. Reductions combine ranks in rank order, so every rank gets
// bit-identical results. Used by the tests, `dtensor explain --run` and the default `dtensor train`.
// Collectives of tensors on a device (CUDA) are staged through host copies (ProcessGroup::staged),
// so single-GPU tests can run several thread ranks on one GPU; point-to-point messages stay on the
// device (p2p_moves: any device).
#pragma once

#include <functional>
#include <memory>

#include "dtensor/collectives/process_group.h"

namespace dtensor {

class ThreadsWorld;

// Creates a world of `world_size` thread ranks; backend(r) is rank r's view (call it from that rank's
// thread). If any rank calls abort(), every pending and later wait in the world throws CommError.
std::shared_ptr<ThreadsWorld> make_threads_world(int world_size);
std::shared_ptr<Backend> threads_backend(const std::shared_ptr<ThreadsWorld>& world, int rank);
void abort_threads_world(ThreadsWorld& world, int rank, const std::string& reason);

// Most thread ranks run_threads starts: each is an OS thread with its own stack, and past a few
// hundred the machine, not the runtime, is what is being tested.
inline constexpr int kMaxThreadRanks = 1024;

// Runs fn(rank's backend) on `world_size` threads (1 to kMaxThreadRanks, else Error) and joins them. If a rank throws, the world is
// aborted (so the other ranks fail fast instead of waiting for their timeout) and, after all threads
// ended, the exception of the first rank that failed is rethrown. A thread the system refuses to
// start aborts the ranks already running and throws Error.
void run_threads(int world_size, const std::function<void(std::shared_ptr<Backend>)>& fn);

}  // namespace dtensor
