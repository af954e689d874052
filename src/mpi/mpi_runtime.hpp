// The few MPI facilities every part of MpiBackend shares: starting and
// stopping MPI, owning communicators, and turning MPI error codes into our
// exceptions. Nothing outside src/mpi/ includes mpi.h.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed::mpi {

// Initializes MPI once per process (MPI_THREAD_MULTIPLE asked; a lower
// level logs a warning) unless the program already did, and then finalizes it
// at exit. Safe to call from several threads.
void ensure_initialized();

// Whether MPI has been finalized (at this process's exit). Callable at any
// time, also after.
bool finalized();

// Throws PeerFailure "<op> on rank <rank>: <detail>: <MPI's message>" when
// rc is not MPI_SUCCESS.
void check(int rc, std::string_view op, int rank, std::string_view detail);

// An owned communicator that returns errors instead of aborting; freed when
// destroyed unless MPI has been finalized by then.
class Comm {
 public:
  Comm() = default;
  explicit Comm(MPI_Comm comm);  // takes ownership; sets MPI_ERRORS_RETURN
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  explicit operator bool() const { return comm_ != MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  int size_ = 0;
};

// `count` as MPI's int; throws InvalidArgument naming op and rank when it
// does not fit.
int int_count(std::size_t count, std::string_view op, int rank);

}  // namespace axonml::distributed::mpi
