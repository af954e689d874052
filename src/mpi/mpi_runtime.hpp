// The few MPI facilities every part of MpiBackend shares: starting and
// stopping MPI, owning communicators, and turning MPI error codes into our
// exceptions. Nothing outside src/mpi/ includes mpi.h.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <optional>
#include <mutex>
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

// Sends the first 1024 characters of `text` to every other member of
// `comm` with `tag`, and returns at once: the requests are freed and the
// text is kept for good (MPI may read it after this returns); short, so it
// goes eagerly and holds nothing back at MPI_Finalize. Best effort.
void send_notice_to_all(MPI_Comm comm, const std::string& text, int tag);

// MpiBackend::abort()'s reach beyond this process: sends `notice` ("rank R
// aborted: <reason>") to every other process of the job, once per process,
// on a communicator used for nothing else (made with the runtime). Best
// effort: nothing here throws.
void tell_job_aborted(const std::string& notice);

// MpiBackend::abort()'s reach within this process: its other groups (each
// with its own backend) read the notice as one from another process, so
// that their calls and waits throw PeerFailure with the reason at once, as
// under axon-launch, where the whole arena is aborted. Before, a subgroup of
// the aborting rank went on, and its waits ran out AXON_TIMEOUT (a review).
void note_job_aborted_here(const std::string& notice);

// The first abort notice this process has received from another (or noted
// itself: note_job_aborted_here), probing
// for one (MPI_Improbe, so any thread may call it) when none has come yet;
// nullopt when none has. Every wait polls it.
std::optional<std::string> receive_job_aborted();

// The notice receive_job_aborted() has received, without probing: a flag
// read, for the start of every call.
std::optional<std::string> job_aborted_received();

// One call of a backend into MPI, held from its start to its end. At exit
// the runtime finalizes MPI, and a call another thread is still in, or makes
// after, would run into a finalized MPI (a segfault; found by a review: a
// rank whose main returned while a thread of it looped all_reduces). So the
// runtime's exit first refuses new calls, then waits for those in flight to
// end, and only then finalizes.
//
// Thread safety: any threads.
class CallInFlight {
 public:
  // Throws InvalidArgument naming `op`, `rank` and `group` when this process
  // has begun to exit, after telling every other process (their waits for
  // this one then end with the reason, as after MpiBackend::abort()).
  CallInFlight(const char* op, int rank, const std::string& group);
  ~CallInFlight();
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;
};

// Held while MPI is finalized, and by whatever frees MPI objects and asks
// finalized() first (Comm's destructor, a group's): a thread that drops the
// last copy of a group as the process exits frees its communicators either
// before MPI_Finalize or not at all, never during it.
std::mutex& finalize_mutex();

// Whether this process's exit has given up on the calls other threads are
// still in (a second after it began): their waits then end (waiting.cpp).
bool exit_begun();

// `bytes` as MPI's int count of MPI_BYTE; throws InvalidArgument naming
// `what` (the op, or the call's description) and rank when it does not fit.
int int_count(std::size_t bytes, std::string_view what, int rank);

}  // namespace axonml::distributed::mpi
