// axon-bench: an nccl-tests-style sweep of the collectives.
//
//   axon-launch -n 8 build/release/benchmarks/axon-bench -c all -b 4 -e 256M -f 4
//   mpirun -np 8 build/release/benchmarks/axon-bench-mpi -c all_reduce -b 4 -e 256M
//   axon-bench --memcpy -e 256M     # one core's memcpy bandwidth, the roof
//
// Built three times from these sources: axon-bench over axonml::distributed,
// with -DAXON_BENCH_MPI axon-bench-mpi over Open MPI (see transport.cpp), and
// with -DAXON_BENCH_DEEPSPEED_SHM axon-bench-deepspeed-shm over DeepSpeed's
// CPU shared-memory all-reduce, rebuilt (see axon_bench/deepspeed_shm.cpp).
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>

#include "axon_bench/sweep.hpp"
#include "axon_bench/transport.hpp"

namespace {

using namespace axon_bench;

// Why `path` cannot be written (an errno), or 0: an existing file must be
// writable, a new one's folder writable and searchable. Creates and opens
// nothing (a FIFO would block an open).
std::int32_t unwritable(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) return ::access(path.c_str(), W_OK) == 0 ? 0 : errno;
  if (errno != ENOENT) return errno;
  const std::size_t slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  return ::access(folder.c_str(), W_OK | X_OK) == 0 ? 0 : errno;
}

const std::vector<std::string> kCollectives{"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"};

