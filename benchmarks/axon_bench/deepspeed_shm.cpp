// axon-bench-deepspeed-shm's transport: DeepSpeed's CPU shared-memory
// all-reduce, rebuilt from its description, so that axon-bench can time it
// beside ours on the same machine in the same run.
//
// DeepSpeed itself is not packaged for Debian 12, and these machines reach
// no package index, so its extension (csrc/cpu/comm/shm.cpp, the
// `deepspeed.comm` CPU all-reduce behind `init_distributed(dist_backend=
// "ccl")` on one node) cannot be built here. What follows is its published
// algorithm, as of the version read for this (2024), written anew:
//
//  - each rank owns one shared segment: two 1 MiB buffers for small
//    messages, two 32 MiB buffers for large ones, and a state word for each
//    of the two algorithms;
//  - a message is cut into 32 MiB chunks; a chunk under 1 MiB takes the
//    "symmetric naive" all-reduce: copy it into this rank's current small
//    buffer, publish the state "copied (i)", wait until every other rank has
//    published "copied (i)" or "copied (i + 1)" (three states in rotation,
//    two buffers alternating, so one barrier per call), then every rank
//    reduces all ranks' buffers into its own output (with two ranks: the
//    peer's buffer added to its own input);
//  - a larger chunk takes the "distributed naive" all-reduce: copy it into
//    this rank's current large buffer, publish "copied", wait for every
//    rank; reduce slice r of every rank's buffer into slice r of its own;
//    publish "reduced", wait for every rank; copy each slice out of its
//    owner's buffer into the output (each rank starting from its own slice);
//  - every wait is a spin on the peers' state words, without pause, yield
//    or sleep; the reduce and copies use 256-bit vectors (f32).
//
// Only what DeepSpeed's all-reduce covers is timed: sum of f32. The
// bookkeeping all-reduces of axon-bench itself (slowest rank's time, wrong
// counts: i64 and f64, max and sum, a few elements) go through the same
// symmetric path with a plain loop. Other collectives are refused.
//
// Run under axon-launch (it reads RANK, WORLD_SIZE and MASTER_PORT):
//   axon-launch -n 2 build/release/benchmarks/axon-bench-deepspeed-shm -b 4 -e 64M
// The segments are unlinked as soon as every rank has mapped them, so
// nothing is left in /dev/shm by a run that is killed later. A wait that
// sees no progress for 60 s throws rather than spinning forever (DeepSpeed's
// own would).
#include <fcntl.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "axon_bench/transport.hpp"
#include "axonml/distributed/dtype.hpp"

namespace axon_bench {
namespace {

constexpr std::size_t kSmallBytes = std::size_t{1} << 20;  // NAIVE_ALLREDUCE_THRESHOLD
constexpr std::size_t kChunkBytes = std::size_t{32} << 20;  // MAX_BUF_SIZE
constexpr std::size_t kVectorBytes = 32;                    // 256-bit loads and stores

// The states of DeepSpeed's two algorithms: three "copied" states rotate for
// the symmetric one, two (copied, reduced) pairs for the distributed one.
enum State : std::int32_t {
  kBegin = 0,
  kCopied0,
  kReduced0,
  kCopied1,
  kCopied2,
  kReduced1,
};

struct Segment {
  alignas(64) std::atomic<std::int32_t> state[2];  // [0] symmetric, [1] distributed
  alignas(64) std::atomic<std::int32_t> mapped;    // every peer's segment is mapped: this one may be unlinked
  alignas(64) std::byte small[2][kSmallBytes];
  alignas(64) std::byte large[2][kChunkBytes];
};

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  try {
    return std::stoi(value);
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string("axon-bench-deepspeed-shm: ") + name + "=" + value + " is not a number");
  }
}

