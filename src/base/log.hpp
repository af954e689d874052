// Rank-aware logging: the one place the library writes diagnostics.
//
// Every line goes to stderr as "[rank 3] 12:00:01.234 debug: message", so
// the output of many ranks interleaved in one terminal stays readable. The
// level comes from AXON_LOG_LEVEL (trace, debug, info, warn, error, off;
// default warn); AXON_DEBUG=1 lowers it to at least debug, which logs each
// collective with its descriptor as it begins. Under axon-launch, which
// prefixes each rank's output lines itself (AXON_TAG_OUTPUT=1), a process's
// lines about its own rank carry no second prefix.
//
// This facade hides the logging library (spdlog) from the rest of the code:
// callers include only this header and pay one relaxed atomic load for a
// disabled line; the message is formatted only when the level is enabled.
//
// Thread safety: every function may be called from any thread; lines from
// concurrent threads never interleave within a line.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <string_view>
#include <utility>

namespace axonml::distributed::log {

enum class Level { Trace, Debug, Info, Warn, Error, Off };

std::string_view to_string(Level level);

namespace detail {
// The threshold as last applied, or kUnread before the settings were first
// read: every collective asks whether its debug line is enabled, so the
// answer is one relaxed load of this word, not a call.
inline constexpr int kUnread = -1;
inline std::atomic<int> threshold{kUnread};
Level read_threshold();  // reads the settings once (see reload_from_environment)
}  // namespace detail

// The current threshold; lines below it are dropped.
inline Level level() {
  const int t = detail::threshold.load(std::memory_order_relaxed);
  return t == detail::kUnread ? detail::read_threshold() : static_cast<Level>(t);
}
inline bool enabled(Level at) { return at != Level::Off && at >= level(); }

// Re-reads AXON_LOG_LEVEL, AXON_DEBUG and AXON_TAG_OUTPUT; a bad value
// (a level not in the list, a flag not 0 or 1) throws InvalidArgument naming
// it and changes nothing. They are read once before the first line, where a
// bad value is reported as a warning and the defaults apply (a log line never
// throws); World::init() calls this, so a typo stops the program at start.
// Call it again after changing the environment (tests do).
void reload_from_environment();

// The rank to name when a line has no rank of its own: RANK from the
// launcher's environment (or OMPI_COMM_WORLD_RANK under mpirun), else 0 (a
// process run alone is a world of one).
int process_rank();

// Writes one line for `rank` (a world rank) at `at`, if enabled.
void write(Level at, int rank, std::string_view message);

template <typename... Args>
void log(Level at, int rank, fmt::format_string<Args...> format, Args&&... args) {
  if (!enabled(at)) return;
  write(at, rank, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void trace(int rank, fmt::format_string<Args...> format, Args&&... args) {
  log(Level::Trace, rank, format, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(int rank, fmt::format_string<Args...> format, Args&&... args) {
  log(Level::Debug, rank, format, std::forward<Args>(args)...);
}
template <typename... Args>
void info(int rank, fmt::format_string<Args...> format, Args&&... args) {
  log(Level::Info, rank, format, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(int rank, fmt::format_string<Args...> format, Args&&... args) {
  log(Level::Warn, rank, format, std::forward<Args>(args)...);
}
template <typename... Args>
void error(int rank, fmt::format_string<Args...> format, Args&&... args) {
  log(Level::Error, rank, format, std::forward<Args>(args)...);
}

}  // namespace axonml::distributed::log
