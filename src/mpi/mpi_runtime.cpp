#include "mpi/mpi_runtime.hpp"
#include "mpi/waiting.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "base/log.hpp"
#include "base/text.hpp"
#include "shm/exit_steps.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::mpi {
namespace {

std::atomic<bool> requests_abandoned{false};
std::atomic<bool> gave_up_waiting{false};

// Abort notices between processes (tell_job_aborted, receive_job_aborted).
constexpr int kAbortTag = 1;
MPI_Comm abort_comm = MPI_COMM_NULL;  // made by Runtime, before any backend
std::atomic<bool> abort_told{false};
std::atomic<bool> abort_received{false};
std::mutex abort_mutex;
std::string abort_notice;  // written under abort_mutex before abort_received is set

// CallInFlight's: the calls inside MPI now, and whether exit has begun
// (set by the runtime's destructor, before it waits for the count to fall
// to zero; both sequentially consistent, so a call either sees the flag or
// is counted).
std::atomic<int> calls_in_flight{0};
std::atomic<bool> exiting{false};
// Every call begun (refused ones too): at exit, whether threads still call.
std::atomic<std::uint64_t> calls_begun{0};
// Set by the exit once calls in flight outlasted a grace period: their waits
// end then (exit_begun()).
std::atomic<bool> ending_waits{false};
// Whether this library started MPI (and so finalizes it at exit): set by the
// Runtime, read by exit_before_static_destructors().
std::atomic<bool> runtime_owns_mpi{false};

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// The exit's steps (shm/exit_steps.hpp) before MPI_Finalize: should a call
// outlast even its own AXON_TIMEOUT after them, MPI cannot be finalized
// under it: the process exits with status 1 without finalizing, and mpirun
// ends the job. Run by the Runtime's destructor even with no call in flight:
// a call begun after it, while MPI is being finalized, is refused.
shm::ExitSteps exit_steps() {
  shm::ExitSteps steps;
  steps.backend = "MpiBackend";
  steps.goes_on_to = "MPI_Finalize";
  steps.status_1_means = "without finalizing MPI, so that mpirun ends the job";
  steps.rank = world_rank();
  steps.in_flight = [] { return static_cast<std::uint64_t>(calls_in_flight.load()); };
  steps.begun = [] { return calls_begun.load(); };
  steps.refuse_calls = [] { exiting.store(true); };  // CallInFlight reads it
  steps.give_up_waits = [] {
    tell_job_aborted("rank " + std::to_string(world_rank()) + " is exiting (its main returned, or exit() was "
                     "called) while a thread of it is still inside a call of this library");
    ending_waits.store(true);  // their waits end (exit_begun())
  };
  return steps;
}

// Waits until every process has come to exit, then finalizes.
//
// Open MPI's MPI_Finalize is a fence: it waits for every process to reach
// it, and a peer that hangs alive (never calling the collective that timed
// out here) never does. A process must not leave from inside that fence
// either: when processes die in it, mpirun can crash in its own clean-up
// (PMIx_server_finalize: 3 of 22 runs of a test where a peer is away) or
// hang after reporting the failed job, so a job that should end in seconds
// fails or never ends.
//
// So every process first meets the others in a barrier of its own on
// `exit_comm`, which it can leave. Once that completes, every process is at
// exit and MPI_Finalize's fence has nothing to wait for. A process that gave
// up waiting for a peer gives the barrier AXON_TIMEOUT and then exits with
// status 1 without finalizing, from outside any MPI call, and mpirun ends the
// job. A process that did not give up waits as MPI_Finalize itself would:
// as long as its peers take to finish (sleeping between tests, not spinning).
void meet_at_exit_then_finalize(MPI_Comm exit_comm) {
  const int rank = world_rank();
  const bool gave_up = gave_up_waiting.load();
  const auto timeout = shm::default_timeout_at_exit();
  const auto started = std::chrono::steady_clock::now();
  // Not wait_all(): this runs in a static destructor, after the main
  // thread's thread_local objects (wait_all's scratch vectors) are gone.
  MPI_Request request = MPI_REQUEST_NULL;
  auto pause = std::chrono::microseconds(200);
  int rc = MPI_Ibarrier(exit_comm, &request);
  for (int done = 0; rc == MPI_SUCCESS;) {
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) break;
    if (gave_up && std::chrono::steady_clock::now() - started >= timeout) {
      log::log(log::Level::Error, rank,
               "MpiBackend: waited {} ms (AXON_TIMEOUT) at exit for peers that never reached "
               "MPI_Finalize, after this process gave up waiting for one; exiting with status 1 "
               "so that mpirun ends the job",
               timeout.count());
      std::fflush(nullptr);  // _Exit does not flush what the program printed
      std::_Exit(1);
    }
    // Exit is no hot path: from 0.2 ms up to 10 ms between tests, so a rank
    // that waits long here (for a peer still writing a checkpoint) costs
    // next to nothing.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
  if (rc != MPI_SUCCESS) {
    // The barrier itself failed (a peer is gone): the fence would not end.
    log::log(log::Level::Error, rank,
             "MpiBackend: the barrier before MPI_Finalize failed (MPI error {}); exiting with "
             "status 1 so that mpirun ends the job",
             rc);
    std::fflush(nullptr);
    std::_Exit(1);
  }
  std::lock_guard lock(finalize_mutex());
  MPI_Comm_free(&exit_comm);
  if (abort_comm != MPI_COMM_NULL) MPI_Comm_free(&abort_comm);
  MPI_Finalize();
}

// The status exit() was called with (main's return value), from on_exit:
// ensure_initialized() registers note_exit_status after the Runtime exists,
// so that it runs before the Runtime's destructor reads it.
std::atomic<int> exit_status{0};
void note_exit_status(int status, void*) { exit_status.store(status); }

// Open MPI's MPI_Init waits for every process of the job, with no timeout
// of its own: a process that ended (status 0) without calling World::init()
// left the others there for ever, AXON_TIMEOUT or not (a review: 8 of 10
// such jobs hung). While it lives, a thread ends this process, saying why,
// once AXON_TIMEOUT has passed, as every other wait of this library gives up;
// mpirun then ends the job.
class InitWatchdog {
 public:
  explicit InitWatchdog(std::chrono::milliseconds timeout) : thread_([this, timeout] { watch(timeout); }) {}
  ~InitWatchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    returned_.notify_one();
    thread_.join();
  }
  InitWatchdog(const InitWatchdog&) = delete;
  InitWatchdog& operator=(const InitWatchdog&) = delete;

