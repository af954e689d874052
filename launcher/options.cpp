#include "options.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string_view>

#include "base/env.hpp"
#include "base/text.hpp"
#include "shm/arena_layout.hpp"

namespace axon_launch {
namespace {

[[noreturn]] void bad_arguments(const std::string& message) {
  std::cerr << "axon-launch: " << message << " (see axon-launch --help)\n";
  std::exit(kExitBadArguments);
}

// Whether `path` names an executable regular file.
bool executable_file(const std::string& path, std::string& why) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    why = "no such file";
    return false;
  }
  if (S_ISDIR(info.st_mode)) {
    why = "is a directory";
    return false;
  }
  if (::access(path.c_str(), X_OK) != 0) {
    why = "not executable (permission denied)";
    return false;
  }
  return true;
}

// CLI11's usage line cannot show the pass-through PROGRAM [ARGS...] that
// prefix_command() collects, and it spells -n as required only in the option
// list; say both on the one line a reader looks at first.
class LauncherFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nUsage: axon-launch -n N [OPTIONS] PROGRAM [ARGS...]\n"
           "       (everything from PROGRAM on is passed to PROGRAM, flags included)\n";
  }
  // A flag takes no value; its row needs no "Excludes: ..." beside the name.
  std::string make_option_opts(const CLI::Option* option) const override {
    return option->get_expected_max() == 0 ? std::string() : CLI::Formatter::make_option_opts(option);
  }
};

}  // namespace

