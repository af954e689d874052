#include "base/env.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "axonml/distributed/error.hpp"
#include "base/text.hpp"

namespace axonml::distributed::env {
namespace {

[[noreturn]] void reject(const char* name, const std::string& value, const std::string& expected) {
  throw InvalidArgument(std::string(name) + "=" + value + " is not " + expected);
}

// strtoll and strtod skip leading blanks; a value with them is a typo too.
bool starts_blank(const std::string& value) { return std::isspace(static_cast<unsigned char>(value[0])) != 0; }

}  // namespace

std::optional<std::string> text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long long> integer(const char* name, long long low, long long high) {
  const auto value = text(name);
  if (!value) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || starts_blank(*value) || parsed < low || parsed > high) {
    reject(name, *value, "a whole number in " + std::to_string(low) + ".." + std::to_string(high));
  }
  return parsed;
}

std::string timeout_range_text() {
  return shortest_text(kMinTimeoutSeconds) + ".." + shortest_text(kMaxTimeoutSeconds);
}

std::chrono::milliseconds timeout_milliseconds(double seconds) {
  return std::chrono::milliseconds(std::llround(seconds * 1000.0));
}

std::optional<double> timeout_seconds(const char* name) {
  const auto value = text(name);
  if (!value) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  // The negated comparisons also catch NaN; inf is above the range. strtod
  // also reads hexadecimal ("0x10"), which no other number here takes.
  const bool decimal = value->find_first_of("xX") == std::string::npos;
  if (errno != 0 || *end != '\0' || !decimal || starts_blank(*value) || !(parsed >= kMinTimeoutSeconds) ||
      !(parsed <= kMaxTimeoutSeconds)) {
    reject(name, *value, "a number of seconds in " + timeout_range_text());
  }
  return parsed;
}

std::optional<bool> flag(const char* name) {
  const auto value = text(name);
  if (!value) return std::nullopt;
  if (*value != "0" && *value != "1") reject(name, *value, "0 or 1");
  return *value == "1";
}

namespace {

std::optional<std::string> pick(const char* name, std::initializer_list<std::string_view> allowed,
                                bool any_case) {
  const auto value = text(name);
  if (!value) return std::nullopt;
  std::string key = *value;
  if (any_case) {
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string list;
  for (std::string_view option : allowed) {
    if (key == option) return std::string(option);
    list += (list.empty() ? "" : ", ") + std::string(option);
  }
  reject(name, *value, "one of: " + list);
}

}  // namespace

std::optional<std::string> choice(const char* name, std::initializer_list<std::string_view> allowed) {
  return pick(name, allowed, false);
}

std::optional<std::string> choice_any_case(const char* name,
                                           std::initializer_list<std::string_view> allowed) {
  return pick(name, allowed, true);
}

}  // namespace axonml::distributed::env
