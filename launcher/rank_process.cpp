#include "rank_process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <stdexcept>

#include "base/env.hpp"
#include "base/text.hpp"

namespace axon_launch {
namespace {

// A line longer than this is written out in pieces, each tagged and ended
// with a newline, rather than buffered whole: a rank that never ends its
// line must not grow the launcher without bound (README says so).
constexpr std::size_t kMaxLine = 1 << 20;

// The descriptor limit the launcher started with, restored for the ranks.
rlimit g_original_fd_limit{};
bool g_fd_limit_raised = false;

// At most this much of one rank's stream is read per drain(): a rank that
// writes without pause (`yes`) must not keep the supervisor from its
// signals and the other ranks (found by a review: SIGTERM went unheeded).
constexpr int kReadsPerDrain = 4;

[[noreturn]] void child_fail(const char* what, const std::string& detail) {
  std::string line = std::string("axon-launch: ") + what + detail + ": " + std::strerror(errno);
  if (errno == ENOEXEC) {
    // A script with no #! line: a shell would run it with /bin/sh, exec does
    // not, and "Exec format error" alone does not say what to do.
    line += " (it is neither a program for this machine nor a script that starts with #!: add a line "
            "such as #!/bin/sh at its top, or name its interpreter before it, e.g. axon-launch -n N sh " + detail + ")";
  } else if (errno == ENOENT) {
    // The program was found (resolve_program): what is missing is its #!
    // interpreter, and "No such file or directory" alone pointed at the
    // script (a review).
    char head[256] = {};
    const int fd = ::open(detail.c_str(), O_RDONLY | O_CLOEXEC);
    const ssize_t got = fd >= 0 ? ::read(fd, head, sizeof(head) - 1) : -1;
    if (fd >= 0) ::close(fd);
    if (got > 2 && head[0] == '#' && head[1] == '!') {
      std::string interpreter(head + 2, static_cast<std::size_t>(got) - 2);
      interpreter = interpreter.substr(0, interpreter.find('\n'));
      if (!interpreter.empty() && interpreter.back() == '\r') {
        // Windows line endings: the kernel looks for "sh\r", and a \r in the
        // message sent the cursor back over it (diff review).
        interpreter.pop_back();
        line += " (its #! line, #!" + interpreter +
                ", ends in a carriage return: the script has Windows line endings; convert it, e.g. with "
                "dos2unix or sed -i 's/\\r$//')";
      } else {
        line += " (its interpreter, #!" + interpreter + ", was not found)";
      }
    }
  }
  line += "\n";
  write_all(STDERR_FILENO, line.data(), line.size());
  ::_exit(127);
}

// Runs in the child between fork and exec; never returns.
[[noreturn]] void become_rank(int rank, const std::string& program_path,
                              const std::vector<std::string>& command, const RankEnvironment& env,
                              int out_fd, int err_fd, pid_t launcher, const sigset_t& child_mask) {
  ::setpgid(0, 0);  // Ctrl-C reaches the launcher only; it forwards signals
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
  ::signal(SIGPIPE, SIG_DFL);
  ::signal(SIGXFSZ, SIG_DFL);  // ignored by the launcher only; exec would keep it ignored
  if (g_fd_limit_raised) ::setrlimit(RLIMIT_NOFILE, &g_original_fd_limit);
  ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);

  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  if (out_fd >= 0 && ::dup2(out_fd, STDOUT_FILENO) < 0) child_fail("cannot redirect stdout", "");
  if (err_fd >= 0 && ::dup2(err_fd, STDERR_FILENO) < 0) child_fail("cannot redirect stderr", "");

