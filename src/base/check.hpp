// Internal consistency checks: the `REQUIRES:` lines of the headers, made
// executable.
//
// What a user or a peer can cause is an exception (error.hpp). What only a
// bug in this library can cause is checked here: in debug and sanitizer
// builds (AXON_ASSERTS=1, set by the debug, asan and tsan presets) a failed
// check prints the condition, both values and where, then aborts; in release
// builds the checks compile to nothing.
//
//   check::less_equal(begin, end, "reduce: begin <= end");
//
// Thread safety: safe from any thread.
#pragma once

#include <source_location>
#include <sstream>
#include <string>
#include <string_view>

#ifndef AXON_ASSERTS
#define AXON_ASSERTS 0
#endif

namespace axonml::distributed::check {

inline constexpr bool kEnabled = AXON_ASSERTS != 0;

// Prints "axonml: check failed at FILE:LINE (FUNCTION): WHAT (DETAIL)" and aborts.
[[noreturn]] void fail(std::string_view what, const std::string& detail, std::source_location where);

namespace detail {
template <class A, class B>
std::string both(const A& a, std::string_view relation, const B& b) {
  std::ostringstream out;
  out << a << ' ' << relation << ' ' << b;
  return out.str();
}
}  // namespace detail

inline void that(bool condition, std::string_view what,
                 std::source_location where = std::source_location::current()) {
  if constexpr (kEnabled) {
    if (!condition) fail(what, "false", where);
  }
}

template <class A, class B>
void equal(const A& a, const B& b, std::string_view what,
           std::source_location where = std::source_location::current()) {
  if constexpr (kEnabled) {
    if (!(a == b)) fail(what, detail::both(a, "!=", b), where);
  }
}

template <class A, class B>
void less(const A& a, const B& b, std::string_view what,
          std::source_location where = std::source_location::current()) {
  if constexpr (kEnabled) {
    if (!(a < b)) fail(what, detail::both(a, ">=", b), where);
  }
}

template <class A, class B>
void less_equal(const A& a, const B& b, std::string_view what,
                std::source_location where = std::source_location::current()) {
  if constexpr (kEnabled) {
    if (!(a <= b)) fail(what, detail::both(a, ">", b), where);
  }
}

}  // namespace axonml::distributed::check
