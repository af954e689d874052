#include "mpi/waiting.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/text.hpp"

namespace axonml::distributed::mpi {

int wait_all(std::span<MPI_Request> requests, const WaitContext& context,
             const std::function<std::string(std::span<const MPI_Request>)>& describe,
             MPI_Status* statuses) {
  // Yield for the first millisecond (a peer on a shared core gets it at
  // once), then sleep 50 us between tests: latency stays low, and a rank
  // that waits seconds for a slow peer costs next to nothing.
  constexpr auto kYieldPhase = std::chrono::milliseconds(1);
  constexpr auto kSleep = std::chrono::microseconds(50);
  const auto started = std::chrono::steady_clock::now();
  // MPI_Testsome, not MPI_Testall: it completes what has arrived, so that
  // describe() can name exactly the peers still awaited.
  // Kept per thread: a 4-byte all_reduce should not pay for allocations.
  thread_local std::vector<int> indices;
  thread_local std::vector<MPI_Status> arrived;
  indices.resize(std::max(indices.size(), requests.size()));
  arrived.resize(std::max(arrived.size(), requests.size()));
  for (;;) {
    int outcount = 0;
    const int rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &outcount,
                                indices.data(), arrived.data());
    if (outcount != MPI_UNDEFINED && statuses != MPI_STATUSES_IGNORE) {
      for (int i = 0; i < outcount; ++i) statuses[indices[static_cast<std::size_t>(i)]] = arrived[static_cast<std::size_t>(i)];
    }
    if (rc != MPI_SUCCESS) return rc;
    if (outcount == MPI_UNDEFINED) return MPI_SUCCESS;  // every request is MPI_REQUEST_NULL
    if (context.aborted && context.aborted->load(std::memory_order_acquire)) {
      note_gave_up_waiting();
      throw PeerFailure("rank " + std::to_string(context.rank) + ": " + describe(requests) +
                        ": the job was aborted: " + *context.abort_reason);
    }
    const auto waited = std::chrono::steady_clock::now() - started;
    if (waited >= context.timeout) {
      note_gave_up_waiting();
      throw Timeout("rank " + std::to_string(context.rank) + ": timed out after " +
                    format_seconds(std::chrono::duration<double>(context.timeout).count()) +
                    " s (AXON_TIMEOUT): " + describe(requests));
    }
    if (waited < kYieldPhase) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }
}

}  // namespace axonml::distributed::mpi
