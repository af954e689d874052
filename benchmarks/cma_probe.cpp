// cma-probe: could two ranks skip the copy into shared memory by reading each
// other's private buffers through the kernel (cross-memory attach,
// process_vm_readv, as Open MPI's vader does for large messages)?
//
// A parent process writes a private buffer and a shared one with the same
// bytes; its child then reads the private one with process_vm_readv and the
// shared one with memcpy, alternately, each round, and checks every byte of
// both copies (outside the timing). It prints the median time of each way,
// per size: the single copy through the kernel against the hand-off through
// shared memory that the runtime's all-reduce is built on.
//
//   cma-probe [--rounds R] SIZE...   (bytes; K and M suffixes)
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage = "Usage: cma-probe [--rounds R] SIZE...   (R in 1..500, default 200; SIZE in bytes, "
                                "K and M suffixes; default 64K 1M 16M)\n";

// A size such as 4096, 64K or 16M; nothing on any other text.
std::optional<std::size_t> parse_size(const char* text) {
  char* end = nullptr;
  errno = 0;
  std::size_t value = std::strtoull(text, &end, 10);
  if (end == text || errno != 0 || *text == '-') return std::nullopt;
  if (*end == 'K' || *end == 'k') {
    value <<= 10;
    ++end;
  } else if (*end == 'M' || *end == 'm') {
    value <<= 20;
    ++end;
  }
  if (*end != '\0') return std::nullopt;
  return value;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void* shared_pages(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("cma-probe: mmap");
    std::exit(1);
  }
  return p;
}

// One size: returns false when a copy came out wrong or CMA is refused.
bool probe(std::size_t bytes, int rounds) {
  auto* turn = static_cast<std::atomic<long>*>(shared_pages(4096));
  auto* shared = static_cast<unsigned char*>(shared_pages(bytes));
  // child: [ok (1), wrong (0) or refused (-errno), cma ns x rounds, memcpy ns x rounds]
  const std::size_t result_bytes = (1 + 2 * static_cast<std::size_t>(rounds)) * sizeof(long);
  auto* result = static_cast<long*>(shared_pages(result_bytes));
  std::vector<unsigned char> source(bytes);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    std::vector<unsigned char> into(bytes);
    long ok = 1;
    for (int r = 0; r < rounds; ++r) {
      // Not forever: a writer that died (killed, a test's timeout) would
      // leave this spinning on a core.
      for (long spins = 1; turn->load(std::memory_order_acquire) != 2 * r + 1; ++spins) {
        if (spins % 4096 == 0 && getppid() != parent) _exit(1);
      }
      const auto t0 = std::chrono::steady_clock::now();
      iovec local{into.data(), bytes}, remote{source.data(), bytes};  // same address in the forked child
      const ssize_t got = process_vm_readv(parent, &local, 1, &remote, 1, 0);
      const auto t1 = std::chrono::steady_clock::now();
      const bool cma_right = got == static_cast<ssize_t>(bytes) &&
                             std::all_of(into.begin(), into.end(), [&](unsigned char c) { return c == (r & 0xff); });
      const auto t2 = std::chrono::steady_clock::now();
      std::memcpy(into.data(), shared, bytes);
      const auto t3 = std::chrono::steady_clock::now();
      const bool copy_right = std::all_of(into.begin(), into.end(), [&](unsigned char c) { return c == (r & 0xff); });
      if (got < 0) {
        result[0] = -errno;  // refused (ptrace rules, seccomp): nothing to time
        _exit(0);
      }
      if (!cma_right || !copy_right) ok = 0;
      result[1 + r] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
      result[1 + rounds + r] = std::chrono::duration_cast<std::chrono::nanoseconds>(t3 - t2).count();
      turn->store(2 * r + 2, std::memory_order_release);
      if (got < 0) break;
    }
    result[0] = ok;
    _exit(0);
  }
  for (int r = 0; r < rounds; ++r) {
    // Written just before the child reads, as a rank writes its input.
    std::memset(source.data(), r & 0xff, bytes);
    std::memset(shared, r & 0xff, bytes);
    turn->store(2 * r + 1, std::memory_order_release);
    int status = 0;
    while (turn->load(std::memory_order_acquire) != 2 * r + 2) {
      if (waitpid(child, &status, WNOHANG) == child) {
        if (result[0] < 0) break;  // refused: it said so and ended
        // It ended after its last round: the round's mark came between this
        // loop's read of it and the waitpid() (1 probe in ~300 was taken for
        // an early end).
        if (turn->load(std::memory_order_acquire) == 2 * r + 2) break;
        std::fprintf(stderr, "cma-probe: the reading process ended early\n");
        return false;
      }
    }
    if (result[0] < 0) break;
  }
  waitpid(child, nullptr, 0);
  if (result[0] < 0) {
    std::printf("%10zu process_vm_readv refused: %s (no single copy through the kernel here)\n", bytes,
                std::strerror(static_cast<int>(-result[0])));
    return true;
  }
  std::vector<double> cma(rounds), copy(rounds);
  for (int r = 0; r < rounds; ++r) {
    cma[static_cast<std::size_t>(r)] = static_cast<double>(result[1 + r]) / 1e3;
    copy[static_cast<std::size_t>(r)] = static_cast<double>(result[1 + rounds + r]) / 1e3;
  }
  const double c = median(cma), m = median(copy);
  std::printf("%10zu %12.1f %8.1f %12.1f %8.1f %8.2f %s\n", bytes, c, static_cast<double>(bytes) / c / 1e3, m,
              static_cast<double>(bytes) / m / 1e3, c / m, result[0] ? "ok" : "WRONG");
  const bool ok = result[0] != 0;
  munmap(turn, 4096);
  munmap(shared, bytes);
  munmap(result, result_bytes);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200;
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    const bool rounds_given = arg == "--rounds" && i + 1 < argc;
    const auto value = parse_size(rounds_given ? argv[++i] : argv[i]);
    if (!value || (rounds_given && (*value < 1 || *value > 500))) {
      std::fprintf(stderr, "cma-probe: %s %s is not %s\n%s", rounds_given ? "--rounds" : "size", argv[i],
                   rounds_given ? "a whole number in 1..500" : "a size in bytes (K and M suffixes)", kUsage);
      return 2;
    }
    if (rounds_given) {
      rounds = static_cast<int>(*value);
    } else {
      sizes.push_back(*value);
    }
  }
  if (sizes.empty()) sizes = {64 << 10, 1 << 20, 16 << 20};
  std::printf("# median of %d alternated rounds; the reader reads bytes the writer has just written\n", rounds);
  std::printf("#    bytes  cma_us  cma_GB/s  shared_us  shared_GB/s  cma/shared\n");
  bool ok = true;
  for (const std::size_t bytes : sizes) ok = probe(std::max<std::size_t>(bytes, 1), rounds) && ok;
  return ok ? 0 : 1;
}
