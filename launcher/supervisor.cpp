#include "supervisor.hpp"

#include <dirent.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "base/text.hpp"
#include "output_relay.hpp"
#include "shm/wait.hpp"

namespace axon_launch {
namespace shm = axonml::distributed::shm;

Supervisor::Supervisor(JobArena& arena, std::vector<RankProcess>& ranks, int signal_fd,
                       SupervisorTimes times)
    : arena_(arena), ranks_(ranks), signal_fd_(signal_fd), times_(times), started_(Clock::now()) {}

int Supervisor::running_count() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                        [](const RankProcess& r) { return r.running; }));
}

bool Supervisor::any_stream_open() const {
  for (const auto& r : ranks_) {
    for (const auto& s : r.streams) {
      if (s.open()) return true;
    }
  }
  return false;
}

void Supervisor::signal_running(int sig, Reach reach) {
  for (const auto& r : ranks_) {
    if (!r.running) continue;
    // The rank leads its own process group: Reach::Group reaches the
    // children that stayed in it too.
    if (reach == Reach::RankOnly || ::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
  }
}

namespace {

struct Leftover {
  pid_t pid;
  // It left the job's session (setsid()): a daemon, such as PyTorch's
  // torch_shm_manager, that serves the job's other processes.
  bool own_session;
};

// This process's children that still live. Once every rank has been reaped
// they are what the ranks left behind: the launcher is their subreaper
// (main.cpp), so orphans come to it, in whatever process group or session.
// A zombie counts while waitpid() cannot reap it: the main thread of a
// process whose other threads still exit (a DataLoader worker's queue
// thread). Until they have, its own children are passed to those threads,
// not yet to the launcher, and taking it for gone ended the wait with its
// torch_shm_manager not yet seen (a review: 6 jobs of 30 left their torch_*
// files). Call reap_exited_children() first.
std::vector<Leftover> live_children() {
  std::vector<Leftover> found;
  const pid_t self = ::getpid();
  const pid_t our_session = ::getsid(0);
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream file("/proc/" + std::string(entry->d_name) + "/stat");
    std::string stat;
    std::getline(file, stat);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long ppid = 0;
    long group = 0;
    long session = 0;
    if (rest >> state >> ppid >> group >> session && ppid == self) {
      found.push_back(Leftover{static_cast<pid_t>(pid), session != our_session});
    }
  }
  ::closedir(proc);
  return found;
}

void reap_exited_children() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace

// A failed job's ranks may have left children behind (a shell's background
// job, a data-loader process); they go with the job, as the ranks did:
// SIGTERM, then SIGKILL after the same grace, to whatever they leave in turn
// too (found by a review: `sleep 25 &` of every rank outlived a job whose
// rank was killed). Only this process's own children are signalled, by pid:
// unreaped, their pids cannot have been given to anything else (signalling
// the ranks' old process groups could reach an unrelated group that reused
// a reaped rank's pid; the review of the change).
//
// A leftover in a session of its own is a daemon that may serve the others,
// and it goes last, once they have gone, after daemon_grace to end by
// itself. PyTorch's torch_shm_manager (DataLoader workers under the
// "file_system" sharing strategy) unlinks the job's torch_* files from
// /dev/shm 2 s after its last client leaves, and dies on SIGTERM without
// doing so: stopped together with the rest, it left 6-17 files of 3 MiB
// there after every failed or interrupted such job (a review). The first
// SIGINT, SIGTERM or SIGHUP to the launcher once every rank has ended does
// not end that wait: a scheduler's SIGTERM or a Ctrl-C just after a job
// failed did, and the files stayed (a review: 15 of 15 runs). A second one
// does.
// Called once every rank has ended, before the output's drain.
void Supervisor::stop_leftover_processes() {
  using std::chrono::milliseconds;
  const auto started = Clock::now();
  // When only daemons were left, or the others were past their SIGKILL.
  std::optional<Clock::time_point> others_gone;
  std::optional<Clock::time_point> daemons_asked_at;  // SIGTERM to the daemons
  std::set<pid_t> asked;  // SIGTERM once each
  reap_exited_children();
  for (auto left = live_children(); !left.empty(); left = live_children()) {
    const auto now = Clock::now();
    const bool others_left = std::any_of(left.begin(), left.end(), [](const Leftover& l) { return !l.own_session; });
    if (!others_gone && (!others_left || now >= started + times_.term_grace)) others_gone = now;
    if (!daemons_asked_at && others_gone && (now >= *others_gone + times_.daemon_grace || interrupts_after_ranks_ended_ >= 2)) {
      daemons_asked_at = now;
    }
    // Past SIGKILL only the unkillable (D state) stay: give up on them.
    const bool daemons_left = std::any_of(left.begin(), left.end(), [](const Leftover& l) { return l.own_session; });
    const bool daemons_in_grace = daemons_left && !daemons_asked_at;
    if (!daemons_in_grace && now >= (daemons_asked_at ? *daemons_asked_at : started) + times_.term_grace + std::chrono::seconds(1)) {
      break;
    }
    for (const Leftover& l : left) {
      const std::optional<Clock::time_point> asked_at = l.own_session ? daemons_asked_at : started;
      if (!asked_at) continue;  // a daemon's grace
      if (now >= *asked_at + times_.term_grace) {
        ::kill(l.pid, SIGKILL);
      } else if (asked.insert(l.pid).second) {
        ::kill(l.pid, SIGTERM);
      }
    }
    // Signals are read meanwhile: a second SIGINT, SIGTERM or SIGHUP ends a
    // daemon's grace (handle_signals() does not count the copy GNU timeout
    // sends its own process group just after the launcher as another).
    pollfd signals{signal_fd_, POLLIN, 0};
    if (::poll(&signals, 1, 10) > 0) handle_signals();
    reap_exited_children();
  }
}

void Supervisor::handle_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() below runs after every wake-up
    if (sig == SIGTSTP) {
      suspend();
      continue;
    }
    if (sig == SIGCONT) {
      resume();
      continue;
    }
    // A second signal from the process that sent the first, within
    // kSameRequest, is one request delivered twice, not the user insisting:
    // GNU timeout signals its child and then its own process group (the
    // launcher again), systemd may send SIGHUP right after SIGTERM, a script
    // may signal both the launcher and its group. Taken for a second Ctrl-C
    // it SIGKILLed ranks still handling the first, a Python rank before it
    // had printed a line. A terminal's Ctrl-C comes from the kernel (pid 0,
    // SI_KERNEL), so a quick double Ctrl-C still kills.
    constexpr auto kSameRequest = std::chrono::seconds(1);
    const bool from_a_process = info.ssi_code == SI_USER || info.ssi_code == SI_QUEUE;
    if (forwarded_count_ == 1 && from_a_process && first_forwarded_from_ == static_cast<pid_t>(info.ssi_pid) &&
        Clock::now() - first_forwarded_at_ < kSameRequest) {
      say("axon-launch: got SIG" + std::string(::sigabbrev_np(sig)) + " from pid " + std::to_string(info.ssi_pid) +
          " again within a second: the same request delivered twice, not passed on (another one kills the ranks)\n");
      continue;
    }
    if (running_count() == 0) {
      // Every rank had ended: the signal came while the launcher stopped
      // what they left or wrote out their last output. Nothing to forward
      // (the summary said the rank that had failed did so "after the
      // launcher forwarded SIGINT"); it still means no restart, and that
      // what the ranks left goes. A second one ends a daemon's grace.
      ++interrupts_after_ranks_ended_;
      const auto left = live_children();
      const bool daemons = std::any_of(left.begin(), left.end(), [](const Leftover& l) { return l.own_session; });
      std::string line = "axon-launch: got SIG" + std::string(::sigabbrev_np(sig)) + " from pid " +
                         std::to_string(info.ssi_pid) + " after every rank had ended";
      if (daemons && interrupts_after_ranks_ended_ == 1) {
        line += ": what a rank left in a session of its own (a daemon such as torch_shm_manager, which tidies "
                "/dev/shm as it ends) still gets up to " + std::to_string(times_.daemon_grace.count() / 1000) +
                " s to end by itself; another signal stops it now";
      } else if (daemons) {
        line += ": stopping what the ranks left now";
      }
      say(line + "\n");
      continue;
    }
    ++forwarded_count_;
    if (forwarded_count_ == 1) {
      forwarded_signal_ = sig;
      failed_before_forward_ = first_failure_.has_value();
      first_forwarded_at_ = Clock::now();
      first_forwarded_from_ = from_a_process ? static_cast<pid_t>(info.ssi_pid) : -1;
      for (const auto& r : ranks_) {
        if (r.running) running_when_forwarded_.push_back(r.rank);
      }
      // Who sent it is often the first question when a job ends this way.
      say("axon-launch: got SIG" + std::string(::sigabbrev_np(sig)) + " from pid " + std::to_string(info.ssi_pid) +
          ": forwarding it to every rank (a second one kills them)\n");
      // SIGINT reaches each rank's process group, as a terminal's Ctrl-C
      // reaches the foreground job. SIGTERM and SIGHUP, a scheduler's or a
      // supervisor's "please end", reach the rank's own process only, as
      // under torchrun: its children are its to end. Sent to the group, they
      // killed a PyTorch rank's DataLoader workers under its SIGTERM handler,
      // whose checkpoint then failed (a review: 8 of 9 preempted jobs).
      signal_running(sig, sig == SIGINT ? Reach::Group : Reach::RankOnly);
    } else {
      // A second interrupt: the user means it.
      signal_running(SIGKILL);
      phase_ = Phase::Killing;
    }
  }
}