 private:
  void watch(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (returned_.wait_for(lock, timeout, [this] { return done_; })) return;
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const std::string line =
        std::string("axonml-distributed: rank ") + (rank != nullptr ? rank : "?") + ": MPI_Init_thread has not returned after " +
        format_seconds(std::chrono::duration<double>(timeout).count()) +
        " s (AXON_TIMEOUT, at least 10 s): Open MPI waits there for every process of the job, so one of them has ended, or has "
        "not reached World::init(), without starting MPI; ending this process (exit status 1)\n";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
    ::_exit(1);
  }

  std::mutex mutex_;
  std::condition_variable returned_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the fields above exist
};

// Started by the first ensure_initialized(); its destructor runs at exit,
// after every object constructed later (a static World, say) is gone.
class Runtime {
 public:
  Runtime() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&provided_);
    } else {
      int argc = 0;
      char** argv = nullptr;
      // MULTIPLE: a rank may drive its groups from threads of their own at
      // once, and run send / recv beside a group's collectives (Backend's
      // promise). Open MPI provides it; the cost on a small all-reduce was
      // within this machine's noise (docs/design.md).
      {
        // At least 10 s: MPI_Init itself takes up to 1.5 s here, and a valid
        // AXON_TIMEOUT=0.3 failed healthy jobs of 4 ranks (a diff review).
        const InitWatchdog watchdog(std::max<std::chrono::milliseconds>(shm::default_timeout(), std::chrono::seconds(10)));
        check(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided_), "MPI_Init_thread",
              -1, "starting MPI");
      }
      owned_ = true;
      runtime_owns_mpi.store(true);
      // Collective, like MpiBackend::create() that calls us: every process
      // makes it, for meet_at_exit_then_finalize().
      check(MPI_Comm_dup(MPI_COMM_WORLD, &exit_comm_), "MPI_Comm_dup", world_rank(),
            "creating the communicator that meets at exit");
      MPI_Comm_set_errhandler(exit_comm_, MPI_ERRORS_RETURN);
    }
    // Collective too: the channel of MpiBackend::abort()'s notices
    // (tell_job_aborted), apart from every group's messages.
    check(MPI_Comm_dup(MPI_COMM_WORLD, &abort_comm), "MPI_Comm_dup", world_rank(),
          "creating the communicator of abort notices");
    MPI_Comm_set_errhandler(abort_comm, MPI_ERRORS_RETURN);
    if (provided_ < MPI_THREAD_MULTIPLE) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      log::log(log::Level::Warn, rank,
               "MPI provides thread level {} (< MPI_THREAD_MULTIPLE{}): calls into this library from two "
               "threads at once (two groups, send / recv beside a collective) are not safe; "
               "make them one after another",
               provided_, initialized ? ", as the program initialized it" : "");
    }
  }
  ~Runtime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) {
      shm::refuse_calls_then_wait_for_those_in_flight(exit_steps());
      if (const int status = exit_status.load(); status != 0) {
        // A failing process: peers waiting for it in a collective waited
        // until AXON_TIMEOUT while it waited for them in the exit's barrier,
        // and then blamed each other (a review). Told, they throw
        // PeerFailure naming it at once; peers busy elsewhere finish their
        // work (an MPI_Abort here ended them too, and raced the others'
        // aborts for mpirun's blame; a diff review).
        tell_job_aborted("rank " + std::to_string(world_rank()) + " exited with status " + std::to_string(status));
      }
      if (requests_abandoned.load()) {
        // MPI_Finalize would wait for them (and for peers that may hang).
        if (ending_waits.load()) {
          log::log(log::Level::Error, world_rank(),
                   "MpiBackend: a call another thread was in when the process exited never finished; "
                   "calling MPI_Abort instead of MPI_Finalize");
        } else {
          log::log(log::Level::Error, world_rank(),
                   "MpiBackend: an MPI operation timed out or was aborted and never finished; "
                   "calling MPI_Abort instead of MPI_Finalize");
        }
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      meet_at_exit_then_finalize(exit_comm_);
    }
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  bool owned_ = false;
  MPI_Comm exit_comm_ = MPI_COMM_NULL;  // made when owned_
  int provided_ = MPI_THREAD_SINGLE;
};

}  // namespace

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

