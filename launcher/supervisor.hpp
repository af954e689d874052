// Supervisor: the launcher's main loop for one attempt once the ranks run.
//
// One poll() loop watches a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and
// every rank's output pipes. It
//   - forwards output lines (see OutputStream);
//   - reaps ranks and publishes each end in the arena (RankControl::ended),
//     so that peers still waiting for a rank that ended, even with status 0,
//     fail at once naming it (the wait helper checks the ranks it needs);
//   - on the first failure (a signal, or a non-zero exit) while others still
//     run, marks the arena aborted with a reason naming the rank, which wakes
//     every waiter so that the survivors throw PeerFailure; survivors still
//     running after a grace period get SIGTERM, then SIGKILL;
//   - blames a rank that exited 0 while its peers still needed it (a peer
//     aborted the job naming it, then failed): "rank 2 exited (status 0)
//     while other ranks still waited for it", exit status 1;
//   - treats a rank that exited 0 without ever attaching as a failure too,
//     once any other rank has attached (it would wait for it in vain):
//     "rank 2 exited (status 0) before joining the job (did it call
//     World::init()?)", exit status 1; and a rank still not attached
//     --start-timeout after the first rank attached:
//     "rank 2 did not join the job within --start-timeout 300 s", status 1.
//     Ranks that all run without attaching (programs that do not use the
//     library) are left alone;
//   - once a rank has aborted the job (a timeout, a peer it saw die) and
//     then some rank has ended with status 0 (one that caught the error),
//     treats the ranks still running as after a failure: they may never
//     enter a collective again to learn of the abort (the rank the others
//     timed out waiting for, asleep outside any), so they get the grace, then
//     SIGTERM; the summary gives the abort's reason, exit status 1, unless a
//     rank fails by itself within the grace (then its status, as usual).
//     Only the job's arena counts: a PyTorch program's groups have arenas of
//     their own, and their failures end nobody;
//   - forwards SIGINT/SIGTERM/SIGHUP to every rank (SIGINT to its process
//     group, as a terminal's Ctrl-C; SIGTERM and SIGHUP to the rank's own
//     process, as its own SIGTERMs after a grace); a second one kills them;
//   - on SIGTSTP (Ctrl-Z) stops every rank and then itself; on SIGCONT (fg,
//     bg) continues them, and the time stopped does not count towards any
//     wait's timeout;
//   - lets the rank a PyTorch group's failure blamed (one that left while
//     its peers waited) give the job its status when it then fails by
//     itself, though the peers it released ended first;
//   - once every rank of a failed or interrupted job has ended, stops what
//     they left behind (the launcher is their subreaper): SIGTERM, then
//     SIGKILL; a daemon (a process in a session of its own) last, once the
//     others have gone and it has had daemon_grace to end by itself.
// run() returns the attempt's outcome: exit status 0 when every rank exited
// 0, else the status of the first failed rank (its code, or 128 + signal; 1
// for a rank blamed with status 0).
//
// Thread safety: single-threaded.
#pragma once

#include <sys/types.h>

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
  // How long the ranks that attached wait for the others to attach
  // (--start-timeout), counted from when the first was seen attached.
  std::chrono::milliseconds start_deadline{300000};
  // After a forwarded SIGINT/SIGTERM/SIGHUP, how long the ranks still running
  // get once one has ended, before SIGTERM.
  std::chrono::milliseconds forward_grace{5000};
  // How long a failed job's leftovers in a session of their own (daemons)
  // get to end by themselves once the others have gone, before SIGTERM:
  // torch_shm_manager ends 2 s after its last client.
  std::chrono::milliseconds daemon_grace{5000};
};

// How one attempt ended.
struct Outcome {
  int exit_code = 0;
  bool interrupted = false;  // a SIGINT/SIGTERM/SIGHUP reached the launcher
  std::string summary;       // "every rank exited 0", "rank 1 was killed by signal 9 (SIGKILL)"
};

class Supervisor {
 public:
  // `signal_fd` reads the signals the launcher blocked.
  Supervisor(JobArena& arena, std::vector<RankProcess>& ranks, int signal_fd, SupervisorTimes times);
  Outcome run();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { Running, Aborting, Terminating, Killing };

