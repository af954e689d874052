// The floor beside each row of axon-bench: what the hardware allows between
// the cores of ranks 0 and 1 at this moment, measured just before the row.
//
// The host moves this machine's vCPUs near and far every few seconds, and
// every figure moves with it; a time without the floor of its own moment
// cannot tell a slow phase from a slow algorithm. Three figures:
//   round trip  a cache line written by rank 0, seen by rank 1, answered,
//               seen by rank 0 again (the least any exchange between two
//               ranks can take; a 2-rank all-reduce of 4 B needs about one);
//   hand-off    rank 1 reading `bytes` that rank 0 has just written (one
//               core's data moving to another: the least a 2-rank all-reduce
//               of `bytes` moves is half of it each way, twice, in parallel);
//   copy        the same hand-off timed from the moment rank 0 starts
//               writing: one core writes a buffer, the other reads it. In
//               a loop of them the writer takes back every line the reader
//               read the time before, as an all-reduce of private buffers
//               does when it copies its input into its slot: the least
//               such an all-reduce at n = 2 can take is one copy of the
//               message (each rank's goes across once, in parallel). It
//               includes rank 1 noticing the write is done (the flag's
//               line); with more ranks than cores, its being scheduled too.
// All through a memfd that rank 0 makes and rank 1 maps through
// /proc/<pid>/fd (nothing named, so nothing is left behind by a killed run),
// so the same probe runs under axon-bench and axon-bench-mpi.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "axon_bench/transport.hpp"

namespace axon_bench {

struct Floor {
  double round_trip_ns = 0;  // median over batches of round trips; 0: not measured
  double handoff_us = 0;     // median over hand-offs of `bytes`; 0: not measured
  double copy_us = 0;        // median over the same hand-offs, from the start of the write; 0: not measured
};

class FloorProbe {
 public:
  // Largest hand-off measured: rows above it print no hand-off (DRAM
  // bandwidth, not the caches, sets those; compare with --memcpy).
  static constexpr std::size_t kMaxHandoffBytes = std::size_t{16} << 20;

  // Collective. Maps shared memory for hand-offs up to
  // min(max_bytes, kMaxHandoffBytes) on ranks 0 and 1; the probe is off
  // (measure() returns zeros) with one rank, with max_bytes 0, or when the
  // mapping fails on either rank (why_off() says what failed).
  FloorProbe(Transport& transport, std::size_t max_bytes);
  ~FloorProbe();
  FloorProbe(const FloorProbe&) = delete;
  FloorProbe& operator=(const FloorProbe&) = delete;

  bool enabled() const { return enabled_; }
  const std::string& why_off() const { return why_off_; }

  // Collective: every rank gets the same figures. Ranks other than 0 and 1
  // wait in barriers meanwhile.
  Floor measure(std::size_t bytes);

 private:
  double round_trip_ns();
  struct Handoff {
    double read_us = 0;  // rank 1's read
    double copy_us = 0;  // rank 0's write and rank 1's read
  };
  Handoff handoff(std::size_t bytes);

  Transport& transport_;
  std::size_t capacity_ = 0;
  bool enabled_ = false;
  std::string why_off_;
  std::byte* shared_ = nullptr;  // mapped on ranks 0 and 1
  std::size_t mapped_bytes_ = 0;
  std::unique_ptr<std::byte[]> private_;  // rank 1's destination of hand-offs
  std::uint64_t sequence_ = 0;
};

}  // namespace axon_bench
