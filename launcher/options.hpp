// The launcher's command line.
//
//   axon-launch -n N [--arena-mb M] [--timeout S] [--tag-output | --no-tag-output]
//               PROGRAM [ARGS...]
//
// Everything from PROGRAM on belongs to the program, flags included.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace axon_launch {

struct LaunchOptions {
  int world_size = 1;
  std::size_t arena_mb = 0;            // 0: sized for the world (shm::default_arena_bytes)
  std::optional<double> timeout_s;     // exported as AXON_TIMEOUT; unset: inherit it
  bool tag_output = true;
  std::vector<std::string> command;    // PROGRAM ARGS...
};

// The exit statuses of the launcher itself (a rank's status is passed on as is).
inline constexpr int kExitBadArguments = 2;
inline constexpr int kExitSetupFailed = 1;
inline constexpr int kExitNoProgram = 127;

// Parses argv. On --help prints usage and exits 0; on a bad argument prints
// one line to stderr and exits kExitBadArguments.
LaunchOptions parse_options(int argc, char** argv);

// The path execvp would run for `program`, or nullopt with `why` filled in
// when there is none (not found, not executable, a directory).
std::optional<std::string> resolve_program(const std::string& program, std::string& why);

}  // namespace axon_launch