  enum class Blame {
    Failed,          // a signal or a non-zero exit
    ExitedUnjoined,  // exit 0 before attaching while others attached
    LeftWhileNeeded, // exit 0 after attaching while peers still waited for it
    NeverJoined,     // still not attached at the start deadline
    AbortedByRank,   // a rank aborted the job (the reason is in the arena), and
                     // ranks ended with status 0 while others still ran
  };
  struct Failure {
    int rank;
    int status;
    bool joined = true;  // false: ended (or is still running) without attaching
    Blame blame = Blame::Failed;
  };

  // The reason a rank gave when it aborted the job, if one did.
  std::optional<std::string> abort_reason() const;
  // Why the first of a PyTorch program's groups failed, if one did (their
  // arenas are their own; shm/launcher_report.hpp).
  std::optional<std::string> group_failure_reason() const;
  void handle_signals();
  void suspend();
  void resume();
  void reap();
  void record_failures(const std::vector<int>& failed_ranks);
  void start_abort(const Failure& failure);
  void check_unjoined_exit();
  void check_start_deadline(Clock::time_point now);
  void check_abort_by_rank();
  void check_forwarded_signal_heeded();
  std::optional<Failure> left_while_needed() const;
  // The same for a PyTorch group (an arena of its own): the rank its abort
  // blamed for leaving while members waited, once that rank has exited 0,
  // when every rank of `failed` is a member of the group it left and exited
  // with a status of its own (not a signal).
  std::optional<Failure> group_left_while_needed(const std::vector<int>& failed) const;
  std::optional<int> group_culprit(const std::vector<int>& failed_ranks) const;
  std::optional<int> killed_among(const std::vector<int>& failed_ranks, int blamed) const;
  Failure failure_of(int rank) const;
  // Whether the launcher has sent the running ranks SIGTERM or SIGKILL (after
  // an abort's grace, or a second interrupt).
  bool signalled_ranks() const { return phase_ == Phase::Terminating || phase_ == Phase::Killing; }
  std::string describe(const Failure& failure) const;
  int exit_code(const Failure& failure) const;
  // Whom a signal for the ranks reaches: each rank's process group (the
  // rank and the children that stayed in it), or the rank's process alone.
  enum class Reach { Group, RankOnly };
  void signal_running(int sig, Reach reach = Reach::Group);
  void stop_leftover_processes();
  void advance_phase(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
  int running_count() const;
  bool any_stream_open() const;
  void print_summary() const;
  // When every rank but `first_rank` has exited with a non-zero code
  // without joining the launcher's arena (a C++ program before
  // World::init(), any PyTorch program), and no rank or group reported a
  // failure: those codes ("1" or "1, 2"), for the summary.
  std::optional<std::string> others_failed_unjoined(int first_rank) const;

  JobArena& arena_;
  std::vector<RankProcess>& ranks_;
  int signal_fd_;
  SupervisorTimes times_;
  Clock::time_point started_;
  // When a rank was first seen attached: --start-timeout counts from here.
  std::optional<Clock::time_point> first_attach_seen_;

  Phase phase_ = Phase::Running;
  Clock::time_point phase_deadline_{};
  std::optional<Failure> first_failure_;
  std::optional<Failure> unjoined_exit_;  // first rank that exited 0 without attaching
  int forwarded_signal_ = 0;   // the first SIGINT/SIGTERM/SIGHUP we passed on
  int forwarded_count_ = 0;
  Clock::time_point first_forwarded_at_{};
  pid_t first_forwarded_from_ = -1;  // the process that sent it; -1: the kernel (a terminal's Ctrl-C)
  bool ending_after_forward_ = false;  // Aborting phase_: the forward's grace, no abort published
  std::vector<int> running_when_forwarded_;  // the ranks the first forwarded signal reached
  int interrupts_after_ranks_ended_ = 0;  // SIGINT/SIGTERM/SIGHUPs that came once no rank ran
  bool failed_before_forward_ = false;   // a rank had failed when the first signal was forwarded
  std::optional<Clock::time_point> all_exited_at_;
  bool leftovers_stopped_ = false;
  bool clean_exit_after_abort_ = false;  // a rank exited 0 once a rank had aborted the job
  // The first failure was reaped together with every rank still running
  // (print_summary: the launcher started no abort of its own).
  bool failed_all_at_once_ = false;
  std::string launcher_abort_reason_;    // what start_abort() published, if it did
  std::optional<Clock::time_point> suspended_at_;  // when the ranks were stopped with the launcher (Ctrl-Z)
};

}  // namespace axon_launch
