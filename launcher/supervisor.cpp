#include "supervisor.hpp"

#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

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

void Supervisor::signal_running(int sig) {
  for (const auto& r : ranks_) {
    if (!r.running) continue;
    // The rank leads its own process group: reach its children too.
    if (::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
  }
}

void Supervisor::handle_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() below runs after every wake-up
    ++forwarded_count_;
    if (forwarded_count_ == 1) {
      forwarded_signal_ = sig;
      // Who sent it is often the first question when a job ends this way.
      std::cerr << "axon-launch: got SIG" << ::sigabbrev_np(sig) << " from pid " << info.ssi_pid
                << ": forwarding it to every rank (a second one kills them)" << std::endl;
      signal_running(sig);
    } else {
      // A second interrupt: the user means it.
      signal_running(SIGKILL);
      phase_ = Phase::Killing;
    }
  }
}

void Supervisor::reap() {
  std::vector<int> failed;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = std::find_if(ranks_.begin(), ranks_.end(),
                           [&](const RankProcess& r) { return r.pid == pid; });
    if (it == ranks_.end()) continue;
    it->running = false;
    it->status = status;
    const bool joined = arena_.joined(it->rank);
    if (joined) joined_rank_exited_ = true;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failed.push_back(it->rank);
    } else if (!joined && !unjoined_exit_ && ranks_.size() > 1) {
      unjoined_exit_ = Failure{it->rank, status, false};
    }
  }
  if (!failed.empty()) record_failures(failed);
  check_unjoined_exit();
  if (running_count() == 0 && !all_exited_at_) all_exited_at_ = Clock::now();
}

// Ranks reaped together all ended before the launcher reacted to any of them,
// so none of them failed because of another's abort; prefer the one that
// aborted the job itself, if any did, else the first reaped.
void Supervisor::record_failures(const std::vector<int>& failed_ranks) {
  if (first_failure_) return;
  int chosen = failed_ranks.front();
  auto& header = arena_.header();
  if (header.abort_state.load(std::memory_order_acquire) ==
      static_cast<std::uint32_t>(shm::AbortState::Set)) {
    const int aborter = header.abort_rank;
    if (std::find(failed_ranks.begin(), failed_ranks.end(), aborter) != failed_ranks.end()) {
      chosen = aborter;
    }
  }
  first_failure_ = Failure{chosen, ranks_[static_cast<std::size_t>(chosen)].status,
                           arena_.joined(chosen)};
  if (running_count() > 0 && forwarded_count_ == 0) start_abort(*first_failure_);
}

// A rank that exited 0 without attaching is only an error once another rank
// has attached: that one will wait for it. Checked after every wake-up (the
// poll wakes every 10-100 ms while the arena's name exists, which it does
// until then).
void Supervisor::check_unjoined_exit() {
  if (!unjoined_exit_ || first_failure_ || forwarded_count_ != 0) return;
  if (arena_.attached() == 0) return;
  first_failure_ = unjoined_exit_;
  if (running_count() > 0) start_abort(*first_failure_);
}

std::string Supervisor::describe(const Failure& failure) const {
  std::string s = "rank " + std::to_string(failure.rank) + " ";
  if (failure.joined) return s + describe_status(failure.status);
  if (WIFEXITED(failure.status) && WEXITSTATUS(failure.status) == 0) {
    return s + "exited (status 0) before joining the job (did it call World::init()?)";
  }
  return s + describe_status(failure.status) + " before joining the job";
}

int Supervisor::exit_code(const Failure& failure) const {
  const int code = exit_code_of(failure.status);
  return code == 0 && !failure.joined ? 1 : code;
}

void Supervisor::start_abort(const Failure& failure) {
  const std::string reason = describe(failure);
  // The launcher is no rank; the guard only needs the header (and -1 marks
  // the launcher as the aborter).
  shm::WaitGuard guard(arena_.header(), -1, std::chrono::milliseconds(0));
  guard.abort(failure.rank, reason);
  wake_sleepers();
  phase_ = Phase::Aborting;
  phase_deadline_ = Clock::now() + times_.abort_grace;
}

