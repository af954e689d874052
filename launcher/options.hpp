// The launcher's command line.
//
//   axon-launch -n N [--arena-mb M] [--timeout S] [--start-timeout S]
//               [--max-restarts K] [--tag-output | --no-tag-output]
//               [--bind none|core|numa] [--verbose] PROGRAM [ARGS...]
//
// Everything from PROGRAM on belongs to the program, flags included.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "placement.hpp"

namespace axon_launch {

struct LaunchOptions {
  int world_size = 1;
  std::size_t arena_mb = 0;            // 0: sized for the world (shm::default_arena_bytes)
  std::optional<double> timeout_s;     // exported as AXON_TIMEOUT; unset: inherit it
  double start_timeout_s = 300;        // every rank must attach within this
  int max_restarts = 0;                // attempts after the first that a failure may start
  bool tag_output = true;
  std::optional<BindPolicy> bind;      // unset: core when N fits the allowed cores, else none
  bool verbose = false;                // print the placement
  std::vector<std::string> command;    // PROGRAM ARGS...
};

// The exit statuses of the launcher itself (a rank's status is passed on as is).
inline constexpr int kExitBadArguments = 2;
inline constexpr int kExitSetupFailed = 1;
inline constexpr int kExitNoProgram = 127;

inline constexpr int kMaxRestarts = 1000;

// Parses argv. On --help prints usage and exits 0; on a bad argument prints
// one line to stderr and exits kExitBadArguments.
LaunchOptions parse_options(int argc, char** argv);

// The path execvp would run for `program`, or nullopt with `why` filled in
// when there is none (not found, not executable, a directory).
std::optional<std::string> resolve_program(const std::string& program, std::string& why);

}  // namespace axon_launch