// f32 sum, 256 bits at a time, as DeepSpeed's reduce_fp32_buffers: the
// first buffer, then the others; the tail element by element.
__attribute__((target("avx2"))) void sum_f32(float* out, const std::vector<const float*>& in, std::size_t count) {
  const std::size_t vector_floats = kVectorBytes / sizeof(float);
  const std::size_t main = count - count % vector_floats;
  for (std::size_t i = 0; i < main; i += vector_floats) {
    __m256 acc = _mm256_loadu_ps(in[0] + i);
    for (std::size_t j = 1; j < in.size(); ++j) acc = _mm256_add_ps(acc, _mm256_loadu_ps(in[j] + i));
    _mm256_storeu_ps(out + i, acc);
  }
  for (std::size_t i = main; i < count; ++i) {
    float acc = in[0][i];
    for (std::size_t j = 1; j < in.size(); ++j) acc += in[j][i];
    out[i] = acc;
  }
}

__attribute__((target("avx2"))) void copy_vectors(std::byte* to, const std::byte* from, std::size_t bytes) {
  const std::size_t main = bytes - bytes % kVectorBytes;
  for (std::size_t i = 0; i < main; i += kVectorBytes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i)));
  }
  std::memcpy(to + main, from + main, bytes - main);
}

// The bookkeeping reductions (never timed): any type, sum or max.
template <typename T> void reduce_plain(T* out, const std::vector<const T*>& in, std::size_t count, ReduceOp op) {
  for (std::size_t i = 0; i < count; ++i) {
    T acc = in[0][i];
    for (std::size_t j = 1; j < in.size(); ++j) acc = op == ReduceOp::Max ? (in[j][i] > acc ? in[j][i] : acc) : acc + in[j][i];
    out[i] = acc;
  }
}