void ensure_initialized() {
  static Runtime runtime;
  static const bool exit_status_noted = ::on_exit(note_exit_status, nullptr) == 0;
  (void)exit_status_noted;
}

// Why: under MPI, abort() marked only its own process: a peer waiting for
// the aborting rank waited out AXON_TIMEOUT and then blamed it for never
// calling the op, where under axon-launch it throws at once with the reason
// (a review).
void tell_job_aborted(const std::string& notice) {
  if (abort_comm == MPI_COMM_NULL || finalized() || abort_told.exchange(true)) return;
  send_notice_to_all(abort_comm, notice, kAbortTag);
}

void send_notice_to_all(MPI_Comm comm, const std::string& text, int tag) {
  const auto* kept = new std::string(text.substr(0, 1024));  // deliberately leaked: MPI may read it
  int size = 1, me = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &me);
  for (int p = 0; p < size; ++p) {
    if (p == me) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(kept->data(), static_cast<int>(kept->size()), MPI_CHAR, p, tag, comm, &request) == MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
}

void note_job_aborted_here(const std::string& notice) {
  std::lock_guard lock(abort_mutex);
  if (!abort_received.load(std::memory_order_relaxed)) {  // one that came first (another thread's) stays the reason
    abort_notice = notice;
    abort_received.store(true, std::memory_order_release);
  }
}

std::optional<std::string> job_aborted_received() {
  if (!abort_received.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lock(abort_mutex);
  return abort_notice;
}

std::optional<std::string> receive_job_aborted() {
  if (auto seen = job_aborted_received()) return seen;
  if (abort_comm == MPI_COMM_NULL || finalized()) return std::nullopt;
  int arrived = 0;
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, kAbortTag, abort_comm, &arrived, &message, &status) != MPI_SUCCESS || !arrived) {
    return std::nullopt;
  }
  int length = 0;
  MPI_Get_count(&status, MPI_CHAR, &length);
  std::string notice(static_cast<std::size_t>(std::max(length, 0)), '\0');
  MPI_Mrecv(notice.data(), length, MPI_CHAR, &message, MPI_STATUS_IGNORE);
  note_job_aborted_here(notice);
  return job_aborted_received();
}

