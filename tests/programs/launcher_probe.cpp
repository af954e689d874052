// A rank program that misbehaves on request, for the launcher tests.
//
//   launcher_probe ok                     init, barrier, exit 0
//   launcher_probe exit RANK CODE         rank RANK exits CODE after init; the
//                                         others then wait in a barrier
//   launcher_probe raise RANK SIGNAL      rank RANK kills itself with SIGNAL
//   launcher_probe wait                   init, print "ready pid=<pid>", then
//                                         block in a recv nobody answers
//   launcher_probe lines COUNT            write COUNT stdout and stderr lines
//                                         in pieces, then an unterminated one
//   launcher_probe early RANK CODE        rank RANK exits CODE without calling
//                                         World::init() (a CODE other than 0
//                                         once every other rank has joined);
//                                         the others init and wait in a barrier
//   launcher_probe leave RANK             rank RANK exits 0 after its last
//                                         collective; the others go on without
//                                         it for a while, then exit 0
//   launcher_probe init-only [MS]        rank K sleeps K * MS ms, then init, print
//                                         "joined rank=K", exit 0 at once (no
//                                         collective at all)
//   launcher_probe send-return [MS]      rank 0 sends 8 floats to rank 1 and
//                                         returns; rank 1 sleeps MS ms before
//                                         init, then receives and prints them
//   launcher_probe leave-needed RANK CODE
//                                         ranks 0..2 make a subgroup; after a
//                                         world barrier rank RANK exits CODE while
//                                         the others wait for it: the subgroup
//                                         members in an all_reduce, rank 3 in a
//                                         recv from it
//   launcher_probe slow-start RANK SECONDS
//                                         rank RANK sleeps SECONDS before init;
//                                         then everyone meets in a barrier.
//                                         RANK "all": every rank r sleeps
//                                         SECONDS + 0.1 r
//   launcher_probe slow-start-chain RANK SECONDS
//                                         as slow-start (RANK must be 2, of 3), then
//                                         rank 2 sends to 0, 0 passes it on to 1
//   launcher_probe exec-self              init, barrier, then exec this program
//                                         as "ok": its World::init() has no arena
//   launcher_probe init-twice RANK        rank RANK calls World::init() twice
//   launcher_probe late RANK SECONDS      rank RANK comes SECONDS late to a barrier
//                                         the others time out in; all catch their
//                                         error, RANK exits 1, the others 0
//   launcher_probe done-then-abort        rank 0 exits 0 after a barrier; rank 1
//                                         times out in a recv from rank 2 (asleep
//                                         5 s), handles it PROBE_CATCH_SECONDS,
//                                         and exits 0; rank 2 exits PROBE_LAST_EXIT
//                                         (default 0)
//   launcher_probe hang RANK              after a first barrier rank RANK stays
//                                         alive 60 s without calling the second,
//                                         in which the others time out
//   launcher_probe port                   no init: tries MASTER_PORT twice on
//                                         every IPv4 address, as another program
//                                         picking a port would (plain bind) and as
//                                         PyTorch's store does (SO_REUSEADDR,
//                                         bind, listen); prints "plain=<errno
//                                         name or ok> store=<...>"
//   launcher_probe fail-first RANK CODE   in the first attempt (AXON_RESTART_COUNT
//                                         0) rank RANK exits CODE after init; in
//                                         later ones every rank prints "attempt
//                                         N restart-env=<TORCHELASTIC_RESTART_COUNT>"
//                                         after a barrier and exits 0
//
// A rank whose wait fails prints "probe rank K caught <what>" and exits 1
// (or PROBE_CAUGHT_EXIT, to play a program that handles the error and ends
// normally).
#include <signal.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <cstring>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"
#include "shm/arena_layout.hpp"

using namespace axonml::distributed;

