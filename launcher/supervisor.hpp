// Supervisor: the launcher's main loop once the ranks run.
//
// One poll() loop watches a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and
// every rank's output pipes. It
//   - forwards output lines (see OutputStream);
//   - removes the arena's /dev/shm name as soon as every rank has attached,
//     or the attach deadline passed, or (no rank failed) a rank ended after
//     attaching, or (one failed) every rank still running has attached, so
//     that late ones find the abort and its reason;
//   - reaps ranks; the first that fails (a signal, or a non-zero exit) while
//     others still run marks the arena aborted with a reason naming it, which
//     wakes every waiter so that the survivors throw PeerFailure; survivors
//     still running after a grace period get SIGTERM, then SIGKILL;
//   - treats a rank that exited 0 without ever attaching as a failure too,
//     once any other rank has attached (it would wait for it until the
//     timeout): "rank 2 exited (status 0) before joining the job (did it
//     call World::init()?)", exit status 1. Ranks that all run without
//     attaching (programs that do not use the library) are left alone;
//   - forwards SIGINT/SIGTERM/SIGHUP to every rank; a second one kills them.
// run() returns the launcher's exit status: 0 when every rank exited 0, else
// the status of the first failed rank (its code, or 128 + signal; 1 for a
// rank that exited 0 before joining).
//
// Thread safety: single-threaded.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "job_arena.hpp"
#include "rank_process.hpp"

namespace axon_launch {

struct SupervisorTimes {
  // How long survivors get to notice the abort and exit by themselves.
  std::chrono::milliseconds abort_grace{2000};
  // How long they get after SIGTERM before SIGKILL.
  std::chrono::milliseconds term_grace{2000};
  // How long to keep forwarding output after the last rank ended (pipes
  // inherited by a rank's own children may stay open).
  std::chrono::milliseconds drain_grace{1000};
  // How long to wait for every rank to attach before removing the name anyway.
  std::chrono::milliseconds attach_deadline{300000};
};

class Supervisor {
 public:
  // `signal_fd` reads the signals the launcher blocked.
  Supervisor(JobArena& arena, std::vector<RankProcess>& ranks, int signal_fd, SupervisorTimes times);
  int run();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { Running, Aborting, Terminating, Killing };

  struct Failure {
    int rank;
    int status;
    bool joined = true;  // false: ended before attaching to the arena
  };

  void handle_signals();
  void reap();
  void record_failures(const std::vector<int>& failed_ranks);
  void start_abort(const Failure& failure);
  void check_unjoined_exit();
  std::string describe(const Failure& failure) const;
  int exit_code(const Failure& failure) const;
  void wake_sleepers();
  void signal_running(int sig);
  void advance_phase(Clock::time_point now);
  void maybe_remove_name(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
  int running_count() const;
  bool any_stream_open() const;
  void print_summary() const;

  JobArena& arena_;
  std::vector<RankProcess>& ranks_;
  int signal_fd_;
  SupervisorTimes times_;
  Clock::time_point started_;

  Phase phase_ = Phase::Running;
  Clock::time_point phase_deadline_{};
  std::optional<Failure> first_failure_;
  bool joined_rank_exited_ = false;
  std::optional<Failure> unjoined_exit_;  // first rank that exited 0 without attaching
  int forwarded_signal_ = 0;   // the first SIGINT/SIGTERM/SIGHUP we passed on
  int forwarded_count_ = 0;
  std::optional<Clock::time_point> all_exited_at_;
};

}  // namespace axon_launch
