// RankProcess: one child of the launcher, and the forwarding of its output.
//
// spawn_rank() forks a child that execs the program with the rank's
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, AXON_ARENA_FD,
// AXON_ARENA_BYTES, AXON_TIMEOUT, AXON_RESTART_COUNT and torchrun's
// TORCHELASTIC_RESTART_COUNT, and from placement.hpp AXON_THREADS_PER_RANK,
// OMP_NUM_THREADS), bound to its cores, in its own process group, with stdin from
// /dev/null and PR_SET_PDEATHSIG(SIGKILL) so that it dies with the launcher.
// The child inherits the arena's descriptor (the only one it inherits).
// With tagged output its stdout and stderr are pipes that the launcher reads
// (OutputStream) and copies to its own stdout and stderr one whole line at a
// time, each prefixed "[rank k] ", so lines of different ranks never mix,
// through their relays (output_relay.hpp), so that a reader that stops
// reading never blocks the launcher.
// Without tagging the child writes straight to the launcher's stdout/stderr.
//
// Thread safety: single-threaded (the launcher's main loop).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "output_relay.hpp"
#include "placement.hpp"

namespace axon_launch {

// One pipe from a child, read into whole prefixed lines.
class OutputStream {
 public:
  OutputStream(int read_fd, int target_fd, std::string prefix);
  ~OutputStream();
  OutputStream(OutputStream&& other) noexcept;
  OutputStream& operator=(OutputStream&&) = delete;
  OutputStream(const OutputStream&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  // Where its lines go: the relay of the launcher's stdout or stderr.
  OutputRelay& relay() const { return OutputRelay::of(target_); }
  // Reads what is available and writes out the complete lines. At end of
  // file writes the unterminated rest as a line of its own and closes.
  void drain();
  // Flushes any partial line and closes (when the launcher stops waiting).
  void close();

 private:
  // Queues on the target's relay; once nobody reads the target any more
  // (the relay is gone), every stream into it closes at its next drain().
  void write_out(std::string lines);

  int fd_;
  int target_;
  std::string prefix_;
  std::string pending_;  // bytes after the last newline seen
  // The last piece written was a line cut at its 1 MiB: a newline right
  // after it ends that line, which is then whole (not an empty line).
  bool cut_at_limit_ = false;
};

struct RankEnvironment {
  int world_size;
  int arena_fd;
  std::size_t arena_bytes;
  std::optional<double> timeout_s;
  int restart_count = 0;  // the attempt: 0, then 1.. after --max-restarts restarts
  // For PyTorch's env:// rendezvous (MASTER_ADDR=127.0.0.1); 0: none found.
  int master_port = 0;
  const std::vector<RankPlacement>* placement = nullptr;  // per rank; null: leave affinity alone
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;                     // waitpid status once !running
  std::vector<OutputStream> streams;  // stdout, stderr (empty without tagging)
};

// Forks and execs rank `rank`. `child_mask` is the signal mask the program
// starts with (the launcher blocks the signals it reads from a signalfd).
// Throws std::runtime_error when the fork or the pipes fail; a child whose
// exec fails prints why and exits 127.
RankProcess spawn_rank(int rank, const std::string& program_path,
                       const std::vector<std::string>& command, const RankEnvironment& env,
                       bool tag_output, const sigset_t& child_mask);

// Two pipes per rank: lifts the soft descriptor limit to the hard one (the
// ranks get the original back).
void raise_fd_limit();

// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status);
// The launcher's exit code for a rank's status: the code, or 128 + signal.
int exit_code_of(int status);

}  // namespace axon_launch
