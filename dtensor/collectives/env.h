// Starting a rank's backend from the environment a launcher set: `dtensor launch`, torchrun, mpirun
// (Open MPI), Intel MPI / MPICH (PMI) or srun (Slurm).
#pragma once

#include <memory>
#include <string>

#include "dtensor/collectives/process_group.h"

namespace dtensor {

// What a launcher told this process.
struct ProcessEnv {
  int rank = 0;  // global rank, in [0, world_size)
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this host
  int local_world_size = 1;  // processes of this job on this host
  std::string store;         // "file:/dir" or "redis://host:port"
  // How many times the launcher started this rank's process before (dtensor launch --max-restarts
  // sets DTENSOR_RESTART_COUNT): a restarted process joins a world that already started.
  int restart = 0;
};

// Reads, first found wins:
//   rank:             RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID
//   world size:       WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS
//   local rank:       LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID
//                     (default 0)
//   local world size: LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS (default 1)
//   restart:          DTENSOR_RESTART_COUNT (default 0)
//   store:            DTENSOR_STORE; when unset in a single-host torchrun job (TORCHELASTIC_RUN_ID,
//                     MASTER_ADDR and MASTER_PORT set, LOCAL_WORLD_SIZE == WORLD_SIZE):
//                     file:$TMPDIR/dtensor-store-<run id>-<master port>-<restart count> ($TMPDIR
//                     defaults to /tmp; characters other than [A-Za-z0-9._-] become '_'). A store
//                     must be fresh per job: torchrun --standalone draws a new run id; a job
//                     started with --master-port has the id "none", to which the torchrun agent's
//                     pid (the ranks' parent) is added ("none-<pid>"); a fixed --rdzv-id must
//                     differ between jobs that reuse a master port.
// Throws dtensor::Error listing every missing variable (with its alternatives) and every malformed
// one (not an integer, rank outside [0, world_size), negative local rank).
ProcessEnv read_process_env();

// Whether a launcher started this process as a rank: one of the rank variables above is set (and
// not empty). Reads the environment only; never throws.
bool launched_as_rank();

// read_process_env(), then a GlooBackend on that store (a restarted process's: GlooBackend's `restart`) (device address: $DTENSOR_GLOO_HOST, else
// 127.0.0.1), which waits up to `timeout` for all ranks to start. Throws dtensor::Error for a bad
// or incomplete environment, dtensor::CommError when a rank does not start within `timeout` (naming
// it) or the store cannot be reached.
std::shared_ptr<Backend> init_backend_from_env(Timeout timeout = default_timeout());

}  // namespace dtensor