// Ctrl-Z: the ranks lead process groups of their own (Ctrl-C must reach only
// the launcher), so the terminal stops only the launcher, and the ranks ran
// on, blocking once their output pipes filled. Stop them with it (SIGSTOP,
// which no rank can ignore), then stop the launcher itself, so that the shell
// sees the job stopped; fg or bg continues the launcher, and resume() them.
void Supervisor::suspend() {
  signal_running(SIGSTOP);
  if (!suspended_at_) suspended_at_ = Clock::now();  // a second Ctrl-Z before the resume: the pause began at the first
  // A SIGCONT that came after the SIGTSTP has been spent already (it
  // continues a process when sent): stopping now, nothing would continue us.
  // (One that comes between this check and the raise is still lost with the
  // stop signal, as the kernel discards it: a second SIGCONT continues us.)
  sigset_t pending;
  ::sigpending(&pending);
  if (sigismember(&pending, SIGCONT)) return;  // resume() follows when it is read
  ::raise(SIGSTOP);  // returns once continued; the SIGCONT waits in the signalfd
}

void Supervisor::resume() {
  if (suspended_at_) {
    // Before the ranks run again, so that every wait that spanned the pause
    // sees it (shm::launcher_resumed_at()).
    const auto now = Clock::now();
    arena_.header().resumed_at_ns.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
        std::memory_order_release);
    // Nor does the launcher's own clock count the pause: the start deadline
    // and a grace in progress.
    const auto pause = now - *suspended_at_;
    started_ += pause;
    if (first_attach_seen_) *first_attach_seen_ += pause;
    if (phase_ == Phase::Aborting || phase_ == Phase::Terminating) phase_deadline_ += pause;
    if (all_exited_at_) *all_exited_at_ += pause;  // the drain's grace
    suspended_at_.reset();
  }
  signal_running(SIGCONT);  // also after a SIGSTOP someone else sent them
}

