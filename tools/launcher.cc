#include "tools/launcher.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "dtensor/core/compute_threads.h"
#include "dtensor/core/error.h"

extern char** environ;

namespace dtensor::tools {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupt = 0;

void on_interrupt(int sig) { g_interrupt = sig; }

// Installs SIGINT/SIGTERM handlers for the lifetime of the launch and restores the old ones.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupt = 0;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

void say(const LaunchOptions& o, const std::string& msg) {
  if (o.quiet) return;
  std::string line = "dtensor launch: " + msg + "\n";
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

std::string make_store_dir(const LaunchOptions& o) {
  std::string root = o.tmp_root;
  if (root.empty()) {
    const char* t = getenv("TMPDIR");
    root = t && *t ? t : "/tmp";
  }
  std::string templ = root + "/dtensor-launch-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    DT_FAIL("dtensor launch: cannot create a store directory under ", root, ": ", strerror(errno));
  }
  return std::string(buf.data());
}

// The environment of one rank: the launcher's, minus the variables we set, plus ours.
std::vector<std::string> rank_env(const LaunchOptions& o, int rank, const std::string& store, int restart) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(o.nprocs)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(o.nprocs)},
      {"DTENSOR_STORE", "file:" + store},   {"DTENSOR_RESTART_COUNT", std::to_string(restart)},
  };
  // Compute threads per rank (dtensor/core/compute_threads.h): ranks share the cores, as torchrun's
  // OMP_NUM_THREADS does; the user's own setting is passed through untouched.
  if (compute_threads_from_env() == 0) {
    const std::string n = std::to_string(threads_per_rank(o.nprocs));
    ours.push_back({"OMP_NUM_THREADS", n});
    ours.push_back({"OPENBLAS_NUM_THREADS", n});
  }
  for (const auto& kv : o.env) ours.push_back(kv);
  std::set<std::string> names;
  for (const auto& kv : ours) names.insert(kv.first);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    if (!names.count(name)) env.push_back(entry);
  }
  // Later duplicates win: drop earlier entries of a name set twice in `ours`.
  std::vector<std::string> tail;
  std::set<std::string> done;
  for (auto it = ours.rbegin(); it != ours.rend(); ++it) {
    if (done.insert(it->first).second) tail.push_back(it->first + "=" + it->second);
  }
  env.insert(env.end(), tail.rbegin(), tail.rend());
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Forks and execs one rank. Returns its pid, or -1 with *exec_errno set when exec failed.
pid_t spawn(const LaunchOptions& o, int rank, const std::string& store, int restart, int* exec_errno) {
  std::vector<std::string> argv_s = o.command;
  std::vector<std::string> env_s = rank_env(o, rank, store, restart);
  std::vector<char*> argv = c_strings(argv_s);
  std::vector<char*> envp = c_strings(env_s);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    DT_FAIL("dtensor launch: pipe: ", strerror(errno));
  }
  const pid_t parent = getpid();
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    DT_FAIL("dtensor launch: fork: ", strerror(err));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here on.
    close(fds[0]);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGXFSZ, SIGCHLD}) sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = write(fds[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so that kill(-pid) works at once
  close(fds[1]);
  int err = 0;
  ssize_t n;
  do {
    n = read(fds[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(fds[0]);
  if (n == static_cast<ssize_t>(sizeof(err))) {
    *exec_errno = err;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return -1;
  }
  return pid;
}

std::string describe_exit(const RankExit& r) {
  if (r.signal != 0) {
    return "rank " + std::to_string(r.rank) + " killed by signal " + std::to_string(r.signal) +
           " (" + strsignal(r.signal) + ")";
  }
  return "rank " + std::to_string(r.rank) + " exited with code " + std::to_string(r.exit_code);
}

}  // namespace

// torch.distributed's env:// rendezvous (MASTER_ADDR, MASTER_PORT), as torchrun --standalone sets
// it, so that a script which also starts torch's process group runs under `dtensor launch` as under
// torchrun. The user's own values pass through. The port is one the kernel reports free now; a
// process that takes it before rank 0 binds would make torch's init fail with its own error.
void add_torch_rendezvous(LaunchOptions* o) {
  for (const auto& kv : o->env) {
    if (kv.first == "MASTER_ADDR" || kv.first == "MASTER_PORT") return;
  }
  if (getenv("MASTER_ADDR") != nullptr || getenv("MASTER_PORT") != nullptr) return;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;  // torch is then told nothing, as before; dtensor's own store needs no port
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    o->env.insert(o->env.begin(), {{"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", std::to_string(ntohs(addr.sin_port))}});
  }
  close(fd);
}

LaunchResult run_ranks(const LaunchOptions& options) {
  LaunchOptions o = options;
  add_torch_rendezvous(&o);
  DT_CHECK(o.nprocs >= 1 && o.nprocs <= kMaxLocalRanks, "dtensor launch: -n ", o.nprocs, "; accepted: 1 to ",
           kMaxLocalRanks);
  DT_CHECK(!o.command.empty(), "dtensor launch: no command to run");
  DT_CHECK(o.max_restarts >= 0, "dtensor launch: --max-restarts ", o.max_restarts, "; accepted: 0 or more");

  LaunchResult result;
  result.ranks.resize(o.nprocs);
  const std::string store = make_store_dir(o);
  InterruptGuard guard;

  std::vector<bool> running(o.nprocs, false);
  int alive = 0;
  bool terminating = false;
  bool killed = false;
  Clock::time_point term_time{};

  auto signal_running = [&](int sig) {
    for (int r = 0; r < o.nprocs; ++r) {
      if (running[r]) {
        kill(-result.ranks[r].pid, sig);
        // A stopped rank (SIGSTOP, a debugger) acts on SIGTERM only once continued.
        if (sig == SIGTERM) kill(-result.ranks[r].pid, SIGCONT);
        result.ranks[r].terminated = true;
      }
    }
  };
  auto start_termination = [&] {
    if (terminating) return;
    terminating = true;
    term_time = Clock::now();
    signal_running(SIGTERM);
  };

  // Start.
  try {
    for (int r = 0; r < o.nprocs; ++r) {
      result.ranks[r].rank = r;
      int exec_errno = 0;
      pid_t pid = spawn(o, r, store, 0, &exec_errno);
      if (pid < 0) {
        say(o, "cannot execute '" + o.command[0] + "': " + strerror(exec_errno));
        result.ranks[r].exit_code = 127;
        result.first_failed = r;
        result.status = 127;
        break;
      }
      result.ranks[r].pid = pid;
      running[r] = true;
      ++alive;
    }
  } catch (...) {
    signal_running(SIGKILL);
    for (int r = 0; r < o.nprocs; ++r) {
      if (running[r]) waitpid(result.ranks[r].pid, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(store, ec);
    throw;
  }
  if (result.first_failed >= 0) start_termination();

  // Watch.
  const auto start = Clock::now();
  Clock::time_point failure_time{};
  while (alive > 0) {
    for (int r = 0; r < o.nprocs; ++r) {
      if (!running[r]) continue;
      int st = 0;
      pid_t got = waitpid(result.ranks[r].pid, &st, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      running[r] = false;
      --alive;
      RankExit& x = result.ranks[r];
      if (got < 0) {
        x.exit_code = 127;  // lost track of it (ECHILD): count as a failure
      } else if (WIFEXITED(st)) {
        x.exit_code = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        x.signal = WTERMSIG(st);
      }
      if (x.ok() || x.terminated) continue;
      if (!terminating && x.restarts < o.max_restarts) {
        int exec_errno = 0;
        pid_t pid = spawn(o, r, store, x.restarts + 1, &exec_errno);
        if (pid > 0) {
          ++x.restarts;
          say(o, describe_exit(x) + "; restarting it (" + std::to_string(x.restarts) + " of " +
                     std::to_string(o.max_restarts) + ")");
          x.pid = pid;
          x.exit_code = -1;
          x.signal = 0;
          running[r] = true;
          ++alive;
          continue;
        }
        say(o, "cannot restart rank " + std::to_string(r) + ": " + strerror(exec_errno));
      }
      say(o, describe_exit(x));
      if (result.first_failed < 0) {
        result.first_failed = r;
        result.status = x.signal != 0 ? 128 + x.signal : x.exit_code;
        failure_time = Clock::now();
        if (alive > 0 && o.failure_grace.count() > 0) {
          say(o, "waiting up to " + std::to_string(o.failure_grace.count()) +
                     " ms for the other ranks before terminating them");
        }
      }
    }
    if (alive == 0) break;
    const auto now = Clock::now();
    if (!terminating) {
      if (g_interrupt != 0) {
        result.interrupted = true;
        if (result.first_failed < 0) result.status = 128 + g_interrupt;
        say(o, std::string("interrupted by signal ") + std::to_string(g_interrupt) +
                   "; terminating the ranks");
        start_termination();
      } else if (o.timeout.count() > 0 && now - start >= o.timeout) {
        result.timed_out = true;
        if (result.first_failed < 0) result.status = 124;
        say(o, "timeout after " + std::to_string(o.timeout.count()) + " ms; terminating the ranks");
        start_termination();
      } else if (result.first_failed >= 0 && now - failure_time >= o.failure_grace) {
        say(o, "terminating the other ranks");
        start_termination();
      }
    } else if (!killed && now - term_time >= o.kill_grace) {
      killed = true;
      signal_running(SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  std::error_code ec;
  std::filesystem::remove_all(store, ec);
  return result;
}

int launch(const LaunchOptions& options) { return run_ranks(options).status; }

}  // namespace dtensor::tools
