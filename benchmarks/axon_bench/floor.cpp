#include "axon_bench/floor.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace axon_bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kLine = 64;
constexpr std::size_t kDataOffset = 4096;  // the hand-off buffer, after the flag lines

// A flag in shared memory: one cache line of its own.
std::atomic<std::uint64_t>& flag(std::byte* shared, int line) {
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
  return *reinterpret_cast<std::atomic<std::uint64_t>*>(shared + static_cast<std::size_t>(line) * kLine);
}

// Polls until `f` holds `value`. Yields after a while, so that two ranks on
// one core still make progress (8 ranks on 2 cores is normal here). The
// launcher ends a job whose rank dies, but a peer stuck elsewhere (or a
// probe run outside a launcher) must not leave this rank spinning for ever.
void wait_for(const std::atomic<std::uint64_t>& f, std::uint64_t value) {
  constexpr auto kPatience = std::chrono::seconds(60);
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  for (int polls = 0; f.load(std::memory_order_acquire) != value; ++polls) {
    if (polls >= 4096) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("axon-bench floor: the other rank of the probe (rank 0 or 1) did not answer within " +
                                 std::to_string(kPatience.count()) + " s");
      }
      sched_yield();
      polls = 0;
    }
  }
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

FloorProbe::FloorProbe(Transport& transport, std::size_t max_bytes) : transport_(transport) {
  if (transport_.size() < 2 || max_bytes == 0) return;
  const int rank = transport_.rank();
  capacity_ = std::min(max_bytes, kMaxHandoffBytes);
  mapped_bytes_ = kDataOffset + capacity_;
  std::string error;
  int fd = -1;
  // Rank 0 makes the memory and tells the others where to find it.
  std::int64_t where[3] = {0, 0, 0};  // pid, fd, failed
  if (rank == 0) {
    fd = ::memfd_create("axon-bench-floor", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(mapped_bytes_)) != 0) {
      error = std::string("memfd on rank 0: ") + std::strerror(errno);
      where[2] = 1;
    } else {
      where[0] = ::getpid();
      where[1] = fd;
    }
  }
  transport_.all_reduce(reinterpret_cast<std::byte*>(where), 3, DataType::I64, ReduceOp::Max);
  std::int64_t failed = where[2];
  if (!failed && rank == 1) {
    const std::string path = "/proc/" + std::to_string(where[0]) + "/fd/" + std::to_string(where[1]);
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) error = "rank 1 opening " + path + ": " + std::strerror(errno);
  }
  if (!failed && (rank == 0 || rank == 1) && fd >= 0) {
    void* p = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      error = "mmap on rank " + std::to_string(rank) + ": " + std::strerror(errno);
    } else {
      shared_ = static_cast<std::byte*>(p);
    }
  }
  failed = error.empty() ? 0 : 1;
  // Every rank learns whether both mapped; rank 1 has opened before rank 0 closes.
  transport_.all_reduce(reinterpret_cast<std::byte*>(&failed), 1, DataType::I64, ReduceOp::Max);
  if (fd >= 0) ::close(fd);
  if (failed) {
    why_off_ = error.empty() ? "the other of ranks 0 and 1 could not map it" : error;
    if (shared_) ::munmap(shared_, mapped_bytes_);
    shared_ = nullptr;
    return;
  }
  if (shared_) {
    private_ = std::make_unique<std::byte[]>(std::max<std::size_t>(capacity_, 1));
    std::memset(private_.get(), 0, std::max<std::size_t>(capacity_, 1));  // fault its pages in now
  }
  enabled_ = true;
  transport_.barrier();
}

FloorProbe::~FloorProbe() {
  if (shared_) ::munmap(shared_, mapped_bytes_);
}

double FloorProbe::round_trip_ns() {
  constexpr int kBatches = 7, kTrips = 200;
  transport_.barrier();
  if (!shared_) {  // ranks 2..n-1 only keep count
    sequence_ += kBatches * kTrips;
    return 0;
  }
  auto& ping = flag(shared_, 0);
  auto& pong = flag(shared_, 1);
  const bool leader = transport_.rank() == 0;
  std::vector<double> batches;
  for (int b = 0; b < kBatches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kTrips; ++i) {
      const std::uint64_t s = ++sequence_;
      if (leader) {
        ping.store(s, std::memory_order_release);
        wait_for(pong, s);
      } else {
        wait_for(ping, s);
        pong.store(s, std::memory_order_release);
      }
    }
    batches.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kTrips);
  }
  return leader ? median(batches) : 0;
}

FloorProbe::Handoff FloorProbe::handoff(std::size_t bytes) {
  constexpr int kRepeats = 7;
  if (bytes > capacity_) return {};
  transport_.barrier();
  if (!shared_) {
    sequence_ += kRepeats;
    return {};
  }
  std::byte* data = shared_ + kDataOffset;
  auto& written = flag(shared_, 0);
  auto& read = flag(shared_, 1);
  // Rank 0's clock as it starts writing (steady_clock: one per time
  // namespace, so one for ranks on one machine), beside the flag it sets
  // next: a line of its own would be one more line to move inside the copy.
  auto& write_began = *reinterpret_cast<std::atomic<std::uint64_t>*>(shared_ + sizeof(std::uint64_t));
  const bool writer = transport_.rank() == 0;
  std::vector<double> reads, copies;
  for (int r = 0; r < kRepeats; ++r) {
    const std::uint64_t s = ++sequence_;
    const auto value = static_cast<std::byte>(s & 0xff);
    if (writer) {
      write_began.store(static_cast<std::uint64_t>(Clock::now().time_since_epoch().count()), std::memory_order_relaxed);
      std::memset(data, static_cast<int>(value), bytes);  // in rank 0's cache as far as it fits
      written.store(s, std::memory_order_release);
      wait_for(read, s);
    } else {
      wait_for(written, s);
      const auto t0 = Clock::now();
      std::memcpy(private_.get(), data, bytes);
      const auto t1 = Clock::now();
      reads.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      const Clock::time_point began{Clock::duration{static_cast<Clock::rep>(write_began.load(std::memory_order_relaxed))}};
      copies.push_back(std::chrono::duration<double, std::micro>(t1 - began).count());
      if (bytes && (private_[0] != value || private_[bytes - 1] != value)) {
        throw std::runtime_error("axon-bench floor: rank 1 read other bytes than rank 0 wrote");
      }
      read.store(s, std::memory_order_release);
    }
  }
  if (writer) return {};
  return Handoff{median(reads), median(copies)};
}

Floor FloorProbe::measure(std::size_t bytes) {
  if (!enabled()) return {};
  const double round_trip = round_trip_ns();
  const Handoff h = handoff(bytes);
  std::vector<double> figures{round_trip, h.read_us, h.copy_us};
  // Rank 0 measured the first, rank 1 the others: the max gives them to all.
  transport_.all_reduce(reinterpret_cast<std::byte*>(figures.data()), figures.size(), DataType::F64,
                        ReduceOp::Max);
  return Floor{figures[0], figures[1], figures[2]};
}

}  // namespace axon_bench
