// Reading AXON_* (and the launchers') environment variables: the one strict,
// typed reader that the library and axon-launch use for every variable they
// read (the launcher's PATH lookup aside).
//
// Each function returns std::nullopt when the variable is unset or empty, and
// otherwise the parsed value; a value that does not parse, or lies outside
// the stated range, throws InvalidArgument naming the variable, the value and
// what was expected, e.g. "AXON_TIMEOUT=abc is not a number of seconds in
// 0.001..31536000". Nothing falls back silently on garbage.
//
// Callers on hot paths read once (a function-local static) and keep the value.
//
// Thread safety: safe from any thread as long as nobody calls setenv()
// concurrently (a POSIX rule, not ours).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace axonml::distributed::env {

// The raw text; nullopt when unset or empty.
std::optional<std::string> text(const char* name);

// A whole decimal number in [low, high].
std::optional<long long> integer(const char* name, long long low, long long high);

// A finite number of seconds in [0.001, max_seconds] (below a millisecond
// every wait would fail at once); the message says "0.001..max_seconds".
std::optional<double> seconds(const char* name, double max_seconds);

// "0" or "1".
std::optional<bool> flag(const char* name);

// One of `allowed`, compared exactly.
std::optional<std::string> choice(const char* name, std::initializer_list<std::string_view> allowed);

// One of `allowed` (spelled in lower case) in any case; returns the allowed
// spelling ("INFO" reads as "info").
std::optional<std::string> choice_any_case(const char* name,
                                           std::initializer_list<std::string_view> allowed);

}  // namespace axonml::distributed::env
