#include "mpi/mpi_runtime.hpp"
#include "mpi/waiting.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "base/log.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::mpi {
namespace {

std::atomic<bool> requests_abandoned{false};
std::atomic<bool> gave_up_waiting{false};

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// MPI_Finalize, but when this process has already given up waiting for a
// peer: Open MPI's MPI_Finalize waits for every process to reach it, and a
// peer that hangs (alive, never calling the collective that timed out here)
// never does, so neither would this process nor mpirun ever end. After
// AXON_TIMEOUT the process exits with status 1 instead, without finalizing,
// and mpirun ends the job. A program that recovered from its timeout and
// whose peers all finalize is not affected: they finalize together.
void finalize_or_exit_after(std::chrono::milliseconds timeout) {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mutex);
    if (finished.wait_for(lock, timeout, [&] { return done; })) return;
    log::log(log::Level::Error, world_rank(),
             "MpiBackend: MPI_Finalize has waited {} ms (AXON_TIMEOUT) for peers that never reached "
             "it, after this process gave up waiting for one; exiting with status 1 so that "
             "mpirun ends the job",
             timeout.count());
    std::_Exit(1);
  });
  MPI_Finalize();
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  finished.notify_one();
  watchdog.join();
}

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
      check(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided_), "MPI_Init_thread",
            -1, "starting MPI");
      owned_ = true;
    }
    if (provided_ < MPI_THREAD_SERIALIZED) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      log::log(log::Level::Warn, rank,
               "MPI provides thread level {} (< MPI_THREAD_SERIALIZED): collectives from a "
               "second thread (DDP's overlapped mode) are not safe",
               provided_);
    }
  }
  ~Runtime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) {
      if (requests_abandoned.load()) {
        // MPI_Finalize would wait for them (and for peers that may hang).
        log::log(log::Level::Error, world_rank(),
                 "MpiBackend: an MPI operation timed out or was aborted and never finished; "
                 "calling MPI_Abort instead of MPI_Finalize");
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (gave_up_waiting.load()) {
        finalize_or_exit_after(shm::default_timeout());
      } else {
        MPI_Finalize();
      }
    }
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  bool owned_ = false;
  int provided_ = MPI_THREAD_SINGLE;
};

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

}  // namespace

void ensure_initialized() { static Runtime runtime; }

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
  if (comm_ != MPI_COMM_NULL && !finalized()) MPI_Comm_free(&comm_);
}

int int_count(std::size_t count, std::string_view op, int rank) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank) + ": " +
                          std::to_string(count) + " elements exceed MPI's limit of " +
                          std::to_string(INT_MAX) + " per call");
  }
  return static_cast<int>(count);
}

}  // namespace axonml::distributed::mpi
