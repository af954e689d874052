#include "axon_bench/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <span>
#include <stdexcept>
#include <type_traits>

namespace axon_bench {
namespace {

namespace ad = axonml::distributed;
using Clock = std::chrono::steady_clock;

// ---- Deterministic inputs and their exact reference ---------------------------

// Small integers, so that every dtype holds every partial result exactly and
// the reference does not depend on the order of combination. Products use
// 1s and 2s (at most 2^n).
double input_value(ReduceOp op, int rank, std::size_t i) {
  if (op == ReduceOp::Product) return (i + static_cast<std::size_t>(rank)) % 3 == 0 ? 2.0 : 1.0;
  return static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11) - 5.0;
}

constexpr double kSentinel = 99.0;  // what receive buffers hold before a collective

template <typename T> T from_double(double v) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(v);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else return T(static_cast<float>(v));
}

// The accumulator type of the kernels: f32 for the 16-bit floats.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, ad::bfloat16> || std::is_same_v<T, ad::float16>, float, T>;

// The op over ranks 0..n-1 of input_value(., i), as the kernels compute it.
template <typename T> T reference(ReduceOp op, int n, std::size_t i) {
  using A = Acc<T>;
  A acc = static_cast<A>(input_value(op, 0, i));
  for (int r = 1; r < n; ++r) {
    const A x = static_cast<A>(input_value(op, r, i));
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc = acc + x; break;
      case ReduceOp::Product: acc = acc * x; break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
    }
  }
  if (op == ReduceOp::Average) {
    if constexpr (std::is_integral_v<A>) acc = acc / static_cast<A>(n);
    else acc = acc * (A(1) / static_cast<A>(n));
  }
  if constexpr (std::is_arithmetic_v<T>) return acc;
  else return T(acc);
}

template <typename T> std::vector<T> inputs(ReduceOp op, int rank, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = from_double<T>(input_value(op, rank, i));
  return v;
}

template <typename T> long count_wrong(const T* got, std::size_t count, auto&& expected) {
  long wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const T want = expected(i);
    if (std::memcmp(&got[i], &want, sizeof(T)) != 0) ++wrong;
  }
  return wrong;
}

std::byte* bytes(auto& v) { return reinterpret_cast<std::byte*>(v.data()); }

// ---- One collective at one size ---------------------------------------------------

// One arena buffer for the whole sweep, grown to the largest size asked for,
// so that a rank holds one buffer at a time. The smaller one goes back to the
// arena before the larger is taken: holding both would need their sum. (Ranks
// free and take theirs at different moments, so the free space may still be
// split: --shared-buffers' help says how large an arena always suffices.)
std::shared_ptr<std::byte> shared_buffer(Transport& t, std::size_t bytes) {
  static std::shared_ptr<std::byte> buffer;
  static std::size_t capacity = 0;
  if (bytes > capacity || !buffer) {
    buffer.reset();  // the caller's copy of it died with the previous size's row
    capacity = 0;
    buffer = t.allocate_shared(std::max<std::size_t>(bytes, 64));
    if (!buffer) {
      throw std::runtime_error("--shared-buffers: the " + t.name() + " transport has no room for " +
                               std::to_string(bytes) + " bytes (raise axon-launch --arena-mb)");
    }
    capacity = bytes;
  }
  return buffer;
}

// Where Case::consume() leaves its loads, so that the compiler keeps them.
volatile std::uint64_t consumed_sink = 0;

