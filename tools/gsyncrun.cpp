// gsyncrun: a single-host launcher for gsync programs (like mpirun / torchrun on one machine).
//
//   gsyncrun -n N [options] [--] PROGRAM [ARGS...]
//
// Starts N copies ("ranks") of PROGRAM. Each rank inherits gsyncrun's environment, minus variables
// that other launchers use for rank detection (RANK, WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_*), plus
// GSYNC_RANK, GSYNC_WORLD_SIZE, GSYNC_LOCAL_RANK, GSYNC_LOCAL_WORLD_SIZE, GSYNC_MASTER_ADDR and
// GSYNC_MASTER_PORT (a free TCP port unless one is given) and the job key (a fresh random secret per
// job unless GSYNC_JOB_KEY gives one: gsync authenticates every connection with it), passed as an
// inherited memory file named by GSYNC_JOB_KEY_FD, never in the ranks' environment (a
// GSYNC_JOB_KEY_FILE given is passed on instead). The ranks' stdout and stderr are read
// through pipes and re-emitted line by line on gsyncrun's stdout and stderr, each line prefixed with
// "[rank] " by default. As soon as one rank fails (non-zero exit or killed by a signal), the job is
// torn down: the other ranks get SIGTERM and, after a grace period, SIGKILL; gsyncrun then exits with
// the first failing rank's status. SIGINT/SIGTERM/SIGHUP sent to gsyncrun are forwarded to the ranks.
//
// All ranks are placed in one process group of their own, so that helper processes they start are
// terminated together with them; when every rank has exited, processes left behind in that group are
// terminated too. On Linux each rank also gets PR_SET_PDEATHSIG(SIGKILL), so no rank outlives a
// gsyncrun that is itself SIGKILLed.
//
// Self-contained: POSIX + C++20 standard library only, no gsync headers.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gsync/core/error.hpp"  // excluded_exit_status
#include "gsync/detail/posix_shm.hpp"  // shm_name

#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char** environ;

namespace {

using steady = std::chrono::steady_clock;

constexpr int exit_launcher_error = 1;
constexpr int exit_usage = 2;
constexpr int exit_timeout = 124;
constexpr int exit_exec_failure = 127;

/// Largest number of ranks accepted by -n (a sanity bound; every rank costs two pipes).
constexpr long max_ranks = 65536;
/// A partial line longer than this is emitted (with a newline appended) instead of growing forever.
constexpr std::size_t max_partial_line = 1 << 20;
/// Size of one read from a rank's pipe.
constexpr std::size_t read_chunk = std::size_t{64} * 1024;
/// How long to keep draining output pipes after the whole process group has been SIGKILLed.
constexpr double final_drain_s = 1.0;

/// Variables removed from every rank's environment because other launchers' rank detection would
/// pick them up.
constexpr std::string_view removed_variables[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
};

/// Variables gsyncrun sets itself for every rank; -x may not set them.
constexpr std::string_view launcher_variables[] = {
    "GSYNC_RANK",
    "GSYNC_WORLD_SIZE",
    "GSYNC_LOCAL_RANK",
    "GSYNC_LOCAL_WORLD_SIZE",
    "GSYNC_MASTER_ADDR",
    "GSYNC_MASTER_PORT",
};

constexpr const char* usage_text =
    "usage: gsyncrun -n N [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Launch N local ranks of PROGRAM. Each rank gets gsyncrun's environment plus GSYNC_RANK,\n"
    "GSYNC_WORLD_SIZE, GSYNC_LOCAL_RANK, GSYNC_LOCAL_WORLD_SIZE, GSYNC_MASTER_ADDR and\n"
    "GSYNC_MASTER_PORT; RANK, WORLD_SIZE, LOCAL_RANK, OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} and\n"
    "SLURM_{PROCID,NTASKS,LOCALID} are removed. Ranks read stdin from /dev/null.\n"
    "\n"
    "options:\n"
    "  -n, --np N          number of ranks to launch (required, N >= 1)\n"
    "  --master-addr A     rendezvous address (default: $GSYNC_MASTER_ADDR, else 127.0.0.1)\n"
    "  --port P            rendezvous port (default: $GSYNC_MASTER_PORT, else a free port)\n"
    "  -x NAME=VALUE       set NAME=VALUE in every rank's environment (repeatable);\n"
    "                      -x NAME passes gsyncrun's own value of NAME\n"
    "  --tag-output        prefix every output line with \"[rank] \" (the default)\n"
    "  --no-tag-output     do not prefix output lines\n"
    "  --grace-s S         seconds between SIGTERM and SIGKILL when terminating ranks (default 3)\n"
    "  --elastic           a rank killed by a signal, or one that exits with status 75 (a shrink\n"
    "                      excluded it: gsync::excluded_exit_status), does not end the job: the\n"
    "                      others may go on without it (communicator::shrink); exit 0 when every\n"
    "                      other rank that exited did so with status 0 and at least one did\n"
    "  --timeout-s S       terminate the job after S seconds and exit 124 (default: no limit)\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "Option parsing stops at \"--\" or at the first non-option argument (PROGRAM).\n"
    "When a rank exits non-zero or is killed by a signal, the other ranks are sent SIGTERM and,\n"
    "after the grace period, SIGKILL. SIGINT, SIGTERM and SIGHUP are forwarded to all ranks.\n"
    "\n"
    "exit status: 0 if every rank exited 0; else the first failing rank's exit status (128+S if it\n"
    "was killed by signal S); 124 on --timeout-s; 128+S if gsyncrun received signal S; 127 from a\n"
    "rank whose PROGRAM cannot be executed; 2 on bad usage; 1 on an internal launcher error.\n";

/// Parsed command line.
struct options {
  long nranks = 0;
  std::optional<int> port;
  std::optional<std::string> master_addr;
  std::vector<std::string> extra_env;  ///< NAME=VALUE entries from -x, in order.
  bool tag_output = true;
  double grace_s = 3.0;
  bool elastic = false;  ///< --elastic
  double timeout_s = 0.0;  ///< 0: no timeout.
  std::string timeout_text;  ///< --timeout-s exactly as given, for the timeout message.
  std::vector<std::string> program;  ///< PROGRAM followed by its arguments.
};

/// Thrown-free error channel for option parsing: a message for stderr, printed with the usage.
struct usage_error {
  std::string message;
};

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

/// Writes all of `data` to `fd`, retrying on EINTR and waiting for POLLOUT on EAGAIN. Returns
/// false on any other error (e.g. EPIPE when the reader went away).
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, -1) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