// The exit's first step, run by an atexit function that the first call
// registers, and so before the destructor of a World with static storage
// duration (made before that call), which the Runtime's own destructor came
// after: a thread still in a call on the World's backend ran on in it as the
// World destroyed it (SIGSEGV in MPI_Testsome, 8 runs of 8; a review), where
// a World that outlives the exit got the promised refusal. Only while a
// call is in flight: with none, a static destructor of the program's that
// runs later may still make its calls, as before. Then up to a second more
// until 50 ms pass with no call begun: a thread whose call was refused
// handles the InvalidArgument (printing its rank, say) before the World goes.
// A thread that touches the World after that is the program's own use of a
// destroyed object; the README says to join such threads. Not covered (the
// review of the change): statics made at or after the first call (their
// destructors run before this function), a thread that is between calls
// as the exit begins (nothing in flight: nothing is done), and one that
// stays out of the library for over 50 ms after its refusal.
namespace {
void exit_before_static_destructors() {
  if (!runtime_owns_mpi.load() || calls_in_flight.load() == 0 || finalized()) return;
  const shm::ExitSteps steps = exit_steps();
  shm::refuse_calls_then_wait_for_those_in_flight(steps);
  shm::wait_until_calls_stop(steps);
}
}  // namespace

CallInFlight::CallInFlight(const char* op, int rank, const std::string& group) {
  static const bool exit_registered = std::atexit(exit_before_static_destructors) == 0;
  (void)exit_registered;
  calls_begun.fetch_add(1, std::memory_order_relaxed);
  calls_in_flight.fetch_add(1);
  // After MPI_Finalize the call's own check says so (a call from an atexit
  // handler); before it, this process is on its way there.
  if (!exiting.load() || finalized()) return;
  // Told while still counted: the exit must not free the notices'
  // communicator or finalize MPI under the send.
  tell_job_aborted("rank " + std::to_string(rank) + " is exiting (its main returned, or exit() was called) while a "
                   "thread of it still called " + op + " in group " + group);
  calls_in_flight.fetch_sub(1);
  throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank) + " in group " + group +
                        ": this process is exiting (its main returned, or exit() was called) and MPI is about to be "
                        "finalized, but a thread still calls this library; join every thread that uses it before "
                        "main returns");
}

CallInFlight::~CallInFlight() { calls_in_flight.fetch_sub(1); }

std::mutex& finalize_mutex() {
  static auto* mutex = new std::mutex;  // never destroyed: a thread may free a group after static destructors
  return *mutex;
}

bool exit_begun() { return ending_waits.load(std::memory_order_relaxed); }

void note_abandoned_requests() { requests_abandoned.store(true); }

void note_gave_up_waiting() { gave_up_waiting.store(true); }

void check(int rc, std::string_view op, int rank, std::string_view detail) {
  if (rc == MPI_SUCCESS) return;
  note_gave_up_waiting();  // MPI failed us: its MPI_Finalize may wait for a peer that is gone
  char message[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, message, &length) != MPI_SUCCESS) length = 0;
  throw PeerFailure(std::string(op) + " on rank " + std::to_string(rank) + ": " +
                    std::string(detail) + ": MPI error " + std::to_string(rc) + " (" +
                    std::string(message, static_cast<std::size_t>(length)) + ")");
}

Comm::Comm(MPI_Comm comm) : comm_(comm) {
  if (comm_ == MPI_COMM_NULL) return;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Comm::Comm(Comm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(std::exchange(other.rank_, -1)),
      size_(std::exchange(other.size_, 0)) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    Comm old(std::move(*this));
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = std::exchange(other.rank_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Comm::~Comm() {
  if (comm_ == MPI_COMM_NULL) return;
  std::lock_guard lock(finalize_mutex());
  if (!finalized()) MPI_Comm_free(&comm_);
}

int int_count(std::size_t bytes, std::string_view what, int rank) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    // It said "elements" of a count in bytes (the MPI review).
    throw InvalidArgument(std::string(what) + " on rank " + std::to_string(rank) + ": " + std::to_string(bytes) +
                          " bytes in one MPI call exceed MPI's limit of " + std::to_string(INT_MAX) +
                          " (its counts are ints); under MPI a send or recv, a reduce, gather or scatter, one "
                          "rank's block of an all_gather, reduce_scatter or all_to_all, and a broadcast across "
                          "nodes stay within it (all_reduce, and broadcast within a node or flat, split larger "
                          "buffers; shared memory has no such limit)");
  }
  return static_cast<int>(bytes);
}

}  // namespace axonml::distributed::mpi