// The buffers of one collective and how to run and check it.
template <typename T> struct Case {
  Transport& t;
  const Options& o;
  std::string collective;
  std::size_t count;  // per rank
  std::vector<T> a, b;
  std::shared_ptr<std::byte> shared;  // all_reduce's buffer with --shared-buffers
  std::vector<T> fresh;               // the input as reset() wrote it, for --fresh-inputs

  void reset() {
    const int n = t.size(), r = t.rank();
    if (collective == "all_reduce") {
      a = inputs<T>(o.op, r, count);
      if (o.shared_buffers) {
        shared = shared_buffer(t, count * sizeof(T));
        if (count) std::memcpy(shared.get(), a.data(), count * sizeof(T));
      }
    } else if (collective == "broadcast") {
      a = r == o.root ? inputs<T>(o.op, r, count) : std::vector<T>(count, from_double<T>(kSentinel));
    } else if (collective == "all_gather") {
      a = inputs<T>(o.op, r, count);
      b.assign(count * static_cast<std::size_t>(n), from_double<T>(kSentinel));
    } else if (collective == "reduce_scatter") {
      a = inputs<T>(o.op, r, count * static_cast<std::size_t>(n));
      b.assign(count, from_double<T>(kSentinel));
    }
    fresh = a;
  }

  // The buffer the collective reads its input from (all_reduce, broadcast:
  // also its result).
  T* input() { return shared ? reinterpret_cast<T*>(shared.get()) : a.data(); }
  // What the collective leaves on this rank.
  std::span<const T> result() const {
    if (shared) return {reinterpret_cast<const T*>(shared.get()), count};
    return collective == "all_gather" || collective == "reduce_scatter" ? std::span<const T>(b) : std::span<const T>(a);
  }

  // Writes the input again, on this rank's core: what a training step does to
  // its gradients between two all-reduces.
  void refresh() { std::copy(fresh.begin(), fresh.end(), input()); }

  // Loads one word of every cache line of the result, as the step that uses
  // it would: an algorithm that leaves the result's lines in another core's
  // cache pays for it here, not in a later untimed refresh().
  void consume() const {
    const std::span<const std::byte> out = std::as_bytes(result());
    std::uint64_t sum = 0;
    for (std::size_t at = 0; at + sizeof(std::uint64_t) <= out.size(); at += 64) {
      std::uint64_t word;
      std::memcpy(&word, out.data() + at, sizeof(word));
      sum += word;
    }
    consumed_sink = consumed_sink + sum;
  }

  void run() {
    const DataType type = ad::data_type_v<T>;
    if (collective == "all_reduce") t.all_reduce(reinterpret_cast<std::byte*>(input()), count, type, o.op);
    else if (collective == "broadcast") t.broadcast(bytes(a), count, type, o.root);
    else if (collective == "all_gather") t.all_gather(bytes(a), bytes(b), count, type);
    else if (collective == "reduce_scatter") t.reduce_scatter(bytes(a), bytes(b), count, type, o.op);
    else t.barrier();
  }

  long check() const {
    const int n = t.size(), r = t.rank();
    if (collective == "all_reduce")
      return count_wrong(result().data(), count, [&](std::size_t i) { return reference<T>(o.op, n, i); });
    if (collective == "broadcast")
      return count_wrong(a.data(), count, [&](std::size_t i) { return from_double<T>(input_value(o.op, o.root, i)); });
    if (collective == "all_gather")
      return count_wrong(b.data(), b.size(), [&](std::size_t i) {
        return from_double<T>(input_value(o.op, static_cast<int>(i / count), i % count));
      });
    if (collective == "reduce_scatter") {
      const std::size_t offset = static_cast<std::size_t>(r) * count;
      return count_wrong(b.data(), count, [&](std::size_t i) { return reference<T>(o.op, n, offset + i); });
    }
    return 0;
  }
};

// Elementwise max (or sum) over ranks of doubles, through the transport itself.
std::vector<double> max_over_ranks(Transport& t, std::vector<double> v) {
  t.all_reduce(bytes(v), v.size(), DataType::F64, ReduceOp::Max);
  return v;
}

long sum_over_ranks(Transport& t, long value) {
  std::int64_t v = value;
  t.all_reduce(reinterpret_cast<std::byte*>(&v), 1, DataType::I64, ReduceOp::Sum);
  return static_cast<long>(v);
}