int run(int argc, char** argv) {
  Options o;
  bool memcpy_only = false;
  std::string op = "sum", dtype = "f32";
#ifdef AXON_BENCH_MPI
  CLI::App app{"axon-bench-mpi: time and check collectives over a sweep of sizes (nccl-tests style), over Open MPI.\n"
               "Run it under mpirun: mpirun -np N axon-bench-mpi [OPTIONS]."};
#elif defined(AXON_BENCH_DEEPSPEED_SHM)
  CLI::App app{"axon-bench-deepspeed-shm: time and check all_reduce (f32 sum) over a sweep of sizes through\n"
               "DeepSpeed's CPU shared-memory all-reduce, rebuilt from its description (DeepSpeed is not packaged\n"
               "for Debian 12). Run it under the launcher: axon-launch -n N axon-bench-deepspeed-shm [OPTIONS]."};
#else
  CLI::App app{"axon-bench: time and check collectives over a sweep of sizes (nccl-tests style).\n"
               "Run it under the launcher: axon-launch -n N axon-bench [OPTIONS]; alone it is a world of one."};
#endif
  app.add_option("-c,--collective", o.collectives, "all_reduce, broadcast, all_gather, reduce_scatter, barrier or all (comma-separated)")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::IsMember([] { auto v = kCollectives; v.push_back("all"); return v; }()));
  app.add_option("-o,--op", op, "reduction op")->capture_default_str()->check(CLI::IsMember({"sum", "product", "min", "max", "average"}));
  app.add_option("-d,--dtype", dtype, "element type")->capture_default_str()->check(CLI::IsMember({"f32", "f64", "bf16", "f16", "i32", "i64"}));
  app.add_option("-b,--min-bytes", o.min_bytes, "smallest size (K, M, G suffixes are powers of 1024)")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false));
  app.add_option("-e,--max-bytes", o.max_bytes, "largest size")->capture_default_str()->transform(CLI::AsSizeValue(false));
  app.add_option("-f,--factor", o.factor, "size multiplier between rows")->capture_default_str()->check(CLI::Range(2, 1024));
  app.add_option("-n,--iters", o.iterations, "timed iterations per size (at most, with --seconds-per-size)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup", o.warmup, "untimed iterations per size")->capture_default_str()->check(CLI::Range(0, 1000000));
  app.add_option("-r,--root", o.root, "broadcast root")->capture_default_str();
  app.add_option("--seconds-per-size", o.seconds_per_size,
                 "fewer iterations (never under 3) for a size that would take longer (0: never)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            try {
              std::size_t end = 0;
              if (std::stod(value, &end) >= 0 && end == value.size()) return {};
            } catch (const std::exception&) {
            }
            return "must be a number of seconds, 0 or more (got " + value + ")";  // CLI11's own: "not in range 0.000000 to 1.8e308"
          },
          "0 or more"));
  app.add_option("--json", o.json_file,
                 "also write the rows to this JSON file (rank 0); a floor not measured (--no-floor, a "
                 "hand-off above its largest size) is 0 there, as '-' in the table");
  app.add_flag("--shared-buffers", o.shared_buffers,
               "all_reduce buffers in the arena (zero copy): each rank holds one buffer, regrown "
               "to each larger size, so give axon-launch an --arena-mb of at least ranks x the "
               "sum of the sizes (at most ranks x MAX x F/(F-1)), plus the default");
  app.add_flag("--fresh-inputs", o.fresh_inputs,
               "as a training step uses its gradients: each rank writes its input afresh before "
               "every call (untimed) and loads every cache line of the result after it (timed "
               "with the call); without it every call reduces the last one's result, wherever "
               "the last call left its cache lines");
  bool no_floor = false;
  app.add_flag("--no-floor", no_floor,
               "do not measure the floor (cache-line round trip, cross-core hand-off) before each row");
  app.add_flag("--memcpy", memcpy_only, "print one core's memcpy GB/s at the largest size and exit");
  // No allow_extras(): a misspelt option (--shared-bufers) ran the other
  // mode and exited 0 (a review). MPI_Init runs after the parse, and Open
  // MPI's mpirun passes the program no arguments of its own.
  app.set_version_flag("--version", "axon-bench " AXON_BENCH_VERSION);
  // Bad arguments exit 2, as the program's own checks below and axon-launch's
  // do (CLI11's own codes are 100 and up); --help still exits 0.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  o.floor = !no_floor;
  if (memcpy_only) {
    std::printf("memcpy %zu bytes: %.2f GB/s\n", o.max_bytes, memcpy_bandwidth(o.max_bytes));
    return 0;
  }
  if (o.min_bytes == 0 || o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "axon-bench: need 0 < min-bytes <= max-bytes\n");
    return 2;
  }
  if (std::find(o.collectives.begin(), o.collectives.end(), "all") != o.collectives.end()) o.collectives = kCollectives;
  const std::map<std::string, ReduceOp> ops{{"sum", ReduceOp::Sum}, {"product", ReduceOp::Product},
      {"min", ReduceOp::Min}, {"max", ReduceOp::Max}, {"average", ReduceOp::Average}};
  const std::map<std::string, DataType> types{{"f32", DataType::F32}, {"f64", DataType::F64},
      {"bf16", DataType::BF16}, {"f16", DataType::F16}, {"i32", DataType::I32}, {"i64", DataType::I64}};
  o.op = ops.at(op);
  o.type = types.at(dtype);
  if (o.max_bytes < axonml::distributed::size_of(o.type)) {
    // Sizes hold whole elements (a row of none is left out): -b 3 -e 3
    // printed no row at all and exited 0.
    std::fprintf(stderr, "axon-bench: -e/--max-bytes %zu is less than one %s element (%zu bytes): no row to run\n",
                 o.max_bytes, dtype.c_str(), axonml::distributed::size_of(o.type));
    return 2;
  }

  // Each rank holds a few buffers of the largest size: one larger than the
  // machine's memory cannot run, and std::bad_alloc alone did not say why.
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && static_cast<double>(o.max_bytes) > memory) {
    std::fprintf(stderr, "axon-bench: -e/--max-bytes %zu is more than this machine's memory (%.0f bytes); "
                 "each rank holds a few buffers of the largest size\n", o.max_bytes, memory);
    return 2;
  }

  auto transport = make_transport(argc, argv);
  if (o.root < 0 || o.root >= transport->size()) {
    std::fprintf(stderr, "axon-bench: root %d outside 0..%d\n", o.root, transport->size() - 1);
    return 2;
  }
  // A path that cannot be written fails now, not after the whole sweep (a
  // review). Rank 0 writes the file and so judges it, creating nothing, and
  // every rank learns its verdict: a rank 0 that returned alone left the
  // others of an MPI job waiting in the sweep for good (a review).
  if (!o.json_file.empty()) {
    std::int32_t json_error = 0;
    if (transport->rank() == 0) json_error = unwritable(o.json_file);
    transport->broadcast(reinterpret_cast<std::byte*>(&json_error), 1, DataType::I32, 0);
    if (json_error != 0) {
      if (transport->rank() == 0) {
        std::fprintf(stderr, "axon-bench: cannot write --json %s (%s)\n", o.json_file.c_str(), std::strerror(json_error));
      }
      return 2;
    }
  }
  if (transport->rank() == 0) print_header(*transport, o);
  const auto rows = run_sweep(*transport, o);
  long wrong = 0;
  for (const Row& r : rows) wrong += r.wrong;
  if (transport->rank() == 0) {
    if (!o.json_file.empty()) write_json(o.json_file, *transport, o, rows);
    std::printf("# wrong elements in total: %ld\n", wrong);
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "axon-bench: out of memory: each rank holds a few buffers of the largest size "
                 "(-e/--max-bytes); give a smaller one\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "axon-bench: %s\n", e.what());
    return 1;
  }
}
