// Reading AXON_* (and the launchers') environment variables: the one strict,
// typed reader that the library and axon-launch use for every variable they
// read (the launcher's PATH lookup aside).
//
// Each function returns std::nullopt when the variable is unset or empty, and
// otherwise the parsed value; a value that does not parse, or lies outside
// the stated range, throws InvalidArgument naming the variable, the value and
// what was expected, e.g. "AXON_TIMEOUT=abc is not a number of seconds in
// 0.01..1e+06". Nothing falls back silently on garbage.
//
// Callers on hot paths read once (a function-local static) and keep the value.
//
// Thread safety: safe from any thread as long as nobody calls setenv()
// concurrently (a POSIX rule, not ours).
#pragma once

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace axonml::distributed::env {

// The raw text; nullopt when unset or empty.
std::optional<std::string> text(const char* name);

// A whole decimal number in [low, high].
std::optional<long long> integer(const char* name, long long low, long long high);

// The range of the runtime's wait timeout (AXON_TIMEOUT) and of
// axon-launch's --timeout, which sets it, and --start-timeout, in seconds:
// below it a wait could not even sleep once, above it is "never" (which is
// not a deadline). A PyTorch group's timeout is PyTorch's to check.
inline constexpr double kMinTimeoutSeconds = 0.01;
inline constexpr double kMaxTimeoutSeconds = 1e6;

// A finite number of seconds in [kMinTimeoutSeconds, kMaxTimeoutSeconds];
// the message says "0.01..1e+06", as axon-launch's does.
std::optional<double> timeout_seconds(const char* name);

// "0.01..1e+06": the range above, as messages print it.
std::string timeout_range_text();

// A timeout in seconds as the deadline's milliseconds, to the nearest
// (1.005 s is 1005 ms, where truncating 1.005 * 1000 gives 1004), so that a
// message printing it back says the value given. REQUIRES: seconds in range.
std::chrono::milliseconds timeout_milliseconds(double seconds);

// "0" or "1".
std::optional<bool> flag(const char* name);

// One of `allowed`, compared exactly.
std::optional<std::string> choice(const char* name, std::initializer_list<std::string_view> allowed);

// One of `allowed` (spelled in lower case) in any case; returns the allowed
// spelling ("INFO" reads as "info").
std::optional<std::string> choice_any_case(const char* name,
                                           std::initializer_list<std::string_view> allowed);

}  // namespace axonml::distributed::env