void Supervisor::reap() {
  std::vector<int> failed;
  std::vector<int> ended;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = std::find_if(ranks_.begin(), ranks_.end(),
                           [&](const RankProcess& r) { return r.pid == pid; });
    if (it == ranks_.end()) continue;
    it->running = false;
    it->status = status;
    ended.push_back(it->rank);
    const bool joined = arena_.joined(it->rank);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failed.push_back(it->rank);
    } else if (abort_reason()) {
      clean_exit_after_abort_ = true;  // a rank that caught the abort's error and ended
    } else if (!joined && !unjoined_exit_ && ranks_.size() > 1) {
      unjoined_exit_ = Failure{it->rank, status, false, Blame::ExitedUnjoined};
    }
  }
  const bool failure_before = first_failure_.has_value();
  if (!failed.empty()) record_failures(failed);
  // The first failure came in a pass that reaped several ranks and left
  // none running: they had all ended before the launcher could react.
  if (!failure_before && first_failure_ && ended.size() > 1 && running_count() == 0) failed_all_at_once_ = true;
  // A PyTorch rank aborts its groups as it leaves them, before it exits:
  // the members it left waiting may fail, and be reaped, first. Once it has
  // exited 0 it is the culprit, as a C++ rank that exits 0 mid-job is (the
  // summary blamed a survivor's "exited with code 5"; a review). The abort
  // under way stays; only the blame and the status change.
  if (first_failure_ && first_failure_->blame == Blame::Failed) {
    if (auto culprit = group_left_while_needed({first_failure_->rank})) first_failure_ = culprit;
  }
  check_unjoined_exit();
  check_abort_by_rank();
  check_forwarded_signal_heeded();
  // Published after any abort above, so that peers waiting for these ranks
  // find the launcher's reason first; a rank that merely finished is no
  // error unless somebody still waits for it (the waiter decides that).
  for (int rank : ended) arena_.mark_ended(rank, ranks_[static_cast<std::size_t>(rank)].status);
  if (running_count() == 0 && !all_exited_at_) all_exited_at_ = Clock::now();
}

// A peer that waited for a rank that had ended aborts the job naming it
// (shm::WaitContext::check_peers). If that rank exited 0, blame it: the
// waiter's own failure is only the consequence.
std::optional<Supervisor::Failure> Supervisor::left_while_needed() const {
  auto& header = arena_.header();
  if (header.abort_state.load(std::memory_order_acquire) !=
      static_cast<std::uint32_t>(shm::AbortState::Set)) {
    return std::nullopt;
  }
  const int culprit = header.abort_rank;
  if (culprit < 0 || culprit >= static_cast<int>(ranks_.size())) return std::nullopt;
  const auto& r = ranks_[static_cast<std::size_t>(culprit)];
  if (r.running || !(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)) return std::nullopt;
  // Not a rank that timed out, aborted the job itself, then caught its
  // Timeout and exited 0: that one waited, it left nobody waiting (a review
  // found the summary blaming it so).
  if (!shm::abort_blames_clean_exit_of(header, culprit)) return std::nullopt;
  return Failure{culprit, r.status, arena_.joined(culprit),
                 arena_.joined(culprit) ? Blame::LeftWhileNeeded : Blame::ExitedUnjoined};
}

