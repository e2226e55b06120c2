#include "dtensor/collectives/env.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/collectives/gloo_backend.h"

namespace dtensor {
namespace {

struct Lookup {
  std::vector<std::string> missing;    // "RANK (or OMPI_COMM_WORLD_RANK, ...)"
  std::vector<std::string> malformed;  // "RANK='abc' is not an integer"

  // First set variable of `names`; false when none is set.
  bool find(const std::vector<const char*>& names, std::string* name, std::string* value) {
    for (const char* n : names) {
      const char* v = std::getenv(n);
      if (v != nullptr && *v != '\0') {
        *name = n;
        *value = v;
        return true;
      }
    }
    return false;
  }

  void require(const std::vector<const char*>& names, const std::string& hint, std::string* out) {
    std::string name;
    if (!find(names, &name, out)) missing.push_back(alternatives(names, hint));
  }

  void require_int(const std::vector<const char*>& names, int* out) {
    std::string name, value;
    if (!find(names, &name, &value)) {
      missing.push_back(alternatives(names, ""));
    } else if (!absl::SimpleAtoi(value, out)) {
      malformed.push_back(absl::StrCat(name, "='", value, "' is not an integer"));
    }
  }

  void optional_int(const std::vector<const char*>& names, int* out) {
    std::string name, value;
    if (find(names, &name, &value) && !absl::SimpleAtoi(value, out)) {
      malformed.push_back(absl::StrCat(name, "='", value, "' is not an integer"));
    }
  }

  static std::string alternatives(const std::vector<const char*>& names, const std::string& hint) {
    std::string s = names[0];
    if (names.size() > 1) {
      std::vector<std::string> rest(names.begin() + 1, names.end());
      absl::StrAppend(&s, " (or ", absl::StrJoin(rest, ", "), ")");
    }
    if (!hint.empty()) absl::StrAppend(&s, " ", hint);
    return s;
  }
};

// The variables that carry a process's global rank, in the order they are read.
const std::vector<const char*> kRankVariables = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};

std::string getenv_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool under_torchrun() {
  return !getenv_or_empty("TORCHELASTIC_RUN_ID").empty() && !getenv_or_empty("MASTER_ADDR").empty() &&
         !getenv_or_empty("MASTER_PORT").empty();
}

// torchrun sets no DTENSOR_STORE; on one host its ranks share a file store named by what is the
// same for them and differs between jobs (env.h). Empty when not a single-host torchrun job.
std::string torchrun_default_store(const ProcessEnv& env) {
  if (!under_torchrun() || getenv_or_empty("LOCAL_WORLD_SIZE").empty() ||
      env.local_world_size != env.world_size) {
    return "";
  }
  std::string run_id = getenv_or_empty("TORCHELASTIC_RUN_ID");
  // torchrun's id for a job started with --master-port (static rendezvous) is always "none": the
  // agent's pid (every local rank's parent) tells such jobs apart, so a store left by an earlier job
  // that drew the same port is not found and refused.
  if (run_id == "none") absl::StrAppend(&run_id, "-", getppid());
  std::string id = absl::StrCat(run_id, "-", getenv_or_empty("MASTER_PORT"), "-",
                                getenv_or_empty("TORCHELASTIC_RESTART_COUNT"));
  for (char& c : id) {  // --rdzv-id is free text: keep it one path component
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  std::string tmp = getenv_or_empty("TMPDIR");
  return absl::StrCat("file:", tmp.empty() ? "/tmp" : tmp, "/dtensor-store-", id);
}

}  // namespace

bool launched_as_rank() {
  std::string name, value;
  return Lookup().find(kRankVariables, &name, &value);
}

ProcessEnv read_process_env() {
  ProcessEnv env;
  Lookup l;
  l.require_int(kRankVariables, &env.rank);
  l.require_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"},
                &env.world_size);
  l.optional_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"},
                 &env.local_rank);
  l.optional_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"},
                 &env.local_world_size);
  l.optional_int({"DTENSOR_RESTART_COUNT"}, &env.restart);
  std::string name;
  if (!l.find({"DTENSOR_STORE"}, &name, &env.store)) {
    env.store = torchrun_default_store(env);
    if (env.store.empty()) {
      l.missing.push_back(under_torchrun()
                              ? "DTENSOR_STORE (file:/shared/dir or redis://host:port; torchrun across hosts "
                                "needs one all hosts reach, a single-host job defaults to a file store)"
                              : "DTENSOR_STORE (file:/shared/dir or redis://host:port)");
    }
  }
  if (l.missing.empty() && l.malformed.empty()) {
    if (env.world_size < 1) {
      l.malformed.push_back(absl::StrCat("world size ", env.world_size, " must be >= 1"));
    } else if (env.rank < 0 || env.rank >= env.world_size) {
      l.malformed.push_back(
          absl::StrCat("rank ", env.rank, " is outside [0, ", env.world_size, ")"));
    }
    if (env.local_rank < 0) {
      l.malformed.push_back(absl::StrCat("local rank ", env.local_rank, " is negative"));
    }
    if (env.restart < 0) {
      l.malformed.push_back(absl::StrCat("restart count ", env.restart, " is negative"));
    }
    if (env.local_world_size < 1) {
      l.malformed.push_back(
          absl::StrCat("local world size ", env.local_world_size, " must be >= 1"));
    }
  }
  if (!l.missing.empty() || !l.malformed.empty()) {
    std::string msg = "init_backend_from_env: ";
    if (!l.missing.empty()) {
      absl::StrAppend(&msg, "missing environment variable(s): ", absl::StrJoin(l.missing, "; "));
    }
    if (!l.malformed.empty()) {
      absl::StrAppend(&msg, l.missing.empty() ? "" : "; ",
                      "malformed: ", absl::StrJoin(l.malformed, "; "));
    }
    absl::StrAppend(&msg,
                    ". Start the job with `dtensor launch -n N -- CMD ...`, or set them "
                    "(torchrun, mpirun and srun set the rank and world size)");
    throw Error(msg);
  }
  return env;
}

std::shared_ptr<Backend> init_backend_from_env(Timeout timeout) {
  ProcessEnv env = read_process_env();
  return std::make_shared<GlooBackend>(env.rank, env.world_size, env.store, "", timeout, env.restart);
}

}  // namespace dtensor