/// Prints one "gsyncrun: ..." diagnostic line to stderr.
void diag(const std::string& message) {
  std::string line = "gsyncrun: " + message + "\n";
  (void)write_all(STDERR_FILENO, line);
}

/// Returns "NAME" for "NAME=VALUE" (or the whole string when it has no '=').
std::string_view env_name(std::string_view entry) {
  auto eq = entry.find('=');
  return eq == std::string_view::npos ? entry : entry.substr(0, eq);
}

/// Parses a whole string as a base-10 integer in [lo, hi].
std::optional<long> parse_long(const std::string& text, long lo, long hi) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

/// Parses a whole string as a finite, non-negative number of seconds.
std::optional<double> parse_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

/// Converts a number of seconds into a steady_clock duration.
steady::duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
}

/// Describes a signal as "9 (Killed)".
std::string describe_signal(int signo) {
  const char* name = ::strsignal(signo);
  return std::to_string(signo) + " (" + (name != nullptr ? name : "unknown signal") + ")";
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

/// Parses argv into `options`. Returns std::nullopt after printing help for -h/--help; fills
/// `error` and returns std::nullopt on bad usage.
std::optional<options> parse_command_line(int argc, char** argv, std::optional<usage_error>& error) {
  options opt;
  bool have_n = false;
  int i = 1;
  auto fail = [&](std::string message) -> std::optional<options> {
    error = usage_error{std::move(message)};
    return std::nullopt;
  };

  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // first non-option: PROGRAM

    // Split "--name=value" and "-Xvalue" forms into name and attached value.
    std::string name = arg;
    std::optional<std::string> attached;
    if (arg.rfind("--", 0) == 0) {
      auto eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        attached = arg.substr(eq + 1);
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      attached = arg.substr(2);
    }

    auto value = [&](std::string& out) -> bool {
      if (attached) {
        out = *attached;
        return true;
      }
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    auto no_value = [&]() { return !attached.has_value(); };

    std::string v;
    if (name == "-h" || name == "--help") {
      if (!no_value()) return fail("option " + name + " takes no value");
      (void)write_all(STDOUT_FILENO, usage_text);
      return std::nullopt;
    } else if (name == "-n" || name == "--np") {
      if (!value(v)) return fail("option " + name + " needs a value");
      auto n = parse_long(v, 1, max_ranks);
      if (!n) {
        return fail("invalid number of ranks '" + v + "' (must be an integer from 1 to " +
                    std::to_string(max_ranks) + ")");
      }
      opt.nranks = *n;
      have_n = true;
    } else if (name == "--port") {
      if (!value(v)) return fail("option --port needs a value");
      auto p = parse_long(v, 1, 65535);
      if (!p) return fail("invalid port '" + v + "' (must be 1..65535)");
      opt.port = static_cast<int>(*p);
    } else if (name == "--master-addr") {
      if (!value(v)) return fail("option --master-addr needs a value");
      if (v.empty()) return fail("--master-addr must not be empty");
      opt.master_addr = v;
    } else if (name == "-x") {
      if (!value(v)) return fail("option -x needs NAME=VALUE");
      std::string var(env_name(v));
      if (var.empty()) return fail("invalid -x '" + v + "' (expected NAME=VALUE)");
      if (std::find(std::begin(launcher_variables), std::end(launcher_variables), var) !=
          std::end(launcher_variables)) {
        std::string hint = var == "GSYNC_MASTER_ADDR"   ? " (use --master-addr)"
                           : var == "GSYNC_MASTER_PORT" ? " (use --port)"
                                                        : "";
        return fail("-x " + var + ": gsyncrun sets this variable itself" + hint);
      }
      // A value on the command line is shown to every user of the host (ps, /proc/PID/cmdline).
      if (var == "GSYNC_JOB_KEY" && v.find('=') != std::string::npos)
        return fail("-x GSYNC_JOB_KEY=...: the key would be visible to every user of this host in ps; give it in a file "
                    "(-x GSYNC_JOB_KEY_FILE=PATH, mode 0600) or export GSYNC_JOB_KEY and pass -x GSYNC_JOB_KEY");
      if (v.find('=') == std::string::npos) {
        const char* current = std::getenv(var.c_str());
        if (current == nullptr) return fail("-x " + var + ": not set in gsyncrun's environment");
        v = var + "=" + current;
      }
      opt.extra_env.push_back(v);
    } else if (name == "--tag-output") {
      if (!no_value()) return fail("option --tag-output takes no value");
      opt.tag_output = true;
    } else if (name == "--no-tag-output") {
      if (!no_value()) return fail("option --no-tag-output takes no value");
      opt.tag_output = false;
    } else if (name == "--elastic") {
      if (!no_value()) return fail("option --elastic takes no value");
      opt.elastic = true;
    } else if (name == "--grace-s") {
      if (!value(v)) return fail("option --grace-s needs a value");
      auto s = parse_seconds(v);
      if (!s) return fail("invalid --grace-s '" + v + "' (must be a number of seconds >= 0)");
      opt.grace_s = *s;
    } else if (name == "--timeout-s") {
      if (!value(v)) return fail("option --timeout-s needs a value");
      auto s = parse_seconds(v);
      if (!s) return fail("invalid --timeout-s '" + v + "' (must be a number of seconds >= 0)");
      opt.timeout_s = *s;
      opt.timeout_text = v;
    } else {
      return fail("unknown option '" + arg + "'");
    }
  }

  if (!have_n) return fail("missing -n N (number of ranks)");
  if (i >= argc) return fail("no program given");
  for (; i < argc; ++i) opt.program.emplace_back(argv[i]);
  return opt;
}

// ---------------------------------------------------------------------------------------------
// Process-wide setup
// ---------------------------------------------------------------------------------------------

/// Makes sure fds 0, 1 and 2 are open (on /dev/null if they were closed), so that pipes created
/// later never land on them.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int nul = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (nul >= 0 && nul != fd) {
      ::dup2(nul, fd);
      ::close(nul);
    }
  }
}

