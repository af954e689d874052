#include "mpi/mpi_runtime.hpp"
#include "mpi/waiting.hpp"

#include <atomic>
#include <climits>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "base/log.hpp"

namespace axonml::distributed::mpi {
namespace {

std::atomic<bool> requests_abandoned{false};

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
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        log::log(log::Level::Error, rank,
                 "MpiBackend: an MPI operation timed out or was aborted and never finished; "
                 "calling MPI_Abort instead of MPI_Finalize");
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      MPI_Finalize();
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

void check(int rc, std::string_view op, int rank, std::string_view detail) {
  if (rc == MPI_SUCCESS) return;
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