double bus_factor(const std::string& collective, int n) {
  if (collective == "all_reduce") return 2.0 * (n - 1) / n;
  if (collective == "all_gather" || collective == "reduce_scatter") return static_cast<double>(n - 1) / n;
  if (collective == "broadcast") return 1.0;
  return 0.0;
}

template <typename T> Row measure(Transport& t, const Options& o, FloorProbe& probe, const std::string& collective,
                                  std::size_t bytes) {
  const int n = t.size();
  const bool split = collective == "all_gather" || collective == "reduce_scatter";
  Row row;
  row.collective = collective;
  row.count = collective == "barrier" ? 0 : bytes / sizeof(T) / (split ? static_cast<std::size_t>(n) : 1);
  row.bytes = row.count * sizeof(T) * (split ? static_cast<std::size_t>(n) : 1);
  Case<T> c{t, o, collective, row.count, {}, {}, {}, {}};

  c.reset();
  c.run();
  row.wrong = sum_over_ranks(t, c.check());
  row.floor = probe.measure(row.bytes);  // just before the timing: the same phase of the machine

  // Warm up, and learn how many iterations fit the time allowed per size.
  const auto w0 = Clock::now();
  for (int i = 0; i < o.warmup; ++i) c.run();
  const double warm = std::chrono::duration<double>(Clock::now() - w0).count() / std::max(1, o.warmup);
  const double slowest_warm = max_over_ranks(t, {warm})[0];
  row.iterations = o.iterations;
  if (o.seconds_per_size > 0 && slowest_warm > 0)
    row.iterations = std::clamp(static_cast<int>(o.seconds_per_size / slowest_warm), std::min(3, o.iterations), o.iterations);

  t.barrier();
  std::vector<double> times(static_cast<std::size_t>(row.iterations) + 1);
  auto last = Clock::now();
  const auto start = last;
  for (int i = 0; i < row.iterations; ++i) {
    if (o.fresh_inputs) {
      c.refresh();
      last = Clock::now();
    }
    c.run();
    if (o.fresh_inputs) c.consume();
    const auto now = Clock::now();
    times[static_cast<std::size_t>(i)] = std::chrono::duration<double, std::micro>(now - last).count();
    last = now;
  }
  // With fresh inputs the loop's time less the refreshes: the calls' own.
  times.back() = (o.fresh_inputs ? std::accumulate(times.begin(), times.end() - 1, 0.0)
                                 : std::chrono::duration<double, std::micro>(last - start).count()) /
                 row.iterations;
  // Fresh inputs give the same result every call: check the last one too.
  if (o.fresh_inputs) row.wrong += sum_over_ranks(t, c.check());
  times = max_over_ranks(t, times);
  row.avg_us = times.back();
  times.pop_back();
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  row.time_us = times[times.size() / 2];
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / row.time_us / 1e3 : 0;
  row.busbw = row.algbw * bus_factor(collective, n);
  return row;
}


}  // namespace

std::vector<Row> run_sweep(Transport& transport, const Options& options) {
  std::vector<Row> rows;
  FloorProbe probe(transport, options.floor ? options.max_bytes : 0);
  if (options.floor && !probe.enabled() && transport.size() > 1 && transport.rank() == 0) {
    std::printf("# floor: not measured (%s)\n", probe.why_off().c_str());
  }
  for (const std::string& collective : options.collectives) {
    for (std::size_t size = options.min_bytes; size <= options.max_bytes; size *= options.factor) {
      Row row = ad::visit_element_type(options.type, [&]<typename T>(T) {
        return measure<T>(transport, options, probe, collective, size);
      });
      const bool empty = collective != "barrier" && row.count == 0;
      if (!empty) {
        if (transport.rank() == 0) print_row(row, options);
        rows.push_back(row);
      }
      if (collective == "barrier") break;  // one row: it moves no data
    }
  }
  return rows;
}

