// axon-launch: starts the ranks of one job on this machine.
//
// 1. parse the command line (options.cpp) and find the program (exit 127 if none);
// 2. create the job's arena in /dev/shm (job_arena.cpp);
// 3. fork one child per rank with its environment (rank_process.cpp);
// 4. supervise them until all have ended (supervisor.cpp).
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "axonml/distributed/error.hpp"
#include "job_arena.hpp"
#include "options.hpp"
#include "rank_process.hpp"
#include "shm/arena_layout.hpp"
#include "supervisor.hpp"

namespace {

using namespace axon_launch;

// AXON_SLOT_BYTES (tests shrink the slots to reach the chunked paths).
std::size_t slot_bytes_from_environment() {
  const char* value = std::getenv("AXON_SLOT_BYTES");
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(value, &end, 10);
  if (*end != '\0' || bytes < 64 || bytes > (1ULL << 30)) {
    std::cerr << "axon-launch: AXON_SLOT_BYTES=" << value
              << " is not a number of bytes in 64..1073741824\n";
    std::exit(kExitBadArguments);
  }
  return static_cast<std::size_t>(bytes);
}

int launch(const LaunchOptions& options) {
  std::string why;
  const auto program = resolve_program(options.command.front(), why);
  if (!program) {
    std::cerr << "axon-launch: cannot run " << options.command.front() << ": " << why << "\n";
    return kExitNoProgram;
  }
  const std::size_t arena_bytes = options.arena_mb
                                      ? options.arena_mb << 20
                                      : axonml::distributed::shm::default_arena_bytes(options.world_size);
  const std::size_t slot_bytes = slot_bytes_from_environment();

  // Signals arrive through a signalfd read by the supervisor's poll loop;
  // the ranks start with the mask we had.
  // A shell starts background jobs with SIGINT ignored, and an ignored signal
  // never reaches a signalfd: take SIGINT and SIGTERM back (SIGHUP stays
  // ignored under nohup).
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
  sigset_t original;
  sigprocmask(SIG_BLOCK, &handled, &original);
  const int signal_fd = ::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    std::cerr << "axon-launch: signalfd failed: " << std::strerror(errno) << "\n";
    return kExitSetupFailed;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor
  raise_fd_limit();

  try {
    JobArena arena(options.world_size, arena_bytes, slot_bytes);
    const RankEnvironment env{options.world_size, arena.name(), arena.bytes(), options.timeout_s,
                              free_local_port()};
    std::vector<RankProcess> ranks;
    ranks.reserve(static_cast<std::size_t>(options.world_size));
    try {
      for (int r = 0; r < options.world_size; ++r) {
        ranks.push_back(spawn_rank(r, *program, options.command, env, options.tag_output, original));
      }
    } catch (const std::exception& e) {
      std::cerr << "axon-launch: " << e.what() << "; stopping the " << ranks.size()
                << " ranks already started\n";
      for (const auto& r : ranks) ::kill(-r.pid, SIGKILL);
      return kExitSetupFailed;  // the arena's destructor removes its name
    }
    SupervisorTimes times;
    const double timeout_s = options.timeout_s ? *options.timeout_s : 300.0;
    times.attach_deadline = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    return Supervisor(arena, ranks, signal_fd, times).run();
  } catch (const axonml::distributed::InvalidArgument& e) {
    std::cerr << "axon-launch: " << e.what() << "\n";
    return kExitBadArguments;
  } catch (const std::exception& e) {
    std::cerr << "axon-launch: " << e.what() << "\n";
    return kExitSetupFailed;
  }
}

}  // namespace

int main(int argc, char** argv) { return launch(parse_options(argc, argv)); }