namespace {

// The ranks listed in brackets right after the first `opening` of `reason`
// (which ends in "["); empty when there is none, or the reason was cut short
// before the list ended. The members of the group a PyTorch rank's abort
// says it left follow "it left the group of global ranks [" ("rank 1
// aborted: it left the group of global ranks [0, 1] ..."); those of the
// group a waiter waited in, " in group [" ("... call #201 in group [0, 1,
// 2]: waiting for ...", job ranks).
std::vector<int> bracketed_ranks_after(const std::string& reason, std::string_view opening, int ranks_in_job) {
  const std::size_t from = reason.find(opening);
  if (from == std::string::npos) return {};
  std::string_view list = std::string_view(reason).substr(from + opening.size());
  std::vector<int> ranks = axonml::distributed::read_ranks(list, ranks_in_job);
  return list.starts_with("]") ? ranks : std::vector<int>{};
}

// Whether waitpid `status` is a death by a signal that says the rank itself
// failed: not SIGABRT, which an uncaught C++ exception raises (the error a
// peer's failure gave it, maybe).
bool killed_by_its_own_signal(int status) { return WIFSIGNALED(status) && WTERMSIG(status) != SIGABRT; }

// The ranks an abort's waiter was waiting for ("...: waiting for rank(s) 1,
// 3 (round 7)"; the first such list, the aborter's own); empty when it says
// none.
std::vector<int> ranks_waited_for(const std::string& reason, int ranks_in_job) {
  constexpr std::string_view kWaiting = ": waiting for rank(s) ";
  const std::size_t at = reason.find(kWaiting);
  if (at == std::string::npos) return {};
  std::string_view list = std::string_view(reason).substr(at + kWaiting.size());
  return axonml::distributed::read_ranks(list, ranks_in_job);
}

}  // namespace

std::optional<Supervisor::Failure> Supervisor::group_left_while_needed(const std::vector<int>& failed) const {
  const auto& header = arena_.header();
  if (header.group_failure_state.load(std::memory_order_acquire) !=
      static_cast<std::uint32_t>(shm::AbortState::Set)) {
    return std::nullopt;
  }
  const int culprit = header.group_failure_rank;
  if (culprit < 0 || culprit >= static_cast<int>(ranks_.size())) return std::nullopt;
  const auto& r = ranks_[static_cast<std::size_t>(culprit)];
  if (r.running || !(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)) return std::nullopt;
  // Only its own leaving, in the PyTorch backend's words; a leave after
  // another of its groups failed reads "aborted: after another of its groups
  // failed (...)", and that failure's rank is the culprit.
  // Or, when it left before any member waited for it, in the words of the
  // member that came to wait ("rank 1 left the group (it destroyed it, or
  // its program ended) while rank 0 still waited for it (all_reduce(...)
  // call #201 in group [0, 1, 2]: ...)"; a review saw a member blamed for
  // the error it got, in 7 of 10 runs).
  const auto reason = group_failure_reason();
  if (!reason) return std::nullopt;
  const std::string culprit_name = "rank " + std::to_string(culprit);
  std::vector<int> members;
  bool any_rank_a_member = false;
  if (reason->starts_with(culprit_name + " aborted: it left the group")) {
    members = bracketed_ranks_after(*reason, "it left the group of global ranks [", static_cast<int>(ranks_.size()));
  } else if (reason->starts_with(culprit_name + " left the group (")) {
    // "(it destroyed it, or its program ended)", or why it left, as it
    // said ("(its program ended on an uncaught ValueError: ...)"): the
    // group follows that text, which may hold anything.
    const std::size_t after = reason->find(") while ");
    if (after != std::string::npos) {
      members = bracketed_ranks_after(reason->substr(after), " in group [", static_cast<int>(ranks_.size()));
    }
  } else if (const std::string member = ": its member global " + culprit_name + " ";
             reason->find(member + "left the job's default group") != std::string::npos ||
             reason->find(member + "exited (status 0) before the group was set up") != std::string::npos ||
             reason->find(member + "(pid " + std::to_string(r.pid) + ") exited or was killed") != std::string::npos) {
    // A member of a group being set up (PyTorch's init_process_group or
    // new_group) that left the job's default group, or exited, before it
    // came: the ranks that waited for it fail with these words (the summary
    // blamed one of them, 4 runs of 4; a review). Every rank of the world
    // takes part in new_group (its store barrier), members or not, so any
    // rank that failed by its own hand failed of it.
    any_rank_a_member = true;
  } else if (reason->starts_with(culprit_name + " (pid " + std::to_string(r.pid) + ") exited or was killed while")) {
    // A process its peers' watch saw end, status 0 here: one that left
    // without leaving its groups (os._exit(0)), where sys.exit(0) leaves
    // them first and gives the words above. The reason names no group: any
    // rank that failed by its own hand failed of it (the summary blamed a
    // survivor that caught the error, 11 runs of 11; a review).
    any_rank_a_member = true;
  } else {
    return std::nullopt;
  }
  // Only when the failures are those of members of the group it left,
  // ended by their own hand (the error it caused; members still on their
  // way in when it left fail too, so not only those it named waiting): a
  // rank outside that group, or one killed by a signal, failed for reasons
  // of its own (a review saw a SIGSEGV seconds after a handled leave
  // reported as the leaver's, status 1).
  for (int rank : failed) {
    const int status = ranks_[static_cast<std::size_t>(rank)].status;
    const bool member = any_rank_a_member || std::find(members.begin(), members.end(), rank) != members.end();
    if (!member || !WIFEXITED(status)) return std::nullopt;
  }
  return Failure{culprit, r.status, true, Blame::LeftWhileNeeded};
}

