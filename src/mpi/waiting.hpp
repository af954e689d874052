// How MpiBackend waits: never inside a blocking MPI call.
//
// Every MPI operation MpiBackend starts is nonblocking; wait() tests its
// requests with a backoff that suits 4 ranks on 2 cores as well as a
// dedicated core (test, then sched_yield, then short sleeps; polling instead
// of the yields while they lose the core to a busy program), and gives up
// with a Timeout after AXON_TIMEOUT seconds (default 300), or with a
// PeerFailure when the endpoint was aborted. Each test also drives MPI's
// progress engine, which is what lets a buffered send() finish while its
// sender waits for something else.
//
// Thread safety: any threads (MPI_THREAD_MULTIPLE); the scratch of wait_all
// is per thread.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <span>
#include <string>

namespace axonml::distributed::mpi {

struct WaitContext {
  int rank = 0;                                 // the rank that waits, for messages
  std::chrono::milliseconds timeout{300'000};   // AXON_TIMEOUT (shm::default_timeout())
  const std::atomic<bool>* aborted = nullptr;   // set by MpiBackend::abort()
  const std::string* abort_reason = nullptr;    // read only once *aborted
  // When set, runs after every test that found the wait not over, once the
  // wait has lasted 100 us (a probe costs as much as a small collective),
  // to look for news the wait should end on (a peer's notice that it gave
  // up the call); it ends the wait by throwing.
  std::function<void()> watch;
  // Whether this node's ranks outnumber its cores (shm::ranks_outnumber_cores):
  // then a yield that takes long was a peer rank's turn, and waits keep
  // yielding; else one that lost the core to a busy program stops them
  // (shm::detail::yields_lose_the_core, as the shared-memory waits).
  bool oversubscribed = true;
};

// Returns once every request has completed (each becomes MPI_REQUEST_NULL):
// MPI_SUCCESS, or MPI's error code when one failed (`statuses`, when given,
// then say which). `describe(requests)` says what is awaited, given the
// requests as they stand (a still-active one is not MPI_REQUEST_NULL);
// called only to build an error. Throws Timeout "rank R: timed out after S s
// (AXON_TIMEOUT): <describe>", or PeerFailure when aborted; the requests
// still active are then left to the caller.
int wait_all(std::span<MPI_Request> requests, const WaitContext& context,
             const std::function<std::string(std::span<const MPI_Request>)>& describe,
             MPI_Status* statuses = MPI_STATUSES_IGNORE);

// Returns once done() (which may call MPI: a probe, say) returns true, with
// wait_all's backoff, Timeout and PeerFailure; `describe()` says what is
// awaited.
void wait_until(const std::function<bool()>& done, const WaitContext& context,
                const std::function<std::string()>& describe);

// Says that this process has given up on MPI requests that may never
// complete (a timeout in a collective): at exit MPI is then aborted instead
// of finalized, since MPI_Finalize would wait for them, and mpirun ends the
// job.
void note_abandoned_requests();

// Says that this process gave up waiting for a peer (a Timeout, an abort):
// at exit the barrier before MPI_Finalize, which waits for every process to
// reach it, is then given AXON_TIMEOUT before the process exits with status 1
// without finalizing, so that a peer that hangs cannot keep this process and
// mpirun alive.
void note_gave_up_waiting();

}  // namespace axonml::distributed::mpi
