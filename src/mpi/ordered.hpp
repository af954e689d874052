// Reductions over MPI whose results are those of the shared-memory backend,
// bit for bit: MPI only moves the data (nonblocking collectives, waited for
// with mpi::wait_all), and kernels::reduce combines it with the sources in
// rank order, as every shared-memory algorithm does. MPI's own MPI_SUM would
// associate floats in whatever order its algorithm picks (recursive doubling
// or a ring), which the standard allows even for non-commutative ops.
//
//   all_reduce      all-to-all: member b gets slice b of every member's data;
//                   each reduces its slice in rank order; all-gather of the
//                   slices. Each byte crosses the network twice, as in a ring.
//   reduce_scatter  all-to-all of the blocks, then each reduces its own.
//   reduce          gather to the root, which reduces.
//
// Messages of more than 1 GiB go in parts of at most 1 GiB (MPI counts are
// ints). Average is applied by the kernels (Sum times 1/members).
//
// Thread safety: one thread at a time per communicator.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "axonml/distributed/dtype.hpp"
#include "mpi/mpi_runtime.hpp"
#include "mpi/waiting.hpp"

namespace axonml::distributed::mpi {

// Starts nothing; waits for `request` (a nonblocking collective), or throws
// naming `what` after marking the request abandoned (a collective request
// cannot be cancelled).
void wait_collective(MPI_Request& request, const WaitContext& wait, const std::string& what);

// REQUIRES: every member calls with the same count, type and op.
void ordered_all_reduce(const Comm& comm, std::byte* data, std::size_t count, DataType type,
                        ReduceOp op, const WaitContext& wait, const std::string& what,
                        std::vector<std::byte>& scratch);
// `send` holds size() blocks of `count`; `recv` gets this member's block,
// reduced. `recv` may overlap `send`.
void ordered_reduce_scatter(const Comm& comm, const std::byte* send, std::byte* recv,
                            std::size_t count, DataType type, ReduceOp op, const WaitContext& wait,
                            const std::string& what, std::vector<std::byte>& scratch);
// `recv` (root only) may overlap `send`.
void ordered_reduce(const Comm& comm, const std::byte* send, std::byte* recv, std::size_t count,
                    DataType type, ReduceOp op, int root, const WaitContext& wait,
                    const std::string& what, std::vector<std::byte>& scratch);

}  // namespace axonml::distributed::mpi
