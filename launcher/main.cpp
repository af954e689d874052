// axon-launch: starts the ranks of one job on this machine.
//
// 1. parse the command line (options.cpp) and find the program (exit 127 if none);
// 2. plan where each rank runs (placement.cpp, once); create the job's arena,
//    an anonymous memfd (job_arena.cpp);
// 3. fork one child per rank with its environment (rank_process.cpp);
// 4. supervise them until all have ended (supervisor.cpp);
// 5. with --max-restarts K, after a failure start again from 2, up to K times.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "job_arena.hpp"
#include "options.hpp"
#include "output_relay.hpp"
#include "placement.hpp"
#include "rank_process.hpp"
#include "reserved_port.hpp"
#include "shm/arena_layout.hpp"
#include "supervisor.hpp"

namespace {

using namespace axon_launch;

// AXON_SLOT_BYTES (tests shrink the slots to reach the chunked paths); 0
// when unset, for the arena's default.
std::size_t slot_bytes_from_environment() {
  try {
    return static_cast<std::size_t>(
        axonml::distributed::env::integer("AXON_SLOT_BYTES", 64, static_cast<long long>(axonml::distributed::shm::kMaxSlotBytes)).value_or(0));
  } catch (const axonml::distributed::InvalidArgument& e) {
    std::cerr << "axon-launch: " << e.what() << "\n";
    std::exit(kExitBadArguments);
  }
}

// AXON_TIMEOUT, which the ranks inherit unless --timeout replaces it: a bad
// value is a bad argument here (exit 2), rather than every rank failing in
// World::init() (found by a review: exit 134 from each rank's terminate).
void check_inherited_timeout(const LaunchOptions& options) {
  if (options.timeout_s) return;
  try {
    (void)axonml::distributed::env::timeout_seconds("AXON_TIMEOUT");
  } catch (const axonml::distributed::InvalidArgument& e) {
    std::cerr << "axon-launch: " << e.what() << " (the ranks would inherit it; --timeout S replaces it)\n";
    std::exit(kExitBadArguments);
  }
}

// MASTER_PORT, which the ranks keep when the user set it: PyTorch's env://
// reads it with int() (a message that names no variable) and the C++
// example with stoi, and 70000 or -5 became another port silently, where
// the README promises a refusal naming the variable (a review). Empty counts
// as unset; an outer axon-launch's port is replaced anyway.
void check_inherited_master_port() {
  try {
    (void)axonml::distributed::env::integer("MASTER_PORT", 1, 65535);
  } catch (const axonml::distributed::InvalidArgument& e) {
    std::cerr << "axon-launch: " << e.what() << " (the ranks would keep it for PyTorch's env:// rendezvous; "
              << "unset it to let axon-launch choose a free port)\n";
    std::exit(kExitBadArguments);
  }
}

// AXON_THREADS_PER_RANK, which the ranks keep when the user set it: read
// only by a program that sizes its compute threads (nn::ComputeThreads), so
// a bad value ran on unreported in the others, or failed there in words
// that named no rank (a review). The range fair_share() accepts.
void check_inherited_threads_per_rank() {
  try {
    (void)axonml::distributed::env::integer("AXON_THREADS_PER_RANK", 1, 1 << 16);
  } catch (const axonml::distributed::InvalidArgument& e) {
    std::cerr << "axon-launch: " << e.what() << " (the ranks would keep it as their compute threads; "
              << "unset it to let axon-launch give each rank its share of the cores)\n";
    std::exit(kExitBadArguments);
  }
}

// Whether a SIGINT/SIGTERM/SIGHUP waits in the signalfd (it arrived after
// the last attempt's supervisor stopped reading). SIGCHLDs are dropped; a
// Ctrl-Z (SIGTSTP not followed by a SIGCONT) stops the launcher here, where
// no rank runs, as the shell expects (it was dropped, and the next attempt
// started; a review).
bool signal_pending(int signal_fd) {
  signalfd_siginfo info{};
  bool pending = false;
  bool stop = false;
  while (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGTSTP || info.ssi_signo == SIGCONT) {
      stop = info.ssi_signo == SIGTSTP;
    } else if (info.ssi_signo != SIGCHLD) {
      pending = true;
    }
  }
  if (stop) ::raise(SIGSTOP);  // a SIGCONT continues it; the next attempt reads that one
  return pending;
}