void print_header(const Transport& t, const Options& o) {
  std::printf("# axon-bench  transport: %s  ranks: %d  dtype: %s  op: %s  iterations: %d  warm-up: %d\n",
              t.name().c_str(), t.size(), std::string(ad::to_string(o.type)).c_str(),
              std::string(ad::to_string(o.op)).c_str(), o.iterations, o.warmup);
  std::printf("# time: median over iterations of the slowest rank; avg: slowest rank's loop / iterations\n");
  std::printf("# floor, measured just before each row between ranks 0 and 1: rt = a cache line's round trip,\n"
              "# handoff = rank 1 reading size bytes rank 0 has just written, copy = the same from the start of\n"
              "# rank 0's write (into lines rank 1 read the time before); x_rt, x_handoff, x_copy = time / floor\n#\n");
  std::printf("# %-14s %12s %12s %6s %10s %10s %11s %11s %7s %8s %11s %9s %8s %9s %7s\n", "collective", "size(B)",
              "count", "iters", "time(us)", "avg(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "rt(ns)", "handoff(us)",
              "copy(us)", "x_rt", "x_handoff", "x_copy");
  std::fflush(stdout);
}

void print_row(const Row& r, const Options&) {
  std::printf("  %-14s %12zu %12zu %6d %10.2f %10.2f %11.3f %11.3f %7ld", r.collective.c_str(), r.bytes,
              r.count, r.iterations, r.time_us, r.avg_us, r.algbw, r.busbw, r.wrong);
  if (r.floor.round_trip_ns > 0) {
    std::printf(" %8.0f", r.floor.round_trip_ns);
  } else {
    std::printf(" %8s", "-");
  }
  if (r.floor.handoff_us > 0) {
    std::printf(" %11.2f %9.2f", r.floor.handoff_us, r.floor.copy_us);
  } else {
    std::printf(" %11s %9s", "-", "-");
  }
  if (r.floor.round_trip_ns > 0) {
    std::printf(" %8.1f", r.time_us * 1e3 / r.floor.round_trip_ns);
  } else {
    std::printf(" %8s", "-");
  }
  if (r.floor.handoff_us > 0) {
    std::printf(" %9.2f %7.2f\n", r.time_us / r.floor.handoff_us, r.time_us / r.floor.copy_us);
  } else {
    std::printf(" %9s %7s\n", "-", "-");
  }
  std::fflush(stdout);
}

void write_json(const std::string& file, const Transport& t, const Options& o, const std::vector<Row>& rows) {
  std::ofstream out(file);
  if (!out) throw std::runtime_error("cannot write " + file);
  out << "{\n  \"transport\": \"" << t.name() << "\", \"ranks\": " << t.size() << ", \"dtype\": \""
      << ad::to_string(o.type) << "\", \"op\": \"" << ad::to_string(o.op) << "\",\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << "    {\"collective\": \"" << r.collective << "\", \"bytes\": " << r.bytes << ", \"count\": " << r.count
        << ", \"iterations\": " << r.iterations << ", \"time_us\": " << r.time_us << ", \"avg_us\": " << r.avg_us
        << ", \"algbw_GBps\": " << r.algbw << ", \"busbw_GBps\": " << r.busbw << ", \"wrong\": " << r.wrong
        << ", \"floor_round_trip_ns\": " << r.floor.round_trip_ns << ", \"floor_handoff_us\": " << r.floor.handoff_us
        << ", \"floor_copy_us\": " << r.floor.copy_us
        << "}"
        << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  out << "  ]\n}\n";
}

double memcpy_bandwidth(std::size_t size) {
  std::vector<char> from(size, 1), to(size, 0);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(to.data(), from.data(), size);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(size) / s / 1e9);
  }
  if (to[size / 2] != 1) throw std::runtime_error("memcpy did not copy");
  return best;
}

}  // namespace axon_bench
