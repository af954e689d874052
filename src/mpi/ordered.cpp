#include "mpi/ordered.hpp"

#include <algorithm>

#include "axonml/distributed/error.hpp"
#include "kernels/reduce.hpp"

namespace axonml::distributed::mpi {
namespace {

constexpr std::size_t kMaxPartBytes = std::size_t{1} << 30;

std::vector<const std::byte*> rank_order(const std::byte* base, std::size_t stride, int members) {
  std::vector<const std::byte*> sources(static_cast<std::size_t>(members));
  for (int q = 0; q < members; ++q) sources[static_cast<std::size_t>(q)] = base + static_cast<std::size_t>(q) * stride;
  return sources;
}

}  // namespace

void wait_collective(MPI_Request& request, const WaitContext& wait, const std::string& what) {
  try {
    const int rc = wait_all(std::span<MPI_Request>(&request, 1), wait, [&](std::span<const MPI_Request>) {
      return what + ": every member had called it, but MPI's exchange did not finish";
    });
    check(rc, what, wait.rank, "waiting for MPI");
  } catch (const Error&) {
    note_abandoned_requests();
    throw;
  }
}

void ordered_all_reduce(const Comm& comm, std::byte* data, std::size_t count, DataType type,
                        ReduceOp op, const WaitContext& wait, const std::string& what,
                        std::vector<std::byte>& scratch) {
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t es = size_of(type);
  const std::size_t max_part = kMaxPartBytes / es;
  std::vector<int> counts(static_cast<std::size_t>(n)), displs(static_cast<std::size_t>(n));
  std::vector<int> mine_counts(static_cast<std::size_t>(n)), mine_displs(static_cast<std::size_t>(n));
  for (std::size_t done = 0; done < count;) {
    const std::size_t part = std::min(max_part, count - done);
    std::byte* base = data + done * es;
    // Slice b of this part: elements [part * b / n, part * (b + 1) / n).
    auto begin = [&](int b) { return part * static_cast<std::size_t>(b) / static_cast<std::size_t>(n); };
    for (int b = 0; b < n; ++b) {
      counts[static_cast<std::size_t>(b)] = static_cast<int>((begin(b + 1) - begin(b)) * es);
      displs[static_cast<std::size_t>(b)] = static_cast<int>(begin(b) * es);
    }
    const std::size_t slice = begin(me + 1) - begin(me);
    for (int q = 0; q < n; ++q) {
      mine_counts[static_cast<std::size_t>(q)] = static_cast<int>(slice * es);
      mine_displs[static_cast<std::size_t>(q)] = static_cast<int>(static_cast<std::size_t>(q) * slice * es);
    }
    scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(n) * slice * es));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ialltoallv(base, counts.data(), displs.data(), MPI_BYTE, scratch.data(), mine_counts.data(),
                         mine_displs.data(), MPI_BYTE, comm.get(), &request),
          what, wait.rank, "MPI_Ialltoallv of the slices");
    wait_collective(request, wait, what + " (all-to-all of the slices)");
    if (slice > 0) {
      kernels::reduce(type, op, rank_order(scratch.data(), slice * es, n), base + begin(me) * es, slice);
    }
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, counts.data(), displs.data(), MPI_BYTE,
                          comm.get(), &request),
          what, wait.rank, "MPI_Iallgatherv of the reduced slices");
    wait_collective(request, wait, what + " (all-gather of the reduced slices)");
    done += part;
  }
}

void ordered_reduce_scatter(const Comm& comm, const std::byte* send, std::byte* recv,
                            std::size_t count, DataType type, ReduceOp op, const WaitContext& wait,
                            const std::string& what, std::vector<std::byte>& scratch) {
  const int n = comm.size();
  const std::size_t bytes = count * size_of(type);
  const int block = int_count(bytes, what, wait.rank);
  scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(n) * bytes));
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ialltoall(send, block, MPI_BYTE, scratch.data(), block, MPI_BYTE, comm.get(), &request), what,
        wait.rank, "MPI_Ialltoall of the blocks");
  wait_collective(request, wait, what + " (all-to-all of the blocks)");
  if (count > 0) kernels::reduce(type, op, rank_order(scratch.data(), bytes, n), recv, count);
}

void ordered_reduce(const Comm& comm, const std::byte* send, std::byte* recv, std::size_t count,
                    DataType type, ReduceOp op, int root, const WaitContext& wait,
                    const std::string& what, std::vector<std::byte>& scratch) {
  const int n = comm.size();
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * size_of(type);
  const int each = int_count(bytes, what, wait.rank);
  if (is_root) scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(n) * bytes));
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Igather(send, each, MPI_BYTE, is_root ? scratch.data() : nullptr, each, MPI_BYTE, root,
                    comm.get(), &request),
        what, wait.rank, "MPI_Igather to the root");
  wait_collective(request, wait, what + " (gather to the root)");
  if (is_root && count > 0) kernels::reduce(type, op, rank_order(scratch.data(), bytes, n), recv, count);
}

}  // namespace axonml::distributed::mpi