/// Sets FD_CLOEXEC on every inherited descriptor above 2, so ranks only inherit 0/1/2.
void mark_inherited_fds_cloexec() {
  std::vector<int> fds;
  if (DIR* dir = ::opendir("/dev/fd")) {
    int own = ::dirfd(dir);
    while (dirent* e = ::readdir(dir)) {
      char* end = nullptr;
      long fd = std::strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && fd > 2 && fd != own) fds.push_back(static_cast<int>(fd));
    }
    ::closedir(dir);
  } else {
    long max_fd = ::sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536) max_fd = 65536;
    for (int fd = 3; fd < max_fd; ++fd) fds.push_back(fd);
  }
  for (int fd : fds) {
    int flags = ::fcntl(fd, F_GETFD);
    if (flags != -1 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

/// True when a TCP socket can bind 127.0.0.1:`port` now (port 0: any; `*got` receives the port).
bool can_bind(int port, int* got = nullptr) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof(addr);
  bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (ok && got) *got = ntohs(addr.sin_port);
  ::close(s);
  return ok;
}

/// A free port for the store. Chosen at random below the kernel's ephemeral range (read from
/// /proc/sys/net/ipv4/ip_local_port_range), so that no outgoing connection can take it between
/// this check and rank 0's bind; falls back to a kernel-chosen port.
std::optional<int> pick_free_port() {
  int lo = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &lo) != 1) lo = 32768;
    std::fclose(f);
  }
  const int base = 10000;
  if (lo > base + 1000) {
    std::uint64_t x = static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (int i = 0; i < 64; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const int port = base + static_cast<int>((x >> 33) % static_cast<std::uint64_t>(lo - base));
      if (can_bind(port)) return port;
    }
  }
  int port = 0;
  if (can_bind(0, &port)) return port;
  return std::nullopt;
}

/// Splits PATH and returns the candidate files execvp would try for `program`.
std::vector<std::string> exec_candidates(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos || program.empty()) return {program};
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";  // an empty PATH entry means the current directory
    out.push_back(dir + "/" + program);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Signals: a self-pipe carries signal numbers from the handler to the main poll loop.
// ---------------------------------------------------------------------------------------------

int g_signal_pipe_write = -1;

/// Async-signal-safe handler: forwards the signal number through the self-pipe.
void on_signal(int signo) {
  int saved_errno = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

/// Signals gsyncrun forwards to the ranks (unless they were ignored when gsyncrun started).
constexpr int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};

/// Signal dispositions and mask as gsyncrun found them, restored in each rank before exec.
struct saved_signal_state {
  sigset_t mask;
  struct sigaction sigpipe_action;
  std::vector<int> handled;  ///< signals we installed on_signal for
};

/// Creates the self-pipe, installs the handlers and ignores SIGPIPE. Returns the pipe's read end.
int install_signal_handlers(saved_signal_state& saved) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  g_signal_pipe_write = fds[1];

  ::sigprocmask(SIG_SETMASK, nullptr, &saved.mask);

  struct sigaction act{};
  act.sa_handler = on_signal;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &act, nullptr);
  saved.handled.push_back(SIGCHLD);

  act.sa_flags = 0;
  for (int sig : forwarded_signals) {
    struct sigaction old{};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // e.g. nohup / background job: keep ignoring
    ::sigaction(sig, &act, nullptr);
    saved.handled.push_back(sig);
  }

  struct sigaction ign{};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGPIPE, &ign, &saved.sigpipe_action);
  return fds[0];
}

// ---------------------------------------------------------------------------------------------
// The job
// ---------------------------------------------------------------------------------------------

/// One of a rank's two output pipes, with the not-yet-terminated line read from it.
struct output_stream {
  int fd = -1;          ///< read end (non-blocking), -1 once EOF was seen
  int dest_fd = -1;     ///< where complete lines go (1 or 2)
  std::string prefix;   ///< "[rank] " (used when tagging output)
  std::string partial;  ///< bytes after the last newline
};

