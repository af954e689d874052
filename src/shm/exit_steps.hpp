// The steps a rank's exit takes while another thread of it is still inside
// a call of this library. Both exits take them: axon-launch ranks' before
// the static destructors (shm/exit_guard.cpp) and MPI ranks' before
// MPI_Finalize (mpi/mpi_runtime.cpp); they differ only in what they count,
// how they refuse a call and what giving up tells the peers, which
// ExitSteps names:
//   1. a second for the calls in flight to end: a call whose peers are in
//      it too, or come within the second, completes (ending such calls at
//      once aborted jobs that would have finished; a review);
//   2. from then on every call begun is refused (refuse_calls);
//   3. after a second more, the calls still waiting are given up on
//      (give_up_waits: their waits end and the peers are told), as one may
//      wait for what never comes (a recv nobody answers);
//   4. then until no call is in flight: a wait ends within a sleep slice, a
//      call busy copying or reducing when done; one still in flight after
//      AXON_TIMEOUT and a second (a bug) must not meet its World or MPI
//      destroyed under it, so the process exits with status 1 instead.
// The atexit functions then wait_until_calls_stop(), so that a thread whose
// call was refused handles the InvalidArgument (printing its rank, say)
// before the World goes.
//
// Thread safety: the exit's thread only.
#pragma once

#include <cstdint>
#include <functional>

namespace axonml::distributed::shm {

struct ExitSteps {
  const char* backend = "";         // "ShmBackend", for the log lines
  const char* goes_on_to = "";      // what the exit does next: "the static destructors"
  const char* status_1_means = "";  // how step 4's exit spares it: "before the static destructors"
  int rank = -1;                    // the job's rank, for the log lines
  std::function<std::uint64_t()> in_flight;  // calls in flight now, on every thread
  std::function<std::uint64_t()> begun;      // calls begun so far (may wrap)
  std::function<void()> refuse_calls;        // step 2
  std::function<void()> give_up_waits;       // step 3
};

// Steps 1 to 4. With no call in flight it only refuses the calls to come.
void refuse_calls_then_wait_for_those_in_flight(const ExitSteps& steps);

// Up to a second, until 50 ms pass with no call begun and none in flight.
void wait_until_calls_stop(const ExitSteps& steps);

}  // namespace axonml::distributed::shm
