// GB/s of the f32 sum reduce kernels next to memcpy of the same bytes.
//
// Each benchmark reduces `sources` arrays of `bytes` bytes into one output
// with one kernel, and copies the same total number of bytes ((sources + 1) *
// bytes read + written, so the same working set) with memcpy, alternating the
// two in every iteration: the host moves its vCPUs between fast and slow
// several times a second, and only interleaved timings compare fairly.
//
// Counters: GB/s (kernel, bytes read + written), memcpy_GB/s (the same bytes
// through memcpy) and ratio = GB/s / memcpy_GB/s. Run with
//   build/release/benchmarks/bench_kernels --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/reduce_isa.hpp"

using namespace axonml::distributed;
using kernels::Isa;

namespace {

// 64-byte aligned, as the arena's slots are, and touched once up front so
// that first-touch page faults are not timed.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <typename T> using Buffer = std::unique_ptr<T[], FreeDeleter>;

template <typename T> Buffer<T> filled(std::size_t count, T value) {
  const std::size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
  Buffer<T> buffer(static_cast<T*>(std::aligned_alloc(64, std::max<std::size_t>(bytes, 64))));
  std::fill_n(buffer.get(), count, value);
  return buffer;
}

void reduce_vs_memcpy(benchmark::State& state, Isa isa) {
  if (!kernels::isa_supported(isa)) {
    state.SkipWithError("this CPU lacks the instructions of this kernel");
    return;
  }
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = static_cast<std::size_t>(state.range(1));
  const std::size_t count = bytes / sizeof(float);
  std::vector<Buffer<float>> inputs;
  std::vector<const std::byte*> sources;
  for (std::size_t s = 0; s < n; ++s) {
    inputs.push_back(filled(count, static_cast<float>(s + 1)));
    sources.push_back(reinterpret_cast<const std::byte*>(inputs.back().get()));
  }
  Buffer<float> output = filled(count, 0.0f);
  const std::size_t moved = (n + 1) * bytes;  // read + written by the kernel
  const std::size_t copy_bytes = moved / 2;
  Buffer<char> copy_from = filled(copy_bytes, char{1}), copy_to = filled(copy_bytes, char{0});

  // Repeat small sizes so that each timed stretch lasts tens of microseconds.
  const std::size_t repeats = std::max<std::size_t>(1, (std::size_t{4} << 20) / moved);
  using Clock = std::chrono::steady_clock;
  double kernel_seconds = 0, memcpy_seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (std::size_t r = 0; r < repeats; ++r) {
      kernels::reduce_with(isa, DataType::F32, ReduceOp::Sum, sources,
                           reinterpret_cast<std::byte*>(output.get()), count);
      benchmark::ClobberMemory();
    }
    const auto t1 = Clock::now();
    for (std::size_t r = 0; r < repeats; ++r) {
      std::memcpy(copy_to.get(), copy_from.get(), copy_bytes);
      benchmark::ClobberMemory();
    }
    const auto t2 = Clock::now();
    const double kernel = std::chrono::duration<double>(t1 - t0).count();
    kernel_seconds += kernel;
    memcpy_seconds += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(kernel);
  }
  if (output[count / 2] != static_cast<float>(n * (n + 1) / 2)) state.SkipWithError("wrong sum");
  const double total = static_cast<double>(moved) * static_cast<double>(repeats) *
                       static_cast<double>(state.iterations());
  const double kernel_gbs = total / kernel_seconds / 1e9;
  const double memcpy_gbs = total / memcpy_seconds / 1e9;
  state.counters["GB/s"] = kernel_gbs;
  state.counters["memcpy_GB/s"] = memcpy_gbs;
  state.counters["ratio"] = kernel_gbs / memcpy_gbs;
  state.SetLabel(std::string(kernels::to_string(isa)));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (long n : {2, 8})
    for (long bytes = 4 << 10; bytes <= (256l << 20); bytes *= 4) b->Args({n, bytes});
  b->ArgNames({"sources", "bytes"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK_CAPTURE(reduce_vs_memcpy, scalar, Isa::Scalar)->Apply(sizes);
BENCHMARK_CAPTURE(reduce_vs_memcpy, avx2, Isa::Avx2)->Apply(sizes);
BENCHMARK_CAPTURE(reduce_vs_memcpy, avx512, Isa::Avx512)->Apply(sizes);

BENCHMARK_MAIN();