namespace {

void write_piece(int fd, const std::string& text) {
  if (::write(fd, text.data(), text.size()) < 0) std::exit(3);
}

int lines(int count) {
  const char* rank = std::getenv("RANK");
  const std::string r = rank ? rank : "?";
  for (int i = 0; i < count; ++i) {
    // Each line goes out in two writes with a pause between: a launcher that
    // forwarded bytes as they came would interleave ranks mid-line.
    write_piece(1, "out-" + r + "-");
    write_piece(2, "err-" + r + "-");
    ::usleep(200);
    write_piece(1, std::to_string(i) + "-end\n");
    write_piece(2, std::to_string(i) + "-end\n");
  }
  write_piece(1, "tail-" + r);
  return 0;
}

// Reads the launcher's arena without attaching to it (ArenaHeader::attached)
// until every other rank has attached, so that
// this rank's exit comes after theirs and the launcher's summary can say
// "before joining the job" (it says so only when someone has joined).
void wait_until_others_joined() {
  const char* fd = std::getenv("AXON_ARENA_FD");
  const char* bytes = std::getenv("AXON_ARENA_BYTES");
  const char* size = std::getenv("WORLD_SIZE");
  if (fd == nullptr || bytes == nullptr || size == nullptr) return;
  void* arena = ::mmap(nullptr, std::strtoull(bytes, nullptr, 10), PROT_READ, MAP_SHARED, std::atoi(fd), 0);
  if (arena == MAP_FAILED) return;
  const auto& attached = reinterpret_cast<const shm::ArenaHeader*>(arena)->attached;
  const auto others = static_cast<std::uint32_t>(std::atoi(size) - 1);
  for (int i = 0; i < 60000 && attached.load(std::memory_order_acquire) < others; ++i) ::usleep(1000);
}

int blocked_forever(World& world) {
  std::printf("ready pid=%d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  // Wait (futex, no CPU) for a message nobody sends: only an abort, the
  // launcher's death or AXON_TIMEOUT ends this.
  float value = 0;
  const int next = (world.rank() + 1) % world.world_size();
  world.backend().recv(std::span<float>(&value, 1), next, 99);
  return 0;
}

// Binds a fresh socket to `port` on every IPv4 address, with SO_REUSEADDR
// and then listen() when `as_store`; "ok", or the errno's name.
std::string try_port(int port, bool as_store) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "socket-failed";
  const int yes = 1;
  if (as_store) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  if (rc == 0 && as_store) rc = ::listen(fd, 16);
  const int error = errno;
  ::close(fd);
  if (rc == 0) return "ok";
  return error == EADDRINUSE ? "EADDRINUSE" : std::to_string(error);
}

int port_probe() {
  const char* port = std::getenv("MASTER_PORT");
  if (port == nullptr || *port == '\0') {
    std::printf("no MASTER_PORT\n");
    return 1;
  }
  const std::string plain = try_port(std::atoi(port), false);
  const std::string store = try_port(std::atoi(port), true);
  std::printf("plain=%s store=%s\n", plain.c_str(), store.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: launcher_probe MODE ... (see the source)\n");
    return 64;
  }
  if (args[0] == "lines") return lines(args.size() > 1 ? std::atoi(args[1].c_str()) : 10);
  if (args[0] == "port") return port_probe();
  if ((args[0] == "init-only" || args[0] == "send-return") && args.size() == 2) {
    // Late ranks attach after early ones have already finished.
    const char* my_rank = std::getenv("RANK");
    const int k = my_rank ? std::atoi(my_rank) : 0;
    const int ms = std::atoi(args[1].c_str());
    if (args[0] == "init-only") ::usleep(static_cast<useconds_t>(k * ms * 1000));
    if (args[0] == "send-return" && k == 1) ::usleep(static_cast<useconds_t>(ms * 1000));
  }
  if ((args[0] == "slow-start" || args[0] == "slow-start-chain") && args.size() == 3) {
    const char* my_rank = std::getenv("RANK");
    if (args[1] == "all" && my_rank != nullptr) {
      ::usleep(static_cast<useconds_t>((std::atof(args[2].c_str()) + 0.1 * std::atoi(my_rank)) * 1e6));
    } else if (my_rank != nullptr && std::atoi(my_rank) == std::atoi(args[1].c_str())) {
      ::usleep(static_cast<useconds_t>(std::atof(args[2].c_str()) * 1e6));
    }
  }
  if (args[0] == "early" && args.size() == 3) {
    const char* my_rank = std::getenv("RANK");
    if (my_rank != nullptr && std::atoi(my_rank) == std::atoi(args[1].c_str())) {
      const int code = std::atoi(args[2].c_str());
      if (code != 0) wait_until_others_joined();
      return code;
    }
  }

  if (args[0] == "refuse-arguments" && args.size() == 2) {  // as a program that checks them before World::init()
    std::fprintf(stderr, "probe: bad arguments\n");
    return std::atoi(args[1].c_str());
  }

  int rank = -1;
  try {
    World world = World::init();
    rank = world.rank();
    // These modes are about what happens right after World::init().
    if (args[0] != "init-only" && args[0] != "send-return" && args[0] != "init-twice" &&
        args[0] != "slow-start-chain") {
      world.barrier();
    }
    if (args[0] == "ok") return 0;
    if (args[0] == "child-joins") {  // a program the rank starts tries to join too
      char self[4096] = {};
      if (::readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 3;
      const int status = std::system((std::string(self) + " ok").c_str());  // this binary, as the rank's child
      std::printf("child exited with %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      return 0;
    }
    if (args[0] == "exec-self") {  // the rank replaces its program after joining: not a rank any more
      char self[4096] = {};
      if (::readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 3;
      ::execl(self, self, "ok", static_cast<char*>(nullptr));
      return 4;
    }
    if (args[0] == "wait") return blocked_forever(world);
    if ((args[0] == "exit" || args[0] == "raise") && args.size() == 3) {
      if (rank == std::atoi(args[1].c_str())) {
        if (args[0] == "exit") return std::atoi(args[2].c_str());
        ::raise(std::atoi(args[2].c_str()));
      }
      world.barrier();
      return 0;
    }
    if (args[0] == "init-only") {
      std::printf("joined rank=%d\n", rank);
      return 0;
    }
    if (args[0] == "send-return") {
      std::vector<float> data(8);
      if (rank == 0) {
        for (int i = 0; i < 8; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i) + 0.5f;
        world.backend().send(std::span<const float>(data), 1, 7);
      } else if (rank == 1) {
        world.backend().recv(std::span<float>(data), 0, 7);
        std::printf("received");
        for (float v : data) std::printf(" %g", static_cast<double>(v));
        std::printf("\n");
      }
      return 0;
    }
    if (args[0] == "leave-needed" && args.size() == 3) {
      const int leaver = std::atoi(args[1].c_str());
      const ProcessGroup trio = world.new_group({0, 1, 2});
      world.barrier();
      if (rank == leaver) {
        std::fflush(nullptr);
        std::_Exit(std::atoi(args[2].c_str()));
      }
      std::vector<float> value{1.0f};
      if (trio.contains(rank)) {
        trio.backend().all_reduce(std::span<float>(value), ReduceOp::Sum);
      } else {
        world.backend().recv(std::span<float>(value), leaver, 5);
      }
      std::fprintf(stderr, "probe rank %d was not stopped\n", rank);
      return 0;
    }
    if (args[0] == "slow-start-chain") {
      // Rank 1 waits for rank 0, which waits for the late rank 2: start-up
      // for rank 1 as much as for rank 0.
      std::vector<float> value{static_cast<float>(rank)};
      if (rank == 2) world.backend().send(std::span<const float>(value), 0, 3);
      if (rank == 0) {
        world.backend().recv(std::span<float>(value), 2, 3);
        world.backend().send(std::span<const float>(value), 1, 3);
      }
      if (rank == 1) world.backend().recv(std::span<float>(value), 0, 3);
      std::printf("chained rank=%d value=%g\n", rank, static_cast<double>(value[0]));
      return 0;
    }
    if (args[0] == "slow-start") {
      world.barrier();
      std::printf("met rank=%d\n", rank);
      return 0;
    }
    if (args[0] == "init-twice" && args.size() == 2) {
      if (rank == std::atoi(args[1].c_str())) World again = World::init();
      world.barrier();
      return 0;
    }
    if (args[0] == "fail-first" && args.size() == 3) {
      const char* attempt = std::getenv("AXON_RESTART_COUNT");
      const char* torch = std::getenv("TORCHELASTIC_RESTART_COUNT");
      if (attempt != nullptr && std::string(attempt) == "0" && rank == std::atoi(args[1].c_str())) {
        return std::atoi(args[2].c_str());
      }
      world.barrier();
      std::printf("attempt %s restart-env=%s\n", attempt ? attempt : "unset", torch ? torch : "unset");
      return 0;
    }
    if (args[0] == "done-then-abort") {
      // Rank 0 ends its work at once; rank 1 then times out in a recv from
      // rank 2 (asleep 5 s outside any collective), which aborts the job,
      // and handles its error for PROBE_CATCH_SECONDS before exiting 0;
      // rank 2 wakes and exits PROBE_LAST_EXIT.
      world.barrier();
      if (rank == 0) return 0;
      if (rank == 2) {
        ::sleep(5);
        const char* code = std::getenv("PROBE_LAST_EXIT");
        return code ? std::atoi(code) : 0;
      }
      float value = 0;
      try {
        world.backend().recv(std::span<float>(&value, 1), 2, 7);
      } catch (const Timeout& e) {
        std::printf("probe rank %d caught: %s\n", rank, e.what());  // output wakes the launcher
        std::fflush(stdout);
        const char* seconds = std::getenv("PROBE_CATCH_SECONDS");
        ::sleep(static_cast<unsigned>(seconds ? std::atoi(seconds) : 0));
        std::printf("probe rank %d handled its error\n", rank);
      }
      return 0;
    }
    if (args[0] == "late" && args.size() == 3) {
      // Rank RANK comes to the barrier SECONDS late, after the others timed
      // out in it; every rank catches its error, the late one exits 1.
      const int late = std::atoi(args[1].c_str());
      if (rank == late) ::sleep(static_cast<unsigned>(std::atoi(args[2].c_str())));
      try {
        world.barrier();
      } catch (const PeerFailure& e) {
        std::printf("probe rank %d caught: %s\n", rank, e.what());
      }
      return rank == late ? 1 : 0;
    }
    if (args[0] == "wait-for-file" && args.size() == 2) {
      // Every rank waits in the second barrier until rank 0 comes, once the
      // file exists (the test stops and resumes the job first).
      world.barrier();
      std::printf("ready pid=%d\n", static_cast<int>(::getpid()));
      std::fflush(stdout);
      if (rank == 0) {
        while (::access(args[1].c_str(), F_OK) != 0) ::usleep(10 * 1000);
      }
      world.barrier();
      std::printf("met rank=%d\n", rank);
      return 0;
    }
    if (args[0] == "hang" && args.size() == 2) {
      if (rank == std::atoi(args[1].c_str())) {
        ::sleep(60);  // until the launcher stops it after the abort
        return 0;
      }
      world.barrier();
      return 0;
    }
    if (args[0] == "early") {
      world.barrier();  // never completes: the early rank is not there
      return 0;
    }
    if (args[0] == "leave" && args.size() == 2) {
      const int leaver = std::atoi(args[1].c_str());
      std::vector<int> others;
      for (int r = 0; r < world.world_size(); ++r) {
        if (r != leaver) others.push_back(r);
      }
      const ProcessGroup rest = world.new_group(others);
      world.barrier();
      if (rank == leaver) return 0;
      for (int i = 0; i < 5; ++i) {
        ::usleep(100 * 1000);
        rest.barrier();
      }
      return 0;
    }
    std::fprintf(stderr, "launcher_probe: unknown mode %s\n", args[0].c_str());
    return 64;
  } catch (const PeerFailure& e) {
    std::fprintf(stderr, "probe rank %d caught PeerFailure: %s\n", rank, e.what());
    const char* code = std::getenv("PROBE_CAUGHT_EXIT");
    return code ? std::atoi(code) : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe rank %d caught %s\n", rank, e.what());
    return 1;
  }
}