// Ranks reaped together all ended before the launcher reacted to any of them;
// prefer the rank a waiter blamed for leaving, or one that the job's aborter
// was waiting for and a signal killed, or the aborter itself, else the first
// reaped.
void Supervisor::record_failures(const std::vector<int>& failed_ranks) {
  // A rank that fails by itself within the grace after a rank's abort (not
  // from the launcher's signals) gives the job its status, as it would have
  // had it failed first.
  if (first_failure_ && first_failure_->blame == Blame::AbortedByRank && phase_ == Phase::Aborting) {
    first_failure_.reset();
  }
  if (first_failure_) {
    // Not over a rank a signal killed (not one forwarded from the
    // launcher's own, Ctrl-C's): its death came first.
    const bool first_killed = forwarded_count_ == 0 && killed_by_its_own_signal(first_failure_->status);
    if (const auto culprit = group_culprit(failed_ranks);
        culprit && first_failure_->blame == Blame::Failed && !first_killed) {
      first_failure_ = failure_of(*culprit);
    }
    return;
  }
  if (auto culprit = left_while_needed()) {
    first_failure_ = culprit;
  } else if (auto group_culprit_exited_0 = group_left_while_needed(failed_ranks)) {
    first_failure_ = group_culprit_exited_0;
  } else if (const auto blamed = group_culprit(failed_ranks)) {
    first_failure_ = failure_of(killed_among(failed_ranks, *blamed).value_or(*blamed));
  } else {
    int chosen = failed_ranks.front();
    auto& header = arena_.header();
    if (header.abort_state.load(std::memory_order_acquire) ==
        static_cast<std::uint32_t>(shm::AbortState::Set)) {
      const int aborter = header.abort_rank;
      if (std::find(failed_ranks.begin(), failed_ranks.end(), aborter) != failed_ranks.end()) {
        chosen = aborter;
      }
      // Unless the aborter gave up waiting for a rank among them that a
      // signal killed: that one failed first. It happens when the launcher
      // could not react in between, e.g. held stopped while a rank was
      // killed and the others timed out waiting for it (found by a review:
      // the summary blamed a waiter's timeout, and the kill went
      // unmentioned). Not a rank that ended by its own exit or SIGABRT (an
      // uncaught exception): that may be the abort's error reaching a rank
      // that came late, or one that itself waited further down a chain.
      if (const auto reason = abort_reason()) {
        for (const int waited : ranks_waited_for(*reason, static_cast<int>(ranks_.size()))) {
          if (std::find(failed_ranks.begin(), failed_ranks.end(), waited) == failed_ranks.end()) continue;
          const int status = ranks_[static_cast<std::size_t>(waited)].status;
          if (WIFSIGNALED(status) && WTERMSIG(status) != SIGABRT) {
            chosen = waited;
            break;
          }
        }
      }
    }
    first_failure_ = failure_of(chosen);
  }
  if (running_count() > 0 && forwarded_count_ == 0) start_abort(*first_failure_);
}

// `rank`, which has ended, as a failure of its own (Blame::Failed).
Supervisor::Failure Supervisor::failure_of(int rank) const {
  return Failure{rank, ranks_[static_cast<std::size_t>(rank)].status, arena_.joined(rank)};
}

// The rank a PyTorch group's failure blamed (one that left while its peers
// waited, say at sys.exit(3)), when it is among `failed_ranks` and failed by
// itself, not from the launcher's signals. The peers that group released
// often end before it does: it, not they, should give the job its status
// (a review saw exit status 1 for a rank's sys.exit(3)).
std::optional<int> Supervisor::group_culprit(const std::vector<int>& failed_ranks) const {
  const auto& header = arena_.header();
  if (header.group_failure_state.load(std::memory_order_acquire) !=
      static_cast<std::uint32_t>(shm::AbortState::Set)) {
    return std::nullopt;
  }
  const int blamed = header.group_failure_rank;
  if (std::find(failed_ranks.begin(), failed_ranks.end(), blamed) == failed_ranks.end()) return std::nullopt;
  const bool launcher_signalled = forwarded_count_ != 0 || signalled_ranks();
  if (WIFSIGNALED(ranks_[static_cast<std::size_t>(blamed)].status) && launcher_signalled) return std::nullopt;
  return blamed;
}

// A rank among `failed_ranks` (ended together, before the launcher could
// react to any) that a signal killed, when the rank a PyTorch group blamed,
// `blamed`, ended otherwise: that one failed first, and the group's failure
// (the blamed rank's uncaught exception, or its abort "after another of its
// groups failed") came of it (a kill -9 of rank 0 while the groups were
// being made blamed rank 1's exit 1, 1 run of 14; a review). Not when the
// launcher had signalled ranks itself.
std::optional<int> Supervisor::killed_among(const std::vector<int>& failed_ranks, int blamed) const {
  if (forwarded_count_ != 0 || signalled_ranks()) return std::nullopt;
  if (killed_by_its_own_signal(ranks_[static_cast<std::size_t>(blamed)].status)) return std::nullopt;
  for (const int rank : failed_ranks) {
    if (killed_by_its_own_signal(ranks_[static_cast<std::size_t>(rank)].status)) return rank;
  }
  return std::nullopt;
}

// A rank that exited 0 without attaching is only an error once another rank
// has attached: that one will wait for it. Checked after every wake-up (the
// poll wakes every 10-100 ms until every rank has attached).
void Supervisor::check_unjoined_exit() {
  if (!unjoined_exit_ || first_failure_ || forwarded_count_ != 0) return;
  if (arena_.attached() == 0) return;
  first_failure_ = unjoined_exit_;
  if (running_count() > 0) start_abort(*first_failure_);
}