class DeepSpeedShmTransport final : public Transport {
 public:
  DeepSpeedShmTransport() {
    rank_ = env_int("RANK", 0);
    size_ = env_int("WORLD_SIZE", 1);
    if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
      throw std::invalid_argument("axon-bench-deepspeed-shm: RANK " + std::to_string(rank_) + " outside a WORLD_SIZE of " +
                                  std::to_string(size_));
    }
    if (!__builtin_cpu_supports("avx2")) throw std::runtime_error("axon-bench-deepspeed-shm: needs AVX2, as DeepSpeed's");
    const std::string prefix = "/axon-bench-deepspeed-shm-" + std::to_string(::getuid()) + "-" +
                               std::to_string(env_int("MASTER_PORT", 0)) + "-";
    segments_.resize(static_cast<std::size_t>(size_), nullptr);
    const std::string own = prefix + std::to_string(rank_);
    const int fd = ::shm_open(own.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("axon-bench-deepspeed-shm: shm_open " + own + ": " + std::strerror(errno));
    if (const int err = ::posix_fallocate(fd, 0, sizeof(Segment)); err != 0) {
      ::close(fd);
      ::shm_unlink(own.c_str());
      throw std::runtime_error("axon-bench-deepspeed-shm: no room in /dev/shm for " + std::to_string(sizeof(Segment)) +
                               " bytes: " + std::strerror(err));
    }
    segments_[static_cast<std::size_t>(rank_)] = map(fd, own);
    Segment& mine = *segments_[static_cast<std::size_t>(rank_)];
    // As DeepSpeed's: the symmetric state starts at the last of the three,
    // so that a peer's first wait (for "copied 0" or "copied 1") waits.
    mine.state[0].store(kCopied2, std::memory_order_relaxed);
    mine.state[1].store(kBegin, std::memory_order_relaxed);
    mine.mapped.store(0, std::memory_order_release);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const std::string name = prefix + std::to_string(r);
      const auto start = std::chrono::steady_clock::now();
      int peer = -1;
      // The peer's segment is complete once it is its full size (it is
      // created, then allocated).
      while ((peer = ::shm_open(name.c_str(), O_RDWR, 0600)) < 0 || !full_size(peer)) {
        if (peer >= 0) ::close(peer);
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
          throw std::runtime_error("axon-bench-deepspeed-shm: rank " + std::to_string(r) + "'s segment " + name +
                                   " did not appear within 60 s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      segments_[static_cast<std::size_t>(r)] = map(peer, name);
    }
    mine.mapped.store(1, std::memory_order_release);
    for (int r = 0; r < size_; ++r) spin_until(r, [&] { return segments_[static_cast<std::size_t>(r)]->mapped.load(std::memory_order_acquire) != 0; });
    ::shm_unlink(own.c_str());
  }

  ~DeepSpeedShmTransport() override {
    for (Segment* s : segments_) {
      if (s != nullptr) ::munmap(s, sizeof(Segment));
    }
  }

  std::string name() const override { return "deepspeed-shm (DeepSpeed's CPU shm all-reduce, rebuilt)"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op) override {
    if (size_ == 1) return;
    const std::size_t element = axonml::distributed::size_of(type);
    if (type == DataType::F32 && op == ReduceOp::Sum) {
      for (std::size_t offset = 0; offset < count * element; offset += kChunkBytes) {
        const std::size_t bytes = std::min(kChunkBytes, count * element - offset);
        if (bytes < kSmallBytes) symmetric(data + offset, bytes, type, op);
        else distributed(data + offset, bytes);
      }
      return;
    }
    const bool bookkeeping = (type == DataType::I64 || type == DataType::F64) &&
                             (op == ReduceOp::Sum || op == ReduceOp::Max) && count * element < kSmallBytes;
    if (!bookkeeping) {
      throw std::invalid_argument("axon-bench-deepspeed-shm: DeepSpeed's shm all-reduce is modelled for sum of f32 "
                                  "only (asked: " + std::string(axonml::distributed::to_string(type)) + ")");
    }
    symmetric(data, count * element, type, op);
  }
  void broadcast(std::byte*, std::size_t, DataType, int) override { refuse("broadcast"); }
  void all_gather(const std::byte*, std::byte*, std::size_t, DataType) override { refuse("all_gather"); }
  void reduce_scatter(const std::byte*, std::byte*, std::size_t, DataType, ReduceOp) override { refuse("reduce_scatter"); }
  // Through the symmetric all-reduce of one element: its one wait is a barrier.
  void barrier() override {
    std::int64_t token = 0;
    all_reduce(reinterpret_cast<std::byte*>(&token), 1, DataType::I64, ReduceOp::Sum);
  }

 private:
  [[noreturn]] static void refuse(const char* op) {
    throw std::invalid_argument(std::string("axon-bench-deepspeed-shm: ") + op +
                                " is not modelled (DeepSpeed's shm backend is timed for all_reduce only)");
  }

  static bool full_size(int fd) {
    const off_t end = ::lseek(fd, 0, SEEK_END);
    return end >= static_cast<off_t>(sizeof(Segment));
  }

  static Segment* map(int fd, const std::string& name) {
    void* p = ::mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("axon-bench-deepspeed-shm: mmap " + name + ": " + std::strerror(errno));
    return static_cast<Segment*>(p);
  }

  // DeepSpeed spins on the state word with nothing in the loop; so does
  // this, but it looks at the clock every 2^20 polls so that a dead peer
  // ends the run instead of spinning forever.
  template <typename Done> void spin_until(int peer, Done done) const {
    auto start = std::chrono::steady_clock::time_point{};
    for (std::uint64_t polls = 1; !done(); ++polls) {
      if ((polls & ((1u << 20) - 1)) == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (start == std::chrono::steady_clock::time_point{}) start = now;
        if (now - start > std::chrono::seconds(60)) {
          throw std::runtime_error("axon-bench-deepspeed-shm: rank " + std::to_string(rank_) + " waited 60 s for rank " +
                                   std::to_string(peer));
        }
      }
    }
  }
  void wait_states(int state_group, std::int32_t a, std::int32_t b, bool include_self) const {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ && !include_self) continue;
      const auto& word = segments_[static_cast<std::size_t>(r)]->state[state_group];
      spin_until(r, [&] {
        const std::int32_t s = word.load(std::memory_order_acquire);
        return s == a || s == b;
      });
    }
  }
  void publish(int state_group, std::int32_t state) {
    segments_[static_cast<std::size_t>(rank_)]->state[state_group].store(state, std::memory_order_release);
  }

  void symmetric(std::byte* data, std::size_t bytes, DataType type, ReduceOp op) {
    static constexpr std::int32_t kCopied[3] = {kCopied0, kCopied1, kCopied2};
    const std::int32_t current = kCopied[symmetric_state_], next = kCopied[(symmetric_state_ + 1) % 3];
    symmetric_state_ = (symmetric_state_ + 1) % 3;
    const int buffer = symmetric_buffer_;
    symmetric_buffer_ ^= 1;

    copy_vectors(segments_[static_cast<std::size_t>(rank_)]->small[buffer], data, bytes);
    publish(0, current);
    wait_states(0, current, next, /*include_self=*/false);

    // Every rank reduces every buffer into its own output; with two ranks
    // the peer's buffer is added to this rank's input where it lies.
    std::vector<const std::byte*> in;
    if (size_ == 2) {
      in = {segments_[static_cast<std::size_t>(1 - rank_)]->small[buffer], data};
    } else {
      for (Segment* s : segments_) in.push_back(s->small[buffer]);
    }
    reduce(data, in, bytes, type, op);
  }

  void distributed(std::byte* data, std::size_t bytes) {
    static constexpr std::int32_t kCopied[2] = {kCopied0, kCopied1};
    static constexpr std::int32_t kReduced[2] = {kReduced0, kReduced1};
    const std::int32_t copied = kCopied[distributed_state_], reduced = kReduced[distributed_state_],
                       copied_next = kCopied[distributed_state_ ^ 1];
    distributed_state_ ^= 1;
    const int buffer = distributed_buffer_;
    distributed_buffer_ ^= 1;

    copy_vectors(segments_[static_cast<std::size_t>(rank_)]->large[buffer], data, bytes);
    publish(1, copied);
    wait_states(1, copied, reduced, /*include_self=*/true);

    // Slice r (the last one takes the remainder) of every buffer, reduced
    // into slice r of this rank's own.
    const std::size_t count = bytes / sizeof(float), slice = count / static_cast<std::size_t>(size_);
    auto slice_start = [&](int r) { return static_cast<std::size_t>(r) * slice * sizeof(float); };
    auto slice_bytes = [&](int r) { return (r == size_ - 1 ? count - slice * static_cast<std::size_t>(r) : slice) * sizeof(float); };
    std::byte* own = segments_[static_cast<std::size_t>(rank_)]->large[buffer];
    std::vector<const std::byte*> in;
    if (size_ == 2) {
      in = {segments_[static_cast<std::size_t>(1 - rank_)]->large[buffer] + slice_start(rank_), own + slice_start(rank_)};
    } else {
      for (Segment* s : segments_) in.push_back(s->large[buffer] + slice_start(rank_));
    }
    reduce(own + slice_start(rank_), in, slice_bytes(rank_), DataType::F32, ReduceOp::Sum);
    publish(1, reduced);
    wait_states(1, reduced, copied_next, /*include_self=*/true);

    for (int i = 0; i < size_; ++i) {
      const int r = (i + rank_) % size_;  // each rank starts from its own slice, as DeepSpeed's
      copy_vectors(data + slice_start(r), segments_[static_cast<std::size_t>(r)]->large[buffer] + slice_start(r),
                   slice_bytes(r));
    }
  }

  static void reduce(std::byte* out, const std::vector<const std::byte*>& in, std::size_t bytes, DataType type, ReduceOp op) {
    auto typed = [&]<typename T>(T) {
      std::vector<const T*> sources;
      for (const std::byte* p : in) sources.push_back(reinterpret_cast<const T*>(p));
      return sources;
    };
    switch (type) {
      case DataType::F32: return sum_f32(reinterpret_cast<float*>(out), typed(float{}), bytes / sizeof(float));
      case DataType::F64: return reduce_plain(reinterpret_cast<double*>(out), typed(double{}), bytes / sizeof(double), op);
      case DataType::I64:
        return reduce_plain(reinterpret_cast<std::int64_t*>(out), typed(std::int64_t{}), bytes / sizeof(std::int64_t), op);
      default: throw std::logic_error("axon-bench-deepspeed-shm: no reduce for this type");
    }
  }

  int rank_ = 0;
  int size_ = 1;
  std::vector<Segment*> segments_;
  int symmetric_state_ = 0, symmetric_buffer_ = 0;
  int distributed_state_ = 0, distributed_buffer_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_transport(int&, char**&) { return std::make_unique<DeepSpeedShmTransport>(); }

}  // namespace axon_bench
