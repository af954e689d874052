// The one seam between axon-bench's sweep and the library it measures.
//
// axon-bench drives axonml::distributed (World::init(), so it runs alone, under
// axon-launch, or with AXON_BACKEND=mock); axon-bench-mpi, the same sources
// built with -DAXON_BENCH_MPI, drives Open MPI. Buffers follow Backend's rules
// (count = elements per rank; all_gather recv and reduce_scatter send hold
// size() * count). Every call is collective.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "axonml/distributed/dtype.hpp"

namespace axon_bench {

using axonml::distributed::DataType;
using axonml::distributed::ReduceOp;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual void broadcast(std::byte* data, std::size_t count, DataType type, int root) = 0;
  virtual void all_gather(const std::byte* send, std::byte* recv, std::size_t count, DataType type) = 0;
  virtual void reduce_scatter(const std::byte* send, std::byte* recv, std::size_t count,
                              DataType type, ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Memory every rank can reach (the arena), for zero-copy all-reduces;
  // nullptr when the transport has none or no room.
  virtual std::shared_ptr<std::byte> allocate_shared(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }
};

// axonml::distributed's World, or MPI_COMM_WORLD under -DAXON_BENCH_MPI.
std::unique_ptr<Transport> make_transport(int& argc, char**& argv);

}  // namespace axon_bench