// A rank aborted the job, and a rank has ended since with status 0 (a
// failed one is a first failure already; one that ended before the abort,
// its work done, says nothing of it), while others still run. Nothing
// but the launcher would end those: one asleep outside any collective (the
// rank the others timed out waiting for) never learns of the abort, and the
// job hung until it woke (found by a review). The arena is aborted already:
// only the grace and the signals follow.
void Supervisor::check_abort_by_rank() {
  if (first_failure_ || forwarded_count_ != 0 || phase_ != Phase::Running) return;
  if (!clean_exit_after_abort_ || running_count() == 0) return;
  if (auto culprit = left_while_needed()) {
    first_failure_ = culprit;  // as record_failures() would blame it once the waiter fails
  } else {
    first_failure_ = Failure{arena_.header().abort_rank, 0, true, Blame::AbortedByRank};
  }
  arena_.wake_sleepers();
  phase_ = Phase::Aborting;
  phase_deadline_ = Clock::now() + times_.abort_grace;
}

// After a forwarded SIGINT (SIGTERM, SIGHUP), the ranks end by themselves,
// and a failure starts no abort (a rank's handler may still be at work). But
// a rank blocked where the signal cannot act on it (a Python rank inside a
// C++ call that does not return: PyTorch's store wait for a peer the signal
// killed) would hold the job forever (found by a review: Ctrl-C during a
// slow start left one rank and the launcher waiting). So once a rank has
// ended, the others get forward_grace, then SIGTERM, then SIGKILL. Only a
// rank the signal reached counts: one that had finished before it says
// nothing of the signal (the review of the change: a rank that exited 0,
// then a handler that took 8 s on the other, was cut short).
void Supervisor::check_forwarded_signal_heeded() {
  if (forwarded_count_ == 0 || phase_ != Phase::Running || running_count() == 0) return;
  const bool one_ended = std::any_of(running_when_forwarded_.begin(), running_when_forwarded_.end(),
                                     [&](int rank) { return !ranks_[static_cast<std::size_t>(rank)].running; });
  if (!one_ended) return;
  ending_after_forward_ = true;
  phase_ = Phase::Aborting;
  phase_deadline_ = Clock::now() + times_.forward_grace;
}

// Start-up has its own deadline (--start-timeout): a rank may take long to
// reach World::init(), and its peers wait for it without counting that
// against --timeout. The window opens when the first rank is seen attached:
// counted from the launch, ranks that all came late alike (a slow import
// before World::init()) were blamed at random, whichever had not attached
// yet when the first did (a review: 4 of 12 such jobs failed). When it
// closes with a running rank not attached, that one is blamed; also after a
// SIGINT the ranks caught or ignored, which would otherwise leave them
// waiting (a review). No rank attached: a program that does not use the
// arena (a PyTorch one), left alone.
void Supervisor::check_start_deadline(Clock::time_point now) {
  if (first_failure_) return;
  if (arena_.attached() == 0 || arena_.attached() >= ranks_.size()) return;
  if (!first_attach_seen_) first_attach_seen_ = now;
  if (now - *first_attach_seen_ < times_.start_deadline) return;
  for (const auto& r : ranks_) {
    if (r.running && !arena_.joined(r.rank)) {
      first_failure_ = Failure{r.rank, 0, false, Blame::NeverJoined};
      start_abort(*first_failure_);
      return;
    }
  }
}

std::string Supervisor::describe(const Failure& failure) const {
  if (failure.blame == Blame::AbortedByRank) {
    return "the job was aborted: " + abort_reason().value_or("(no reason given)");
  }
  std::string s = "rank " + std::to_string(failure.rank) + " ";
  switch (failure.blame) {
    case Blame::ExitedUnjoined:
      return s + "exited (status 0) before joining the job (did it call World::init()?)";
    case Blame::LeftWhileNeeded:
      return s + "exited (status 0) while other ranks still waited for it";
    case Blame::NeverJoined:
      return s + "did not join the job within --start-timeout " +
             axonml::distributed::shortest_text(std::chrono::duration<double>(times_.start_deadline).count()) +
             " s (did it call World::init()?)";
    case Blame::Failed:
    case Blame::AbortedByRank:  // returned above
      break;
  }
  // "Before joining" tells only once some rank has joined: a program that
  // never uses the arena (a PyTorch program, whose groups make their own)
  // joins nothing, and its ranks die after their work has begun.
  if (failure.joined || arena_.attached() == 0) return s + describe_status(failure.status);
  return s + describe_status(failure.status) + " before joining the job";
}

int Supervisor::exit_code(const Failure& failure) const {
  const int code = exit_code_of(failure.status);
  return code == 0 ? 1 : code;
}

void Supervisor::start_abort(const Failure& failure) {
  const std::string reason = describe(failure);
  launcher_abort_reason_ = reason;
  shm::abort_job(arena_.header(), failure.rank, reason);
  arena_.wake_sleepers();
  phase_ = Phase::Aborting;
  phase_deadline_ = Clock::now() + times_.abort_grace;
}