/// State of one launched rank.
struct rank_state {
  pid_t pid = -1;
  bool exited = false;  ///< exit observed (the zombie is kept until the end, see reap_all)
  int wait_code = 0;    ///< CLD_EXITED / CLD_KILLED / CLD_DUMPED
  int wait_status = 0;  ///< exit status or signal number
  output_stream out;
  output_stream err;
};

/// Everything a forked rank needs to exec; prepared in the parent before forking, because the
/// child shares the parent's memory until it execs (vfork) and must not allocate.
struct exec_plan {
  std::vector<std::string> candidates;
  std::vector<char*> argv;
  std::vector<std::vector<char*>> sh_argv;  ///< per candidate: "sh FILE ARGS..." for a script without "#!"
  const saved_signal_state* signals = nullptr;
  rlimit original_nofile{};
  bool restore_nofile = false;
  int dev_null = -1;
  pid_t launcher_pid = 0;
};

/// Runs in the child of vfork: sets up the rank's process group, stdio and signal state, then
/// execs PROGRAM. Never returns; exits 127 with a message if PROGRAM cannot be executed. It runs
/// in the parent's memory until the exec, so it only makes system calls and reads the plan: no
/// allocation, no lock, no change to memory the parent uses afterwards.
[[noreturn]] void exec_rank(const exec_plan& plan, pid_t pgid, int out_w, int err_w, char** envp) {
  // Handlers installed by gsyncrun must not run in the child; SIGPIPE back to what we inherited.
  // (Signal dispositions are the child's own: vfork does not share them.)
  for (int sig : plan.signals->handled) {
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
  ::sigaction(SIGPIPE, &plan.signals->sigpipe_action, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.signals->mask, nullptr);

  ::setpgid(0, pgid);
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.launcher_pid) ::_exit(exit_launcher_error);  // launcher already gone
#endif

  if (::dup2(plan.dev_null, STDIN_FILENO) < 0 || ::dup2(out_w, STDOUT_FILENO) < 0 ||
      ::dup2(err_w, STDERR_FILENO) < 0) {
    ::_exit(exit_launcher_error);
  }
  if (plan.restore_nofile) ::setrlimit(RLIMIT_NOFILE, &plan.original_nofile);

  int error = ENOENT;
  bool saw_eacces = false;
  for (std::size_t c = 0; c < plan.candidates.size(); ++c) {
    ::execve(plan.candidates[c].c_str(), plan.argv.data(), envp);
    int e = errno;
    if (e == ENOEXEC) {
      // A script without "#!": run it with /bin/sh, as execvp does.
      ::execve("/bin/sh", plan.sh_argv[c].data(), envp);
      e = errno;
    }
    error = e;
    if (e == EACCES) {
      saw_eacces = true;
    } else if (e != ENOENT && e != ENOTDIR && e != ENAMETOOLONG && e != ELOOP) {
      break;  // a real error on an existing file: report it, as execvp does
    }
  }
  if (saw_eacces && (error == ENOENT || error == ENOTDIR)) error = EACCES;
  const char* parts[] = {"gsyncrun: cannot execute '", plan.argv[0], "': ", std::strerror(error), "\n"};
  for (const char* part : parts) (void)write_all(STDERR_FILENO, part);
  ::_exit(exit_exec_failure);
}

/// The launched job: ranks, output forwarding and the termination state machine.
class job {
 public:
  job(const options& opt, int signal_fd) : opt_(opt), signal_fd_(signal_fd) {}