// Writes out what the relays still hold before the launcher exits, as long
// as their reader takes; a SIGINT, SIGTERM or SIGHUP meanwhile gives up on
// it (a reader that never resumes would keep the launcher forever). After a
// job the launcher got such a signal for, only while the reader reads: a
// second without progress ends it, since that signal already said to end
// (found by a review: a single SIGTERM, as from `timeout` or a scheduler,
// left the launcher waiting for a paused reader).
void finish_output(int signal_fd, bool interrupted) {
  std::optional<std::chrono::milliseconds> idle_limit;
  if (interrupted) idle_limit = std::chrono::seconds(1);
  flush_relays(signal_fd, [signal_fd] { return signal_pending(signal_fd); }, idle_limit);
}

// One attempt: a fresh arena, every rank started, supervised to the end.
Outcome run_attempt(const LaunchOptions& options, const std::string& program,
                    std::size_t arena_bytes, std::size_t slot_bytes, int attempt, int signal_fd,
                    const sigset_t& child_mask, const SupervisorTimes& times,
                    const Placement& placement) {
  // What to change when the arena does not fit: the default arena grows with
  // AXON_SLOT_BYTES, and blaming --arena-mb when none was given misled
  // (found by a review: AXON_SLOT_BYTES=1GiB asked for a smaller --arena-mb).
  const std::string remedy =
      options.arena_mb != 0 || slot_bytes == 0
          ? "choose a smaller --arena-mb"
          : "choose a smaller AXON_SLOT_BYTES (now " + std::to_string(slot_bytes) +
                ": the default arena holds several slots of it per rank), or give --arena-mb";
  JobArena arena(options.world_size, arena_bytes, slot_bytes, remedy);
  const ReservedPort master_port;  // held until the attempt's ranks are gone
  RankEnvironment env{options.world_size, arena.fd(), arena.bytes(), options.timeout_s, attempt,
                      master_port.port()};
  env.placement = &placement.ranks;
  std::vector<RankProcess> ranks;
  ranks.reserve(static_cast<std::size_t>(options.world_size));
  try {
    for (int r = 0; r < options.world_size; ++r) {
      ranks.push_back(spawn_rank(r, program, options.command, env, options.tag_output, child_mask));
    }
  } catch (const std::exception& e) {
    for (const auto& r : ranks) ::kill(-r.pid, SIGKILL);
    // Reaped before the launcher goes on to exit: unreaped, they would be
    // left to init, which in a container may never reap them (found by a
    // review). For at most a few seconds, as the supervisor waits for killed
    // ranks: one stuck in the kernel (D state) may never die.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (const auto& r : ranks) {
      while (::waitpid(r.pid, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
        ::usleep(1000);
      }
    }
    throw std::runtime_error(std::string(e.what()) + "; stopped the " + std::to_string(ranks.size()) +
                             " ranks already started");
  }
  return Supervisor(arena, ranks, signal_fd, times).run();
}