// Ranks sleep on the doorbell of what they wait for, waking every 50 ms to
// check the abort flag. Ringing the bells the launcher can find (every rank's
// point-to-point doorbell and the world group's) makes most of them notice
// at once; waiters in subgroups notice within one sleep slice.
void Supervisor::wake_sleepers() {
  auto& header = arena_.header();
  auto* base = reinterpret_cast<std::byte*>(&header);
  auto* controls = reinterpret_cast<shm::RankControl*>(base + header.rank_controls_offset);
  for (std::uint32_t r = 0; r < header.world_size; ++r) shm::ring(controls[r].doorbell);
  shm::ring(reinterpret_cast<shm::GroupHeader*>(base + header.groups_offset)->bell);
}

void Supervisor::advance_phase(Clock::time_point now) {
  if (running_count() == 0) return;
  if (phase_ == Phase::Aborting && now >= phase_deadline_) {
    std::cerr << "axon-launch: " << running_count() << " rank(s) still running "
              << times_.abort_grace.count() << " ms after the abort: sending SIGTERM" << std::endl;
    signal_running(SIGTERM);
    phase_ = Phase::Terminating;
    phase_deadline_ = now + times_.term_grace;
  } else if (phase_ == Phase::Terminating && now >= phase_deadline_) {
    std::cerr << "axon-launch: " << running_count() << " rank(s) still running "
              << times_.term_grace.count() << " ms after SIGTERM: sending SIGKILL" << std::endl;
    signal_running(SIGKILL);
    phase_ = Phase::Killing;
  }
}

void Supervisor::maybe_remove_name(Clock::time_point now) {
  if (arena_.name_removed()) return;
  // A rank that exited 0 without attaching keeps the name: the others may
  // still attach, and then check_unjoined_exit() reports it. After a failure
  // the name stays while running ranks have yet to attach, so that they find
  // the abort (and its reason) rather than no arena; the grace period ends
  // them if they never do.
  bool unjoined_running = false;
  for (const auto& r : ranks_) {
    if (r.running && !arena_.joined(r.rank)) unjoined_running = true;
  }
  const bool remove = arena_.attached() >= ranks_.size() ||
                      now - started_ >= times_.attach_deadline ||
                      (first_failure_ ? !unjoined_running : joined_rank_exited_);
  if (remove) {
    arena_.remove_name();
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
  // Attaching is seen by polling the counter, only until the name is gone
  // (the last rank to attach also removes it itself): often at first, then
  // rarely for programs that never attach.
  if (!arena_.name_removed()) tighten(now - started_ < std::chrono::seconds(2) ? 10 : 100);
  if (phase_ == Phase::Aborting || phase_ == Phase::Terminating) tighten(until(phase_deadline_));
  if (all_exited_at_) tighten(until(*all_exited_at_ + times_.drain_grace));
  return timeout;
}

int Supervisor::run() {
  std::vector<pollfd> fds;
  std::vector<OutputStream*> owners;
  for (;;) {
    const auto now = Clock::now();
    maybe_remove_name(now);
    advance_phase(now);
    if (running_count() == 0) {
      if (!any_stream_open() || now >= *all_exited_at_ + times_.drain_grace) break;
    }

    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    owners.assign(1, nullptr);
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        if (!s.open()) continue;
        fds.push_back(pollfd{s.fd(), POLLIN, 0});
        owners.push_back(&s);
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
    if (ready < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) owners[i]->drain();
    }
    if (fds[0].revents & POLLIN) handle_signals();
    reap();
  }
  for (auto& r : ranks_) {
    for (auto& s : r.streams) s.close();
  }
  arena_.remove_name();
  print_summary();
  return first_failure_ ? exit_code(*first_failure_) : 0;
}

void Supervisor::print_summary() const {
  if (!first_failure_) {
    if (forwarded_signal_ != 0) {
      std::cerr << "axon-launch: every rank exited 0 after SIG" << ::sigabbrev_np(forwarded_signal_)
                << "\n";
    }
    return;
  }
  const auto& f = *first_failure_;
  std::string line = "axon-launch: " + describe(f);
  if (forwarded_signal_ != 0) {
    line += " after the launcher forwarded SIG" + std::string(::sigabbrev_np(forwarded_signal_));
  }
  if (phase_ != Phase::Running) line += "; the job was aborted and the other ranks stopped";
  line += " (exit status " + std::to_string(exit_code(f)) + ")";
  std::cerr << line << std::endl;
}

}  // namespace axon_launch