  const std::string n = std::to_string(env.world_size);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", n.c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
  // The arena is the one descriptor the rank inherits on purpose.
  if (::fcntl(env.arena_fd, F_SETFD, 0) != 0) child_fail("cannot pass on the arena's descriptor", "");
  ::setenv("AXON_ARENA_FD", std::to_string(env.arena_fd).c_str(), 1);
  ::setenv("AXON_ARENA_BYTES", std::to_string(env.arena_bytes).c_str(), 1);
  const std::string restarts = std::to_string(env.restart_count);
  ::setenv("AXON_RESTART_COUNT", restarts.c_str(), 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", restarts.c_str(), 1);
  // The launcher prefixes each line itself; the logger then leaves its own prefix out.
  if (out_fd >= 0) ::setenv("AXON_TAG_OUTPUT", "1", 1); else ::unsetenv("AXON_TAG_OUTPUT");
  if (env.timeout_s) {
    // Every digit: the ranks' deadline is the one given, not a rounding of it.
    ::setenv("AXON_TIMEOUT", axonml::distributed::shortest_text(*env.timeout_s).c_str(), 1);
  }

  // torch.distributed's default env:// rendezvous; a user's own values win,
  // but not a port an outer axon-launch chose (this launcher run inside one
  // of its ranks): that is the outer job's store, and the inner job's ranks
  // would meet it (found by a review of a nested axon-launch). The launcher
  // marks the port it chose in AXON_LAUNCH_MASTER_PORT to tell them apart.
  const char* inherited = std::getenv("MASTER_PORT");
  const char* outer = std::getenv("AXON_LAUNCH_MASTER_PORT");
  const bool outer_jobs = inherited != nullptr && outer != nullptr && std::string(inherited) == outer;
  if (env.master_port == 0 && outer_jobs) {
    // No port of its own (none could be had): better none, which PyTorch
    // reports, than the outer job's (found by a review).
    ::unsetenv("MASTER_PORT");
    ::unsetenv("AXON_LAUNCH_MASTER_PORT");
  }
  if (env.master_port != 0) {
    const std::string port = std::to_string(env.master_port);
    // Empty counts as unset (README; env::text gives none for it):
    // `MASTER_PORT= axon-launch ...` reached the ranks empty, and
    // torch.distributed failed on it (a review).
    namespace env = axonml::distributed::env;
    ::setenv("MASTER_ADDR", "127.0.0.1", env::text("MASTER_ADDR") ? 0 : 1);
    ::setenv("MASTER_PORT", port.c_str(), outer_jobs || !env::text("MASTER_PORT") ? 1 : 0);
    if (port == std::getenv("MASTER_PORT")) {
      ::setenv("AXON_LAUNCH_MASTER_PORT", port.c_str(), 1);
    } else {
      ::unsetenv("AXON_LAUNCH_MASTER_PORT");
    }
  }

  if (env.placement && !apply_placement((*env.placement)[static_cast<std::size_t>(rank)])) {
    child_fail("cannot bind rank ", std::to_string(rank) + " to cpus " +
                                        (*env.placement)[static_cast<std::size_t>(rank)].cpu_list);
  }

  std::vector<char*> argv;
  for (const auto& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execv(program_path.c_str(), argv.data());
  child_fail("cannot run ", program_path);
}

}  // namespace

void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  g_original_fd_limit = limit;
  limit.rlim_cur = limit.rlim_max;
  g_fd_limit_raised = ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

OutputStream::OutputStream(int read_fd, int target_fd, std::string prefix)
    : fd_(read_fd), target_(target_fd), prefix_(std::move(prefix)) {}

OutputStream::OutputStream(OutputStream&& other) noexcept
    : fd_(other.fd_), target_(other.target_), prefix_(std::move(other.prefix_)),
      pending_(std::move(other.pending_)), cut_at_limit_(other.cut_at_limit_) {
  other.fd_ = -1;
}

OutputStream::~OutputStream() { close(); }

void OutputStream::write_out(std::string lines) { relay().write(std::move(lines)); }

// Each line tagged and whole. The launcher is the only writer of its
// outputs, so the lines of one read go out in one write: a write per line
// (and moving the rest of the buffer after each) made a rank printing short
// lines fast cost the launcher a core.
void OutputStream::drain() {
  char buffer[16 << 10];
  for (int reads = 0; reads < kReadsPerDrain && fd_ >= 0; ++reads) {
    // Nobody reads the target any more: the rank writing there gets
    // SIGPIPE, as writing to that pipe itself (`axon-launch ... | head`
    // ends like `yes | head`), instead of the launcher copying into the void.
    if (relay().gone()) {
      pending_.clear();
      close();
      return;
    }
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close();
      return;
    }
    if (n == 0) {
      close();
      return;
    }
    pending_.append(buffer, static_cast<std::size_t>(n));
    std::string lines;
    std::size_t start = 0;
    // Whole lines of up to kMaxLine bytes; a longer one in pieces of
    // kMaxLine, also when its end came in the same read as the piece that
    // took it past the limit (found by a review: a 2 MiB line came out as
    // 1 MiB and 1 MiB + 103 bytes).
    // A line of exactly k MiB ends right after its last piece: its newline
    // is not a line of its own (a review saw an empty tagged line there).
    for (;;) {
      if (cut_at_limit_ && start < pending_.size()) {
        cut_at_limit_ = false;
        if (pending_[start] == '\n') ++start;
        continue;
      }
      const std::size_t newline = pending_.find('\n', start);
      if (newline != std::string::npos && newline - start <= kMaxLine) {
        lines += prefix_;
        lines.append(pending_, start, newline + 1 - start);
        start = newline + 1;
      } else if (pending_.size() - start >= kMaxLine) {
        lines += prefix_;
        lines.append(pending_, start, kMaxLine);
        lines += '\n';
        start += kMaxLine;
        cut_at_limit_ = true;
      } else {
        break;
      }
    }
    pending_.erase(0, start);
    write_out(std::move(lines));
  }
}

void OutputStream::close() {
  if (fd_ < 0) return;
  if (!pending_.empty()) write_out(prefix_ + pending_ + "\n");
  pending_.clear();
  ::close(fd_);
  fd_ = -1;
}

RankProcess spawn_rank(int rank, const std::string& program_path,
                       const std::vector<std::string>& command, const RankEnvironment& env,
                       bool tag_output, const sigset_t& child_mask) {
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (tag_output) {
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      const int err = errno;
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
        if (fd >= 0) ::close(fd);
      }
      throw std::runtime_error("cannot create the output pipes of rank " + std::to_string(rank) + ": " +
                               std::strerror(err) +
                               (err == EMFILE || err == ENFILE
                                    ? " (tagging output takes two pipes a rank: raise ulimit -n, or pass "
                                      "--no-tag-output)"
                                    : ""));
    }
  }
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw std::runtime_error("cannot fork rank " + std::to_string(rank) + ": " + std::strerror(err) +
                             (err == EAGAIN ? " (the limit on processes, ulimit -u, or the machine's own)" : ""));
  }
  if (pid == 0) {
    become_rank(rank, program_path, command, env, out_pipe[1], err_pipe[1], launcher, child_mask);
  }
  ::setpgid(pid, pid);  // also here, so that signals sent before the child runs reach its group

  RankProcess process;
  process.rank = rank;
  process.pid = pid;
  process.running = true;
  if (tag_output) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    for (int fd : {out_pipe[0], err_pipe[0]}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    process.streams.emplace_back(out_pipe[0], STDOUT_FILENO, prefix);
    process.streams.emplace_back(err_pipe[0], STDERR_FILENO, prefix);
  }
  return process;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace axon_launch
