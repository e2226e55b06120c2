// The process launcher behind `dtensor launch`: starts N ranks of one command on this machine and
// watches them until all have ended.
//
// Each rank is fork/exec'ed (PATH lookup for the command) with the launcher's environment plus
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE   (RANK == LOCAL_RANK: one machine)
//   DTENSOR_STORE=file:<dir>                         (a fresh temporary directory, removed at the
//   end)
//   MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port>  (torch.distributed's env:// rendezvous, as
//   torchrun --standalone gives it; only when neither is set already)
// and its stdin, stdout and stderr inherited. Each rank runs in its own process group, so signals
// reach everything it starts; a rank also gets SIGKILL if the launcher dies (PR_SET_PDEATHSIG).
//
// With max_restarts > 0 a rank that exits non-zero or by a signal is started again (same rank, same
// store, DTENSOR_RESTART_COUNT=k for its k-th restart, as torchrun's TORCHELASTIC_RESTART_COUNT),
// up to max_restarts times per rank; the launcher prints "dtensor launch: rank 2 killed by signal 9;
// restarting it (1 of 3)". An elastic run (dtensor train --elastic) lets the restarted rank rejoin
// (dtensor/collectives/membership.h). Only a failure with no restart left ends the job as below.
//
// When a rank exits non-zero or by a signal, the launcher prints
//   "dtensor launch: rank 2 exited with code 1"   or   "dtensor launch: rank 2 killed by signal 9"
// to stderr, lets the other ranks run on for `failure_grace` (so they can report the failure
// themselves; default 0), then sends them SIGTERM and, after `kill_grace`, SIGKILL. The same
// happens at the overall `timeout` and when the launcher gets SIGINT or SIGTERM.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace dtensor::tools {

// Most ranks one launcher starts on this machine (each is a process with its own address space).
inline constexpr int kMaxLocalRanks = 1024;

struct LaunchOptions {
  int nprocs = 1;                    // ranks to start, 1 to kMaxLocalRanks
  std::vector<std::string> command;  // argv; command[0] is looked up in PATH
  // Overall wall-clock limit for the job; zero: none.
  std::chrono::milliseconds timeout{0};
  // After the first rank fails: how long the others may still run before they are terminated.
  std::chrono::milliseconds failure_grace{0};
  // Between SIGTERM and SIGKILL when terminating ranks.
  std::chrono::milliseconds kill_grace{std::chrono::seconds(5)};
  // Extra environment variables for every rank (set after the launcher's own ones, so they win).
  std::vector<std::pair<std::string, std::string>> env;
  // Parent of the fresh store directory; empty: $TMPDIR, else /tmp.
  std::string tmp_root;
  // Print nothing on stderr (failures are still in the result).
  bool quiet = false;
  // Restarts of a failed rank's process, per rank (0: a failure ends the job).
  int max_restarts = 0;
};

// How one rank ended.
struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  int exit_code = -1;       // when it exited; -1 when killed by a signal
  int signal = 0;           // the signal that killed it; 0 when it exited
  bool terminated = false;  // the launcher sent it SIGTERM/SIGKILL (after a failure or timeout)
  int restarts = 0;         // times its process was started again (exit_code, signal: the last one's)
  bool ok() const { return exit_code == 0; }
};

struct LaunchResult {
  std::vector<RankExit> ranks;  // indexed by rank
  int first_failed = -1;        // the rank whose failure ended the job; -1 if none
  bool timed_out = false;       // the overall timeout expired
  bool interrupted = false;     // the launcher got SIGINT or SIGTERM
  // 0 when every rank exited 0; else the first failed rank's exit code, or 128 + its signal;
  // 124 on timeout; 130 / 143 when interrupted by SIGINT / SIGTERM; 127 when the command could not
  // be started.
  int status = 0;
};

// Starts the ranks and waits for all of them; see the file comment. Throws dtensor::Error for
// nprocs outside 1..kMaxLocalRanks, a negative max_restarts or an empty command, and when the store directory or a process
// cannot be created (ranks already started are killed first).
LaunchResult run_ranks(const LaunchOptions& options);

// run_ranks(options).status.
int launch(const LaunchOptions& options);

}  // namespace dtensor::tools
