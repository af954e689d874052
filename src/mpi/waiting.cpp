#include "mpi/waiting.hpp"
#include "mpi/mpi_runtime.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/text.hpp"
#include "shm/launcher_report.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::mpi {

namespace {

// How long a wait that has received another process's abort notice goes on
// testing before it gives up (see poll).
constexpr auto kNoticeGrace = std::chrono::milliseconds(100);

// Whether test() returns true within `grace`, testing all along (each test
// drives MPI's progress), sleeping 50 us between tests.
template <typename Test>
bool finishes_within(Test& test, std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  do {
    if (test()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(50));  // as poll's waits do after their first ms
  } while (std::chrono::steady_clock::now() < until);
  return test();
}

// Calls test() until it returns true, yielding for the first millisecond (a
// peer on a shared core gets it at once), then sleeping 50 us between tests:
// latency stays low, and a rank that waits seconds for a slow peer costs next
// to nothing. Throws PeerFailure when aborted, Timeout after the timeout.
//
// A rank with a core of its own whose yields lose the core to a busy
// program (the shared-memory waits' rule: shm::detail::kLostCoreYield)
// tests without yielding through the yield phase instead, then sleeps: each
// yield handed that program the rest of its slice, and every wait met it
// again (flat MPI all_reduce at n=2 beside two busy processes on this 2-core
// machine: 4 ms at 4 B, 12 ms from 16 KiB, against 1.3 us and 15 us quiet).
// Not the shared-memory waits' 50 us of polling: they sleep on a futex the
// peer rings, where these sleep 50 us at a time, which take 120-135 us here,
// and small ops took 0.4-0.7 ms after 50 us of polling (a review).
template <typename Test, typename Describe>
void poll(Test&& test, const WaitContext& context, Describe&& describe) {
  constexpr auto kYieldPhase = std::chrono::milliseconds(1);
  constexpr auto kSleep = std::chrono::microseconds(50);
  // Notices (another process's abort, a peer that gave up the call: the
  // watch) are probed for only in waits this long: a probe costs about a
  // microsecond, as much as a whole small all_reduce (a review measured 7%
  // for one), and a notice need not be seen within less.
  constexpr auto kNoticesAfter = std::chrono::microseconds(100);
  const auto started = std::chrono::steady_clock::now();
  const bool core_of_its_own = !context.oversubscribed;
  bool yielding = !core_of_its_own || !distributed::shm::detail::yields_lose_the_core(started);
  while (!test()) {
    const auto waited = distributed::shm::waited_since(started);
    if (waited >= kNoticesAfter) {
      if (context.watch) context.watch();
      if (const auto notice = receive_job_aborted()) {  // an abort(): another process's, or this one's on another group
        // The notice may overtake the last messages of this call: a peer
        // that did its part and then exited non-zero tells at exit, and its
        // messages (and the matches that complete this rank's sends to it)
        // are done only as MPI's progress engine gets to them, and the
        // others' as they are scheduled. Give them a moment before giving up
        // a call that was all but done (a review: 2-3 runs in 8 threw from
        // the last barrier, which every rank had reached). A wait that the
        // notice's sender never comes to ends that much later.
        if (finishes_within(test, kNoticeGrace)) return;
        note_gave_up_waiting();
        throw PeerFailure("rank " + std::to_string(context.rank) + ": " + describe() + ": job aborted: " + *notice);
      }
      // A thread left waiting as its process exits: the exit waits for it
      // before MPI_Finalize, and its peers, told of the exit, may never
      // answer (a recv whose send never comes held the exit for AXON_TIMEOUT).
      if (exit_begun()) {
        note_gave_up_waiting();
        throw InvalidArgument("rank " + std::to_string(context.rank) + ": " + describe() +
                              ": this process is exiting (its main returned, or exit() was called) while this "
                              "thread waits here; join every thread that uses the library before main returns");
      }
    }
    if (context.aborted && context.aborted->load(std::memory_order_acquire)) {
      note_gave_up_waiting();
      throw PeerFailure("rank " + std::to_string(context.rank) + ": " + describe() +
                        ": the job was aborted: " + *context.abort_reason);
    }
    if (waited >= context.timeout) {
      note_gave_up_waiting();
      throw Timeout("rank " + std::to_string(context.rank) + ": timed out after " +
                    format_seconds(std::chrono::duration<double>(context.timeout).count()) +
                    " s (AXON_TIMEOUT): " + describe());
    }
    if (waited >= kYieldPhase) {
      std::this_thread::sleep_for(kSleep);
    } else if (!yielding) {
      distributed::shm::detail::pause_cpu();
    } else {
      const auto before = std::chrono::steady_clock::now();
      distributed::shm::detail::yield_cpu();
      const auto after = std::chrono::steady_clock::now();
      if (core_of_its_own && after - before > distributed::shm::detail::kLostCoreYield) {
        distributed::shm::detail::remember_costly_yield(after);
        yielding = false;  // this wait is past kYieldPhase by now: it sleeps from here on
      }
    }
  }
}

}  // namespace

int wait_all(std::span<MPI_Request> requests, const WaitContext& context,
             const std::function<std::string(std::span<const MPI_Request>)>& describe,
             MPI_Status* statuses) {
  // MPI_Testsome, not MPI_Testall: it completes what has arrived, so that
  // describe() can name exactly the peers still awaited.
  // Kept per thread: a 4-byte all_reduce should not pay for allocations.
  thread_local std::vector<int> indices;
  thread_local std::vector<MPI_Status> arrived;
  indices.resize(std::max(indices.size(), requests.size()));
  arrived.resize(std::max(arrived.size(), requests.size()));
  int rc = MPI_SUCCESS;
  poll(
      [&] {
        int outcount = 0;
        rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &outcount, indices.data(),
                          arrived.data());
        if (outcount != MPI_UNDEFINED && statuses != MPI_STATUSES_IGNORE) {
          for (int i = 0; i < outcount; ++i) {
            statuses[indices[static_cast<std::size_t>(i)]] = arrived[static_cast<std::size_t>(i)];
          }
        }
        // Done when one failed, or every request is MPI_REQUEST_NULL.
        return rc != MPI_SUCCESS || outcount == MPI_UNDEFINED;
      },
      context, [&] { return describe(requests); });
  return rc;
}

void wait_until(const std::function<bool()>& done, const WaitContext& context,
                const std::function<std::string()>& describe) {
  poll(done, context, describe);
}

}  // namespace axonml::distributed::mpi