int launch(const LaunchOptions& options) {
  std::string why;
  const auto program = resolve_program(options.command.front(), why);
  if (!program) {
    std::cerr << "axon-launch: cannot run " << options.command.front() << ": " << why << "\n";
    return kExitNoProgram;
  }
  const std::size_t slot_bytes = slot_bytes_from_environment();
  const std::size_t arena_bytes = options.arena_mb
                                      ? options.arena_mb << 20
                                      : axonml::distributed::shm::default_arena_bytes(options.world_size, slot_bytes);
  check_inherited_timeout(options);
  check_inherited_master_port();
  check_inherited_threads_per_rank();

  // Signals arrive through a signalfd read by the supervisor's poll loop;
  // the ranks start with the mask we had.
  // A shell starts background jobs with SIGINT ignored, and an ignored signal
  // never reaches a signalfd: take SIGINT and SIGTERM back (SIGHUP stays
  // ignored under nohup).
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  sigset_t handled;
  sigemptyset(&handled);
  // SIGTSTP (Ctrl-Z) and SIGCONT too: the launcher stops and resumes the
  // ranks with itself (Supervisor::suspend).
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT}) sigaddset(&handled, sig);
  sigset_t original;
  sigprocmask(SIG_BLOCK, &handled, &original);
  const int signal_fd = ::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    std::cerr << "axon-launch: signalfd failed: " << std::strerror(errno) << "\n";
    return kExitSetupFailed;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor
  // Nor an output file at the file size limit (ulimit -f): a relayed write
  // then fails with EFBIG and loses that piece, as on a full disk, where
  // SIGXFSZ killed the launcher without a word (exit 153; a review).
  ::signal(SIGXFSZ, SIG_IGN);
  try {
    OutputRelay::start();
  } catch (const std::exception& e) {
    std::cerr << "axon-launch: cannot start the threads that write its output: " << e.what() << "\n";
    return kExitSetupFailed;
  }
  // What a rank leaves behind when it ends (a background child, a daemon in
  // a session of its own) comes to us rather than to init, so that a failed
  // job's leftovers can be found, stopped by pid and reaped (Supervisor).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  raise_fd_limit();

  Placement placement;
  try {
    placement = plan_placement(options.bind, options.world_size);
  } catch (const std::exception& e) {
    std::cerr << "axon-launch: cannot plan where the ranks run: " << e.what() << "\n";
    return kExitSetupFailed;
  }
  if (!placement.warning.empty()) std::cerr << placement.warning << "\n";
  if (options.verbose) std::cerr << describe(placement);

  SupervisorTimes times;
  times.start_deadline = axonml::distributed::env::timeout_milliseconds(options.start_timeout_s);
  const int attempts = options.max_restarts + 1;
  Outcome outcome;
  bool interrupted = false;  // a SIGINT, SIGTERM or SIGHUP came, in an attempt or between them
  for (int attempt = 0; attempt < attempts; ++attempt) {
    try {
      outcome = run_attempt(options, *program, arena_bytes, slot_bytes, attempt, signal_fd, original,
                            times, placement);
    } catch (const axonml::distributed::InvalidArgument& e) {
      say("axon-launch: " + std::string(e.what()) + "\n");
      finish_output(signal_fd, false);
      return kExitBadArguments;
    } catch (const std::exception& e) {
      say("axon-launch: " + std::string(e.what()) + "\n");
      finish_output(signal_fd, false);
      return kExitSetupFailed;
    }
    if (options.max_restarts == 0) break;
    // One line per attempt, so that a log says what each one did.
    std::string line = "axon-launch: attempt " + std::to_string(attempt + 1) + " of " +
                       std::to_string(attempts) + ": " + outcome.summary + " (exit status " +
                       std::to_string(outcome.exit_code) + ")";
    // Read off the signalfd here, it would no longer cut the exit flush short
    // (found by a review).
    interrupted = outcome.interrupted || signal_pending(signal_fd);
    // A closed output is as final as an interrupt: every attempt would die
    // of SIGPIPE at its first line (found by a review: `| head -1` used up
    // every restart).
    const bool output_gone = OutputRelay::of(STDOUT_FILENO).gone() || OutputRelay::of(STDERR_FILENO).gone();
    const bool restart = outcome.exit_code != 0 && !interrupted && !output_gone && attempt + 1 < attempts;
    if (restart) {
      line += "; restarting every rank with AXON_RESTART_COUNT=" + std::to_string(attempt + 1);
    } else if (outcome.exit_code != 0 && interrupted) {
      line += "; interrupted, so no restart";
    } else if (outcome.exit_code != 0 && output_gone) {
      line += "; nobody reads the job's output any more, so no restart";
    } else if (outcome.exit_code != 0) {
      line += "; no restarts left";
    }
    say(line + "\n");
    if (!restart) break;
  }
  finish_output(signal_fd, interrupted || outcome.interrupted);
  // Said last, straight to stderr (the relays are done): lost output must not
  // pass for the whole of it (a file at ulimit -f was cut short in silence).
  // A job whose output was cut short did not succeed, as `cat` into a full
  // disk does not (a review: it exited 0 after saying so).
  bool output_lost = false;
  for (const auto& [fd, name] : {std::pair{STDOUT_FILENO, "stdout"}, std::pair{STDERR_FILENO, "stderr"}}) {
    const std::string lost = OutputRelay::of(fd).describe_losses();
    if (lost.empty()) continue;
    output_lost = true;
    std::cerr << "axon-launch: " << lost << " to " << name
              << (outcome.exit_code == 0 ? ", so the job's exit status is 1" : "") << "\n";
  }
  return outcome.exit_code == 0 && output_lost ? 1 : outcome.exit_code;
}

// A launcher started with descriptor 0, 1 or 2 closed (`>&-`, some service
// managers) gave those numbers to its own signalfd and eventfds, then wrote
// the ranks' output and its summary into them (a review). /dev/null takes
// each closed one first, as a daemon's start does.
void open_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {  // the lowest free number is fd itself; this only guards it
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  open_standard_descriptors();
  // One malloc arena for the output writer's thread too: its own would
  // reserve 64-128 MiB of address space at a moment that races the job
  // arena's mapping, and under ulimit -v the job then failed at random
  // (a review: 17 of 40 runs). The writer allocates little.
  ::mallopt(M_ARENA_MAX, 1);
  return launch(parse_options(argc, argv));
}