  /// Forks and execs all ranks. On a fork/pipe failure, reports it and starts terminating the
  /// ranks already launched; run() then finishes the job.
  void launch(exec_plan& plan, const std::vector<std::vector<std::string>>& envs) {
    ranks_.resize(static_cast<std::size_t>(opt_.nranks));
    start_ = steady::now();

    // Block our signals while forking so that no handler runs in a child before it resets them.
    sigset_t block, previous;
    sigemptyset(&block);
    for (int sig : plan.signals->handled) sigaddset(&block, sig);
    ::sigprocmask(SIG_BLOCK, &block, &previous);

    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      if (!spawn(r, plan, envs[r])) {
        ranks_.resize(r);
        if (exit_code_ == 0) exit_code_ = exit_launcher_error;
        begin_termination(SIGTERM);
        break;
      }
    }
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  }

  /// Runs the poll loop until every rank has exited and its output is drained; returns the exit
  /// status gsyncrun should exit with.
  int run() {
    std::vector<pollfd> fds;
    std::vector<output_stream*> streams;
    std::vector<char> buffer(read_chunk);
    bool check_children = true;

    while (true) {
      if (check_children) {
        collect_exits();
        check_children = false;
      }
      handle_deadlines();
      if (finished()) break;

      fds.clear();
      streams.clear();
      fds.push_back({signal_fd_, POLLIN, 0});
      streams.push_back(nullptr);
      for (rank_state& rank : ranks_) {
        for (output_stream* s : {&rank.out, &rank.err}) {
          if (s->fd < 0) continue;
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
      }

      int timeout_ms = poll_timeout_ms();
      int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        diag(std::string("poll: ") + std::strerror(errno));
        if (exit_code_ == 0) exit_code_ = exit_launcher_error;
        begin_termination(SIGKILL);
        check_children = true;
        continue;
      }
      if (n == 0) {
        check_children = true;  // periodic safety net
        continue;
      }
      if (fds[0].revents != 0) check_children |= drain_signal_pipe();
      for (std::size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents != 0) read_once(*streams[k], buffer);
      }
    }
    reap_all();
    if (opt_.elastic && exit_code_ == 0) {
      bool any = false;
      for (const rank_state& rank : ranks_) any |= rank.wait_code == CLD_EXITED && rank.wait_status == 0;
      if (!any) {
        diag("--elastic: no rank exited with status 0");
        return exit_launcher_error;
      }
    }
    return exit_code_;
  }

 private:
  /// Creates the rank's pipes and forks it. Returns false (after a diagnostic) on failure.
  bool spawn(std::size_t r, exec_plan& plan, const std::vector<std::string>& env) {
    int out_pipe[2];
    int err_pipe[2];
    auto pipe_failed = [&] {
      int e = errno;
      diag("cannot create pipe for rank " + std::to_string(r) + ": " + std::strerror(e) +
           (e == EMFILE || e == ENFILE ? " (each rank needs two; raise the limit with ulimit -n)" : ""));
    };
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      pipe_failed();
      return false;
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      pipe_failed();
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      return false;
    }

    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    // vfork: the child borrows this process's memory until it execs, so starting a rank costs no
    // copy of the page tables (benchmarks/results/scale/README.md). exec_rank is written for that.
    pid_t pid = ::vfork();
    if (pid < 0) {
      diag("cannot fork rank " + std::to_string(r) + ": " + std::strerror(errno));
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
      return false;
    }
    if (pid == 0) exec_rank(plan, pgid_, out_pipe[1], err_pipe[1], envp.data());

    // Parent. Set the group here too (whichever of parent/child runs first wins the race).
    if (pgid_ == 0) pgid_ = pid;
    ::setpgid(pid, pgid_);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    for (int fd : {out_pipe[0], err_pipe[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);

    rank_state& rank = ranks_[r];
    rank.pid = pid;
    std::string prefix = "[" + std::to_string(r) + "] ";
    rank.out = output_stream{out_pipe[0], STDOUT_FILENO, prefix, {}};
    rank.err = output_stream{err_pipe[0], STDERR_FILENO, prefix, {}};
    return true;
  }

  /// Reads pending signal numbers from the self-pipe and acts on them. Returns true if SIGCHLD
  /// was among them.
  bool drain_signal_pipe() {
    bool child = false;
    unsigned char sigs[64];
    while (true) {
      ssize_t n = ::read(signal_fd_, sigs, sizeof(sigs));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t k = 0; k < n; ++k) {
        if (sigs[k] == SIGCHLD) {
          child = true;
        } else {
          on_forwarded_signal(sigs[k]);
        }
      }
    }
    return child;
  }

  /// SIGINT/SIGTERM/SIGHUP received: forward it to all ranks; a second one escalates to SIGKILL.
  void on_forwarded_signal(int signo) {
    if (!terminating_) {
      if (exit_code_ == 0) exit_code_ = 128 + signo;
      std::size_t running = running_count();
      diag("received signal " + describe_signal(signo) + "; forwarding it to " +
           std::to_string(running) + (running == 1 ? " rank" : " ranks"));
      begin_termination(signo);
    } else if (!killed_) {
      diag("received signal " + describe_signal(signo) + " again; killing all ranks");
      kill_now();
    }
  }

  /// Observes exits with waitid(WNOWAIT): the zombies stay around until reap_all(), so neither the
  /// ranks' pids nor their process group id can be reused while we may still signal them.
  void collect_exits() {
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      rank_state& rank = ranks_[r];
      if (rank.exited) continue;
      siginfo_t info{};
      info.si_pid = 0;
      int rc;
      do {
        rc = ::waitid(P_PID, static_cast<id_t>(rank.pid), &info, WEXITED | WNOHANG | WNOWAIT);
      } while (rc < 0 && errno == EINTR);
      if (rc < 0) {
        // ECHILD should not happen (we never reap early); treat the rank as lost.
        rank.exited = true;
        rank.wait_code = CLD_KILLED;
        rank.wait_status = SIGKILL;
      } else if (info.si_pid == 0) {
        continue;  // still running
      } else {
        rank.exited = true;
        rank.wait_code = info.si_code;
        rank.wait_status = info.si_status;
      }
      // Everything the rank wrote is in its pipes now: emit it before any diagnostic about it.
      drain_available(rank.out);
      drain_available(rank.err);
      on_rank_exit(r);
    }
  }

  /// Starts tearing down the job if rank `r` failed and nothing else did before.
  void on_rank_exit(std::size_t r) {
    const rank_state& rank = ranks_[r];
    bool failed = rank.wait_code != CLD_EXITED || rank.wait_status != 0;
    if (!failed || terminating_) return;
    if (opt_.elastic && rank.wait_code != CLD_EXITED) {  // lost: the others may go on without it
      diag("rank " + std::to_string(r) + " (pid " + std::to_string(rank.pid) + ") killed by signal " + describe_signal(rank.wait_status) +
           "; --elastic: the other ranks go on");
      return;
    }
    if (opt_.elastic && rank.wait_status == gsync::excluded_exit_status) {  // the survivors went on without it
      diag("rank " + std::to_string(r) + " (pid " + std::to_string(rank.pid) + ") exited with status " + std::to_string(rank.wait_status) +
           " (excluded by a shrink); --elastic: the other ranks go on");
      return;
    }

    std::string what;
    if (rank.wait_code == CLD_EXITED) {
      exit_code_ = rank.wait_status;
      what = "exited with status " + std::to_string(rank.wait_status);
    } else {
      exit_code_ = 128 + rank.wait_status;
      what = "killed by signal " + describe_signal(rank.wait_status);
      if (rank.wait_code == CLD_DUMPED) what += " (core dumped)";
    }
    std::size_t others = running_count();
    std::string message = "rank " + std::to_string(r) + " (pid " + std::to_string(rank.pid) + ") " + what;
    if (others > 0) {
      message += "; terminating the other " + std::to_string(others) + (others == 1 ? " rank" : " ranks");
    }
    diag(message);
    begin_termination(SIGTERM);
  }

  /// Sends `sig` to the job's process group and to every rank not yet seen to exit.
  void signal_job(int sig) {
    if (pgid_ > 0) ::kill(-pgid_, sig);
    for (const rank_state& rank : ranks_) {
      if (!rank.exited && rank.pid > 0) ::kill(rank.pid, sig);
    }
  }

  /// Sends `sig` (normally SIGTERM) to all ranks and arms the SIGKILL deadline.
  void begin_termination(int sig) {
    if (terminating_) return;
    terminating_ = true;
    if (sig == SIGKILL) {
      kill_now();
      return;
    }
    signal_job(sig);
    kill_deadline_ = steady::now() + seconds_to_duration(opt_.grace_s);
  }

  /// SIGKILLs everything in the job right away.
  void kill_now() {
    terminating_ = true;
    killed_ = true;
    signal_job(SIGKILL);
  }

  /// Acts on the timeout, the SIGKILL grace deadline and the post-exit cleanup deadlines.
  void handle_deadlines() {
    auto now = steady::now();
    if (!terminating_ && opt_.timeout_s > 0 && now >= start_ + seconds_to_duration(opt_.timeout_s)) {
      exit_code_ = exit_timeout;
      diag("job timed out after " + opt_.timeout_text + " s");
      begin_termination(SIGTERM);
    }
    if (terminating_ && !killed_ && now >= kill_deadline_) {
      std::size_t running = running_count();
      if (running > 0) {
        diag("sending SIGKILL to " + std::to_string(running) + (running == 1 ? " rank" : " ranks") +
             " still running after the " + format_seconds(opt_.grace_s) + " s grace period");
      }
      kill_now();
    }

    if (running_count() > 0) return;
    // Every rank has exited. Terminate whatever they left behind in their process group, wait for
    // the output pipes to reach EOF (held open by such leftovers, at most), then give up on them.
    if (!cleanup_started_) {
      cleanup_started_ = true;
      if (!killed_ && pgid_ > 0) ::kill(-pgid_, SIGTERM);
      cleanup_kill_deadline_ = killed_ || !any_stream_open() ? now : now + seconds_to_duration(opt_.grace_s);
    }
    if (!cleanup_killed_ && (now >= cleanup_kill_deadline_ || !any_stream_open())) {
      cleanup_killed_ = true;
      if (pgid_ > 0) ::kill(-pgid_, SIGKILL);
      drain_deadline_ = now + seconds_to_duration(final_drain_s);
    }
  }

  /// True once every rank has exited and output is drained (or its drain deadline passed).
  bool finished() {
    if (running_count() > 0 || !cleanup_killed_) return false;
    if (!any_stream_open()) return true;
    if (steady::now() < drain_deadline_) return false;
    // Pipes still held open by processes outside the job's group: flush what we have and stop.
    for (rank_state& rank : ranks_) {
      for (output_stream* s : {&rank.out, &rank.err}) {
        if (s->fd >= 0) close_stream(*s);
      }
    }
    return true;
  }

  /// The poll timeout: time until the next deadline, capped at one second.
  int poll_timeout_ms() const {
    auto now = steady::now();
    auto next = now + std::chrono::seconds(1);
    if (!terminating_ && opt_.timeout_s > 0) next = std::min(next, start_ + seconds_to_duration(opt_.timeout_s));
    if (terminating_ && !killed_) next = std::min(next, kill_deadline_);
    if (cleanup_started_ && !cleanup_killed_) next = std::min(next, cleanup_kill_deadline_);
    if (cleanup_killed_) next = std::min(next, drain_deadline_);
    if (next <= now) return 0;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::clamp<long long>(ms, 0, 1000));
  }

  /// Reads one chunk from a ready stream and forwards its complete lines.
  void read_once(output_stream& s, std::vector<char>& buffer) {
    while (true) {
      ssize_t n = ::read(s.fd, buffer.data(), buffer.size());
      if (n > 0) {
        consume(s, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
        return;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_stream(s);  // EOF or a read error
      return;
    }
  }

  /// Reads everything currently available from a stream (used when its rank has exited).
  void drain_available(output_stream& s) {
    std::vector<char> buffer(read_chunk);
    while (s.fd >= 0) {
      ssize_t n = ::read(s.fd, buffer.data(), buffer.size());
      if (n > 0) {
        consume(s, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_stream(s);
    }
  }

  /// Appends data to the stream's partial line and emits every complete line.
  void consume(output_stream& s, std::string_view data) {
    s.partial.append(data);
    std::size_t last_newline = s.partial.rfind('\n');
    if (last_newline != std::string::npos) {
      emit(s, std::string_view(s.partial).substr(0, last_newline + 1));
      s.partial.erase(0, last_newline + 1);
    }
    if (s.partial.size() >= max_partial_line) {
      s.partial.push_back('\n');
      emit(s, s.partial);
      s.partial.clear();
    }
  }

  /// Writes complete lines (text ending in '\n') to the stream's destination, tagging each one.
  void emit(const output_stream& s, std::string_view lines) {
    bool& broken = s.dest_fd == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
    if (broken) return;  // reader went away: discard, but keep draining so ranks never block
    if (!opt_.tag_output) {
      broken = !write_all(s.dest_fd, lines);
      return;
    }
    const std::string& prefix = s.prefix;
    std::string out;
    out.reserve(lines.size() + prefix.size() * 8);
    std::size_t start = 0;
    while (start < lines.size()) {
      std::size_t end = lines.find('\n', start);
      out.append(prefix);
      out.append(lines.substr(start, end - start + 1));
      start = end + 1;
    }
    broken = !write_all(s.dest_fd, out);
  }

  /// Flushes a stream's partial last line (adding a newline) and closes it.
  void close_stream(output_stream& s) {
    if (!s.partial.empty()) {
      s.partial.push_back('\n');
      emit(s, s.partial);
      s.partial.clear();
    }
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
  }

  /// Number of ranks not yet seen to exit.
  std::size_t running_count() const {
    return static_cast<std::size_t>(
        std::count_if(ranks_.begin(), ranks_.end(), [](const rank_state& r) { return !r.exited; }));
  }

  /// True while any output pipe is still open.
  bool any_stream_open() const {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const rank_state& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
  }

  /// Formats seconds without trailing noise ("3", "0.5").
  static std::string format_seconds(double s) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", s);
    return buf;
  }

  /// Reaps every rank's zombie (their exits were already observed with WNOWAIT).
  void reap_all() {
    for (const rank_state& rank : ranks_) {
      if (rank.pid <= 0) continue;
      while (::waitpid(rank.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    remove_shm_leftovers();
  }

  /// A rank's shared-memory segment (/dev/shm/gsync-PID-...) is unlinked as soon as its peers have
  /// mapped it; a rank killed during setup can leave it behind. Every rank has exited now, so any
  /// segment named after one of them is garbage.
  void remove_shm_leftovers() const {
    DIR* d = ::opendir("/dev/shm");
    if (d == nullptr) return;
    std::vector<std::string> doomed;
    while (dirent* e = ::readdir(d)) {
      for (const rank_state& rank : ranks_) {
        if (rank.pid <= 0) continue;
        const std::string prefix = gsync::detail::shm_name(rank.pid, "").substr(1);  // /dev/shm lists names without the leading slash
        if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) doomed.push_back(std::string("/dev/shm/") + e->d_name);
      }
    }
    ::closedir(d);
    for (const std::string& f : doomed)
      if (::unlink(f.c_str()) == 0) diag("removed " + f + ", left by a rank that died during setup");
  }

  const options& opt_;
  int signal_fd_;
  std::vector<rank_state> ranks_;
  pid_t pgid_ = 0;
  int exit_code_ = 0;
  steady::time_point start_{};
  bool terminating_ = false;
  bool killed_ = false;
  steady::time_point kill_deadline_{};
  bool cleanup_started_ = false;
  bool cleanup_killed_ = false;
  steady::time_point cleanup_kill_deadline_{};
  steady::time_point drain_deadline_{};
  bool stdout_broken_ = false;
  bool stderr_broken_ = false;
};

/// 32 random bytes from the kernel (getrandom(2)), as 64 hex digits.
std::string random_job_key() {
  unsigned char b[32];
  std::size_t got = 0;
  while (got < sizeof b) {
    const ssize_t r = ::getrandom(b + got, sizeof b - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(r);
  }
  static const char hex[] = "0123456789abcdef";
  std::string k;
  for (unsigned char c : b) {
    k.push_back(hex[c >> 4]);
    k.push_back(hex[c & 15]);
  }
  return k;
}

/// Builds every rank's environment: gsyncrun's own, minus removed/overridden variables, plus -x
/// entries, plus the GSYNC_* launcher variables.
/// `key_fd`: the memory file holding the job key (see below), or -1 when the ranks read a key file.
std::vector<std::vector<std::string>> build_environments(const options& opt, const std::string& addr, int port, int& key_fd) {
  std::vector<std::string> base;
  auto overridden = [&](std::string_view name) {
    if (std::find(std::begin(removed_variables), std::end(removed_variables), name) != std::end(removed_variables))
      return true;
    if (std::find(std::begin(launcher_variables), std::end(launcher_variables), name) !=
        std::end(launcher_variables))
      return true;
    return std::any_of(opt.extra_env.begin(), opt.extra_env.end(),
                       [&](const std::string& e) { return env_name(e) == name; });
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (!overridden(env_name(entry))) base.emplace_back(entry);
  }
  // -x entries; a later -x for the same NAME wins.
  for (std::size_t k = 0; k < opt.extra_env.size(); ++k) {
    std::string_view name = env_name(opt.extra_env[k]);
    bool later = std::any_of(opt.extra_env.begin() + static_cast<std::ptrdiff_t>(k) + 1, opt.extra_env.end(),
                             [&](const std::string& e) { return env_name(e) == name; });
    if (!later) base.push_back(opt.extra_env[k]);
  }
  // A secret per job, so that only this job's ranks can connect to each other (gsync's job-key
  // handshake); one given in the environment or with -x is kept. It reaches the ranks through an
  // inherited memory file (GSYNC_JOB_KEY_FD), not their environment, which their own children
  // (data loaders, shells) inherit and /proc shows: gsync reads the file once and closes it.
  // A key file (GSYNC_JOB_KEY_FILE) is left to the ranks.
  std::string key;
  bool has_file = false;
  std::erase_if(base, [&](const std::string& e) {
    const auto name = env_name(e);
    has_file |= name == "GSYNC_JOB_KEY_FILE" && e.size() > name.size() + 1;
    if (name != "GSYNC_JOB_KEY" && name != "GSYNC_JOB_KEY_FD") return false;
    if (name == "GSYNC_JOB_KEY") key = e.substr(name.size() + 1);
    return true;
  });
  key_fd = -1;
  if (!has_file) {
    if (key.empty()) key = random_job_key();
    key_fd = ::memfd_create("gsync-job-key", 0);  // inherited by the ranks across exec
    if (key_fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    if (!write_all(key_fd, key.c_str())) throw std::runtime_error(std::string("writing the job key: ") + std::strerror(errno));
    base.push_back("GSYNC_JOB_KEY_FD=" + std::to_string(key_fd));
  }
  base.push_back("GSYNC_WORLD_SIZE=" + std::to_string(opt.nranks));
  base.push_back("GSYNC_LOCAL_WORLD_SIZE=" + std::to_string(opt.nranks));
  base.push_back("GSYNC_MASTER_ADDR=" + addr);
  base.push_back("GSYNC_MASTER_PORT=" + std::to_string(port));

  std::vector<std::vector<std::string>> envs(static_cast<std::size_t>(opt.nranks), base);
  for (std::size_t r = 0; r < envs.size(); ++r) {
    envs[r].push_back("GSYNC_RANK=" + std::to_string(r));
    envs[r].push_back("GSYNC_LOCAL_RANK=" + std::to_string(r));
  }
  return envs;
}

/// Returns the PATH the ranks will see (-x PATH=... if given, else gsyncrun's, else a default).
std::string effective_path(const options& opt) {
  for (auto it = opt.extra_env.rbegin(); it != opt.extra_env.rend(); ++it) {
    if (env_name(*it) == "PATH") return it->substr(5);
  }
  const char* path = std::getenv("PATH");
  return path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
}

/// Prints a usage error and the usage text to stderr.
int usage_failure(const std::string& message) {
  diag(message);
  (void)write_all(STDERR_FILENO, usage_text);
  return exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds();

  std::optional<usage_error> error;
  std::optional<options> parsed = parse_command_line(argc, argv, error);
  if (!parsed) return error ? usage_failure(error->message) : 0;
  const options& opt = *parsed;

  // Rendezvous address and port.
  std::string addr = "127.0.0.1";
  if (opt.master_addr) {
    addr = *opt.master_addr;
  } else if (const char* env_addr = std::getenv("GSYNC_MASTER_ADDR"); env_addr != nullptr && *env_addr != '\0') {
    addr = env_addr;
  }
  int port = 0;
  if (opt.port) {
    port = *opt.port;
  } else if (const char* env_port = std::getenv("GSYNC_MASTER_PORT"); env_port != nullptr && *env_port != '\0') {
    auto p = parse_long(env_port, 1, 65535);
    if (!p) return usage_failure(std::string("invalid GSYNC_MASTER_PORT '") + env_port + "' (must be 1..65535)");
    port = static_cast<int>(*p);
  } else {
    auto p = pick_free_port();
    if (!p) {
      diag(std::string("cannot pick a free TCP port on 127.0.0.1: ") + std::strerror(errno));
      return exit_launcher_error;
    }
    port = *p;
  }

  mark_inherited_fds_cloexec();

  saved_signal_state signals;
  int signal_fd = install_signal_handlers(signals);
  if (signal_fd < 0) {
    diag(std::string("cannot create the signal pipe: ") + std::strerror(errno));
    return exit_launcher_error;
  }

  exec_plan plan;
  plan.signals = &signals;
  plan.launcher_pid = ::getpid();
  plan.dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (plan.dev_null < 0) {
    diag(std::string("cannot open /dev/null: ") + std::strerror(errno));
    return exit_launcher_error;
  }
  plan.candidates = exec_candidates(opt.program[0], effective_path(opt));
  for (const std::string& a : opt.program) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  for (const std::string& file : plan.candidates) {
    std::vector<char*> sh{const_cast<char*>("sh"), const_cast<char*>(file.c_str())};
    sh.insert(sh.end(), plan.argv.begin() + 1, plan.argv.end());  // the arguments and the final null
    plan.sh_argv.push_back(std::move(sh));
  }

  // Two pipes per rank: raise the soft fd limit if needed (ranks get the original limit back).
  if (::getrlimit(RLIMIT_NOFILE, &plan.original_nofile) == 0) {
    rlim_t needed = static_cast<rlim_t>(opt.nranks) * 2 + 64;
    if (plan.original_nofile.rlim_cur != RLIM_INFINITY && plan.original_nofile.rlim_cur < needed) {
      rlimit raised = plan.original_nofile;
      raised.rlim_cur = plan.original_nofile.rlim_max == RLIM_INFINITY
                            ? needed
                            : std::min<rlim_t>(needed, plan.original_nofile.rlim_max);
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) plan.restore_nofile = true;
    }
  }

  std::vector<std::vector<std::string>> envs;
  int key_fd = -1;
  try {
    envs = build_environments(opt, addr, port, key_fd);
  } catch (const std::exception& e) {
    diag(std::string("cannot pass the job key to the ranks: ") + e.what());
    return exit_launcher_error;
  }

  job j(opt, signal_fd);
  j.launch(plan, envs);
  if (key_fd >= 0) ::close(key_fd);  // every rank holds its own copy: none left here for /proc/PID/fd to show
  return j.run();
}
