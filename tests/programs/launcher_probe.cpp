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
//                                         World::init(); the others init and
//                                         wait in a barrier
//   launcher_probe leave RANK             rank RANK exits 0 after its last
//                                         collective; the others go on without
//                                         it for a while, then exit 0
//
// A rank whose wait fails prints "probe rank K caught <what>" and exits 1.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: launcher_probe ok|exit|raise|wait|lines ...\n");
    return 64;
  }
  if (args[0] == "lines") return lines(args.size() > 1 ? std::atoi(args[1].c_str()) : 10);
  if (args[0] == "early" && args.size() == 3) {
    const char* my_rank = std::getenv("RANK");
    if (my_rank != nullptr && std::atoi(my_rank) == std::atoi(args[1].c_str())) {
      return std::atoi(args[2].c_str());
    }
  }

  int rank = -1;
  try {
    World world = World::init();
    rank = world.rank();
    world.barrier();
    if (args[0] == "ok") return 0;
    if (args[0] == "wait") return blocked_forever(world);
    if ((args[0] == "exit" || args[0] == "raise") && args.size() == 3) {
      if (rank == std::atoi(args[1].c_str())) {
        if (args[0] == "exit") return std::atoi(args[2].c_str());
        ::raise(std::atoi(args[2].c_str()));
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
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe rank %d caught %s\n", rank, e.what());
    return 1;
  }
}