LaunchOptions parse_options(int argc, char** argv) {
  LaunchOptions options;
  const int max_ranks = axonml::distributed::shm::kMaxWorldSize;
  CLI::App app{
      "Runs N copies of PROGRAM as the ranks of one job, sharing a memory arena.\n"
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, AXON_ARENA_FD,\n"
      "AXON_ARENA_BYTES, AXON_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT (and\n"
      "AXON_TIMEOUT with --timeout, AXON_TAG_OUTPUT=1 while output is tagged), and\n"
      "MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (unless set, other than by an outer\n"
      "axon-launch) for PyTorch's env:// rendezvous. Unless already set, it also gets\n"
      "its thread share (AXON_THREADS_PER_RANK, OMP_NUM_THREADS), AXON_OVERSUBSCRIBED\n"
      "(1 when ranks outnumber cores) and, when bound within one NUMA node, AXON_NUMA_NODE.\n"
      "Exits 0 when every rank exits 0 and none aborted the job; else with the status\n"
      "of the first rank that failed (128+signal for a signal), or 1 when every rank\n"
      "exited 0 but the job had been aborted (a peer left while others waited for it).",      "axon-launch"};
  app.formatter(std::make_shared<LauncherFormatter>());
  app.prefix_command();  // PROGRAM and everything after it are passed through
  // Not ->required(): CLI11 would name the option by its long spelling
  // (--nproc), which the docs never use; the check below says "-n N".
  CLI::Option* nproc = app.add_option("-n,--nproc", options.world_size,
                                      "number of ranks (1.." + std::to_string(max_ranks) + "), required");
  // Signed, so that a negative value is named as given rather than wrapped.
  long long arena_mb = 0;
  app.add_option("--arena-mb", arena_mb,
                 "size of the shared arena in MiB, at most 1048576 (1 TiB) (default, or 0: sized for N ranks)");
  app.add_option("--timeout", options.timeout_s,
                 "seconds a rank may wait for its peers in one operation before failing "
                 "(AXON_TIMEOUT, default 300)");
  app.add_option("--start-timeout", options.start_timeout_s,
                 "seconds every rank has to reach World::init(); until every rank has reached it, "
                 "no wait counts towards --timeout (default 300)");
  app.add_option("--max-restarts", options.max_restarts,
                 "after a rank fails, end the job and start it again, up to K times (K in 0.." +
                     std::to_string(kMaxRestarts) +
                     "; AXON_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT give the attempt; default 0)");
  // Two flags rather than CLI11's "--tag-output,!--no-tag-output", whose
  // help line reads "--tag-output,--no-tag-output{false}".
  CLI::Option* tag = app.add_flag_callback("--tag-output", [&options] { options.tag_output = true; },
                                           "prefix each line of rank k's output with [rank k] (the default)");
  app.add_flag_callback("--no-tag-output", [&options] { options.tag_output = false; },
                        "pass the ranks' output through unchanged")
      ->excludes(tag);
  std::string bind;
  app.add_option("--bind", bind,
                 "pin each rank: core (its own cores; the default when N <= usable cores), "
                 "numa (a NUMA node), none");
  app.add_flag("--verbose", options.verbose, "print where each rank runs (rank -> cpus -> NUMA node)");
  app.set_version_flag("--version", "axon-launch " AXON_LAUNCH_VERSION);
  app.footer("Example: axon-launch -n 8 ./examples/train --epochs 2");
  // CLI11 takes an empty value ('') as the option's default; whoever typed
  // one meant something else (an unset shell variable, say).
  const CLI::Validator non_empty(
      [](std::string& value) { return value.empty() ? std::string("an empty value is not allowed") : std::string(); },
      "", "non-empty");
  for (CLI::Option* option : app.get_options()) {
    if (option->get_expected_max() > 0) option->check(non_empty);
  }
  // Numbers in decimal, as the AXON_* variables read them: CLI11 also takes
  // 0x10, 0o20 and 0b10000, which the environment refused (found by a review).
  // Each keeps the text as typed, for messages: 1e-400 reads as 0, and the
  // range message quoted "--timeout 0" (a review).
  std::string timeout_text, start_timeout_text;
  auto decimal = [](std::string& typed) {
    return CLI::Validator(
        [&typed](std::string& value) {
          typed = value;
          const bool plain = value.find_first_not_of("0123456789.+-eE") == std::string::npos;
          return plain ? std::string() : "'" + value + "' is not a decimal number";
        },
        "", "decimal");
  };
  // Whole numbers that fit: CLI11 clamps one too large to the type's limit,
  // and the range message then quoted a number nobody typed.
  const CLI::Validator whole(
      [](std::string& value) {
        if (value.empty()) return std::string("an empty value is not allowed");  // as non_empty says
        long long parsed = 0;
        const char* end = value.data() + value.size();
        const auto [at, error] = std::from_chars(value.data(), end, parsed);
        if (error == std::errc::result_out_of_range) return "'" + value + "' is out of range";
        if (error != std::errc() || at != end) return "'" + value + "' is not a whole decimal number";
        value = std::to_string(parsed);  // CLI11 reads a leading 0 as octal: 010 started 8 ranks
        return std::string();
      },
      "", "whole");
  for (CLI::Option* option : {nproc, app.get_option("--arena-mb"), app.get_option("--max-restarts")}) {
    option->transform(whole);  // a transform, not a check: it hands CLI11 the number in plain decimal
  }
  app.get_option("--timeout")->check(decimal(timeout_text));
  app.get_option("--start-timeout")->check(decimal(start_timeout_text));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    std::exit(0);
  } catch (const CLI::CallForVersion&) {
    std::cout << app.version() << "\n";
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // "--timeout= ./train": CLI11 takes the next word as the value, and the
    // error then quoted the program ("'./train' is not a decimal number";
    // found by a review). Say what was typed, but only where the error quotes
    // the word after it: a program's own "--timeout=" further on is its own.
    for (int i = 1; i + 1 < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg.size() > 3 && arg.starts_with("--") && arg.back() == '=' &&
          what.find(arg.substr(0, arg.size() - 1)) != std::string::npos &&
          what.find("'" + std::string(argv[i + 1]) + "'") != std::string::npos) {
        bad_arguments(std::string(arg) + " has no value (write " + std::string(arg) + "VALUE)");
      }
    }
    // CLI11 names -n by its long spelling, which the docs never use, both
    // as a prefix ("--nproc: ...") and inside ("Could not convert: --nproc = 1x").
    for (std::size_t at = what.find("--nproc"); at != std::string::npos; at = what.find("--nproc", at)) {
      what.replace(at, 7, "-n");
    }
    // An option given twice ("-n 2 -n 3"): CLI11 says "-n: At Most 1 required
    // but received 2", which reads as a count of values (found by a review).
    const std::string_view twice = ": At Most 1 required but received ";
    if (const std::size_t at = what.find(twice); at != std::string::npos) {
      const std::string name = what.substr(0, at);
      const std::string times = what.substr(at + twice.size());
      bad_arguments(name + " was given " + times + " times; give it once");
    }
    bad_arguments(what);
  }

  // First: prefix_command() stops at the first word it does not know, so
  // "--n 2 prog" left "--n" as the program, and the message was that -n is
  // required (a review).
  options.command = app.remaining();
  if (!options.command.empty() && options.command.front() == "--") {
    options.command.erase(options.command.begin());
  } else if (!options.command.empty() && !options.command.front().empty() && options.command.front().front() == '-') {
    bad_arguments("unknown option " + options.command.front());
  }
  if (nproc->count() == 0) {
    bad_arguments("-n N is required: the number of ranks to start, e.g. axon-launch -n 4 PROGRAM");
  }
  if (options.world_size < 1 || options.world_size > max_ranks) {
    bad_arguments("-n " + std::to_string(options.world_size) + " is out of range (1.." +
                  std::to_string(max_ranks) + ")");
  }
  auto check_seconds = [](const char* flag, double seconds, const std::string& typed) {
    // The same range as AXON_TIMEOUT, which --timeout sets for the ranks; the
    // negated comparisons also catch NaN.
    namespace env = axonml::distributed::env;
    if (!(seconds >= env::kMinTimeoutSeconds) || !(seconds <= env::kMaxTimeoutSeconds)) {
      bad_arguments(std::string(flag) + " " + (typed.empty() ? axonml::distributed::shortest_text(seconds) : typed) +
                    " is not a number of seconds in " + env::timeout_range_text());
    }
  };
  if (options.timeout_s) check_seconds("--timeout", *options.timeout_s, timeout_text);
  check_seconds("--start-timeout", options.start_timeout_s, start_timeout_text);
  if (options.max_restarts < 0 || options.max_restarts > kMaxRestarts) {
    bad_arguments("--max-restarts " + std::to_string(options.max_restarts) + " is out of range (0.." +
                  std::to_string(kMaxRestarts) + ")");
  }
  if (arena_mb < 0) bad_arguments("--arena-mb " + std::to_string(arena_mb) + " is negative");
  if (arena_mb > (1LL << 20)) bad_arguments("--arena-mb " + std::to_string(arena_mb) + " is above the 1 TiB limit");
  options.arena_mb = static_cast<std::size_t>(arena_mb);
  if (app.count("--bind") > 0) {
    options.bind = bind_policy_from(bind);
    if (!options.bind) bad_arguments("--bind " + bind + " is not one of none, core, numa");
  }
  if (options.command.empty()) bad_arguments("no PROGRAM given");
  return options;
}

std::optional<std::string> resolve_program(const std::string& program, std::string& why) {
  if (program.empty()) {
    why = "empty program name";
    return std::nullopt;
  }
  if (program.find('/') != std::string::npos) {
    if (executable_file(program, why)) return program;
    return std::nullopt;
  }
  const char* path_env = std::getenv("PATH");
  std::istringstream path(path_env ? path_env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  std::string last_why = "not found in PATH";
  while (std::getline(path, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    std::string candidate_why;
    if (executable_file(candidate, candidate_why)) return candidate;
    if (candidate_why != "no such file") last_why = candidate + ": " + candidate_why;
  }
  why = last_why;
  return std::nullopt;
}

}  // namespace axon_launch