void Supervisor::advance_phase(Clock::time_point now) {
  if (running_count() == 0) return;
  if (phase_ == Phase::Aborting && now >= phase_deadline_) {
    say("axon-launch: " + std::to_string(running_count()) + " rank(s) still running " +
        (ending_after_forward_ ? std::to_string(times_.forward_grace.count()) +
                                     " ms after another ended on the forwarded SIG" +
                                     std::string(::sigabbrev_np(forwarded_signal_))
                               : std::to_string(times_.abort_grace.count()) + " ms after the abort") +
        ": sending SIGTERM\n");
    // To the rank's process alone, as a forwarded SIGTERM: a PyTorch rank's
    // handler may still be saving, and its DataLoader workers died under it
    // when the group got it (a review). SIGKILL, after term_grace, reaches
    // the group; what the rank leaves goes once every rank has ended.
    signal_running(SIGTERM, Reach::RankOnly);
    phase_ = Phase::Terminating;
    phase_deadline_ = now + times_.term_grace;
  } else if (phase_ == Phase::Terminating && now >= phase_deadline_) {
    say("axon-launch: " + std::to_string(running_count()) + " rank(s) still running " +
        std::to_string(times_.term_grace.count()) + " ms after SIGTERM: sending SIGKILL\n");
    signal_running(SIGKILL);
    phase_ = Phase::Killing;
  }
}

int Supervisor::poll_timeout_ms(Clock::time_point now) const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  auto until = [&](Clock::time_point t) {
    return static_cast<int>(std::max<long long>(0, duration_cast<milliseconds>(t - now).count() + 1));
  };
  int timeout = -1;
  auto tighten = [&](int ms) { timeout = timeout < 0 ? ms : std::min(timeout, ms); };
  // Attaching is seen by polling the counter, until every rank has attached:
  // often at first, then rarely for programs that never attach.
  if (arena_.attached() < ranks_.size() && running_count() > 0) {
    tighten(now - started_ < std::chrono::seconds(2) ? 10 : 100);
  }
  if (phase_ == Phase::Aborting || phase_ == Phase::Terminating) tighten(until(phase_deadline_));
  if (all_exited_at_) tighten(until(*all_exited_at_ + times_.drain_grace));
  return timeout;
}

Outcome Supervisor::run() {
  std::vector<pollfd> fds;
  std::vector<OutputStream*> owners;
  for (;;) {
    const auto now = Clock::now();
    check_start_deadline(now);
    advance_phase(now);
    if (running_count() == 0) {
      // Before the drain: leftovers may hold the output pipes open.
      if (!leftovers_stopped_ &&
          (first_failure_ || forwarded_count_ != 0 || interrupts_after_ranks_ended_ != 0 || abort_reason())) {
        stop_leftover_processes();
        leftovers_stopped_ = true;
      }
      if (!any_stream_open() || now >= *all_exited_at_ + times_.drain_grace) break;
    }

    // [0] the signals, [1] and [2] the progress of stdout's and stderr's
    // relays, then the ranks' streams. A stream whose relay holds more than
    // kHighWater is left unread while ranks run (they block in their
    // writes, as writing to that output themselves); its relay's progress
    // wakes the loop to read it again. Once every rank has ended, the
    // drain reads on to twice that, so that the ranks' last lines still in
    // their pipes get out, but no further: a child a rank left may write
    // there without end (the launcher's memory grew by 1 GB a second; a
    // review).
    const std::size_t hold_above = OutputRelay::kHighWater * (running_count() > 0 ? 1 : 2);
    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    owners.assign(3, nullptr);
    fds.push_back(pollfd{-1, POLLIN, 0});
    fds.push_back(pollfd{-1, POLLIN, 0});
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        if (!s.open()) continue;
        if (s.relay().holds_more_than(hold_above)) {
          fds[&s.relay() == &OutputRelay::of(STDOUT_FILENO) ? 1 : 2].fd = s.relay().progress_fd();
          continue;
        }
        fds.push_back(pollfd{s.fd(), POLLIN, 0});
        owners.push_back(&s);
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
    if (ready < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    }
    if (fds[0].revents & POLLIN) handle_signals();  // first: output never delays a signal
    if (fds[1].revents & POLLIN) OutputRelay::of(STDOUT_FILENO).clear_progress();
    if (fds[2].revents & POLLIN) OutputRelay::of(STDERR_FILENO).clear_progress();
    for (std::size_t i = 3; i < fds.size(); ++i) {
      if (fds[i].revents != 0) owners[i]->drain();
    }
    reap();
  }
  for (auto& r : ranks_) {
    for (auto& s : r.streams) s.close();
  }
  print_summary();
  Outcome outcome;
  outcome.interrupted = forwarded_count_ != 0 || interrupts_after_ranks_ended_ != 0;
  if (first_failure_) {
    outcome.exit_code = exit_code(*first_failure_);
    outcome.summary = describe(*first_failure_);
  } else if (const auto reason = abort_reason()) {
    // Every rank exited 0, but one of them had aborted the job (for
    // example a peer that left mid-collective, whose survivors caught the
    // PeerFailure): the job did not succeed, and the summary says why.
    outcome.exit_code = 1;
    outcome.summary = "every rank exited 0, but the job was aborted: " + *reason;
    say("axon-launch: " + outcome.summary + " (exit status 1)\n");
  } else {
    if (const auto failure = group_failure_reason()) {
      // A PyTorch program's groups keep arenas of their own, and the first
      // to fail said why here. Its ranks caught that and went on, which
      // under PyTorch is often by design (falling back to Gloo when an axon
      // group cannot be set up; an irecv never matched at the end), so the
      // job succeeded, as under other launchers; but the reason is not kept
      // from the user. (Exit 1 here, tried, failed such jobs, and
      // --max-restarts reran them.)
      say("axon-launch: every rank exited 0; a group of the job had failed on the way, and its ranks went on: " +
          *failure + "\n");
    }
    outcome.summary = "every rank exited 0";
  }
  return outcome;
}

