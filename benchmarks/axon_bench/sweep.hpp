// axon-bench's sweep: for each collective and size, verify one result against
// a reference computed from deterministic inputs, then time the collective,
// in the manner of nccl-tests. Transport-free: the same code measures
// axonml::distributed and Open MPI.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "axon_bench/floor.hpp"
#include "axon_bench/transport.hpp"

namespace axon_bench {

struct Options {
  std::vector<std::string> collectives{"all_reduce"};
  ReduceOp op = ReduceOp::Sum;
  DataType type = DataType::F32;
  std::size_t min_bytes = 4;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t factor = 2;
  int iterations = 20;
  int warmup = 5;
  int root = 0;
  double seconds_per_size = 2.0;  // fewer iterations when the warm-up says a size would take longer
  std::string json_file;
  bool shared_buffers = false;    // all_reduce on buffers in the arena (zero copy)
  bool fresh_inputs = false;      // each rank rewrites its input before every timed call
  bool floor = true;              // measure the floor (axon_bench/floor.hpp) before each row
};

struct Row {
  std::string collective;
  std::size_t bytes = 0;   // nccl-tests' size: the whole buffer (all_gather: gathered size)
  std::size_t count = 0;   // elements per rank
  int iterations = 0;
  double time_us = 0;      // median over iterations of the slowest rank's time
  double avg_us = 0;       // slowest rank's loop time / iterations (nccl-tests' figure)
  double algbw = 0;        // GB/s: bytes / time
  double busbw = 0;        // GB/s: algbw x the nccl-tests factor
  long wrong = 0;          // elements that differ from the reference, summed over ranks
  Floor floor;             // this moment's floor between ranks 0 and 1 (zeros: not measured)
};

// Every rank calls it; returns the rows on every rank.
std::vector<Row> run_sweep(Transport& transport, const Options& options);

// On rank 0 only: the table (as each row completes) and the JSON file.
void print_header(const Transport& transport, const Options& options);
void print_row(const Row& row, const Options& options);
void write_json(const std::string& file, const Transport& transport, const Options& options,
                const std::vector<Row>& rows);

// GB/s (bytes copied per second) of one memcpy of `bytes`, best of a few.
double memcpy_bandwidth(std::size_t bytes);

}  // namespace axon_bench