std::optional<std::string> Supervisor::abort_reason() const {
  return shm::published_reason(arena_.header().abort_state, arena_.header().abort_reason);
}

std::optional<std::string> Supervisor::group_failure_reason() const {
  return shm::published_reason(arena_.header().group_failure_state, arena_.header().group_failure_reason);
}

std::optional<std::string> Supervisor::others_failed_unjoined(int first_rank) const {
  // A PyTorch program's ranks join no arena of the launcher's; a failure
  // its groups reported is what ended them.
  if (group_failure_reason()) return std::nullopt;
  if (const auto reason = abort_reason(); reason && *reason != launcher_abort_reason_) return std::nullopt;
  std::vector<int> codes;
  for (const auto& r : ranks_) {
    if (r.rank == first_rank) continue;
    if (r.running || arena_.joined(r.rank) || !WIFEXITED(r.status) || WEXITSTATUS(r.status) == 0) return std::nullopt;
    codes.push_back(WEXITSTATUS(r.status));
  }
  if (codes.empty()) return std::nullopt;
  std::sort(codes.begin(), codes.end());
  codes.erase(std::unique(codes.begin(), codes.end()), codes.end());
  std::string text;
  for (int code : codes) text += (text.empty() ? "" : ", ") + std::to_string(code);
  return text;
}

void Supervisor::print_summary() const {
  if (!first_failure_) {
    if (forwarded_signal_ != 0) {
      say("axon-launch: every rank exited 0 after SIG" + std::string(::sigabbrev_np(forwarded_signal_)) + "\n");
    }
    return;
  }
  const auto& f = *first_failure_;
  std::string line = "axon-launch: " + describe(f);
  // Not when the rank had failed before the signal came (a review: "rank 1
  // was killed by signal 9 after the launcher forwarded SIGTERM", of a rank
  // reaped 100 ms before the SIGTERM).
  if (forwarded_signal_ != 0 && !failed_before_forward_) {
    line += " after the launcher forwarded SIG" + std::string(::sigabbrev_np(forwarded_signal_));
  }
  // "Stopped" only when the launcher signalled them: the others may have
  // ended by themselves once the abort woke them, or failed on their own.
  // Aborted also when every rank had ended before the launcher reaped the
  // first (so it started no abort of its own): a rank's abort, or a PyTorch
  // group's failure, had ended the others then (the clause was missing, 1
  // run in 8 on a loaded machine).
  const bool signalled = signalled_ranks();
  const bool aborted_before_reaped =
      failed_all_at_once_ && forwarded_signal_ == 0 && (abort_reason() || group_failure_reason());
  if (f.blame == Blame::AbortedByRank || ending_after_forward_) {
    if (signalled) line += "; the ranks still running were stopped";
  } else if (const auto codes = others_failed_unjoined(f.rank); codes && !signalled) {
    // Not "the job was aborted and the other ranks ended", which read as if
    // the first had ended them: the abort reaches only ranks in the job, and
    // these had joined none of the launcher's (a bad argument every rank
    // checks; a review). Nor "before joining": a PyTorch program's ranks
    // never join it, their groups keep arenas of their own (the diff's
    // review).
    line += "; the other ranks failed too (exit code" +
            std::string(codes->find(',') == std::string::npos ? " " : "s ") + *codes + ")";
  } else if (phase_ != Phase::Running || aborted_before_reaped) {
    line += signalled ? "; the job was aborted and the ranks still running were stopped"
                      : "; the job was aborted and the other ranks ended";
  }
  line += " (exit status " + std::to_string(exit_code(f)) + ")";
  say(line + "\n");
  if (f.blame == Blame::AbortedByRank) return;  // the line gave the abort's reason
  // The rank that exited first is often not where the job went wrong: a
  // rank that timed out waiting for a hung peer aborted the job, and it or a
  // survivor that caught the PeerFailure exited. The abort's reason names
  // the rank(s) that never arrived. (Not when the launcher itself aborted
  // the job: its reason is the line above, or a rank blamed since.)
  const int aborter = arena_.header().abort_rank;
  if (const auto reason = abort_reason(); reason && aborter >= 0 && *reason != launcher_abort_reason_) {
    say("axon-launch: the job had been aborted: " + *reason + "\n");
  } else if (const auto failure = group_failure_reason()) {
    // A PyTorch program's groups keep arenas of their own; the first of them
    // to fail said why here (shm/launcher_report.hpp).
    say("axon-launch: the job had been aborted: " + *failure + "\n");
  }
}

}  // namespace axon_launch
