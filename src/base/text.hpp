// Small pieces of text that error messages share, so that every message
// spells a list or a size the same way.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>

namespace axonml::distributed {

// "0, 2, 5" for any range of integers (a list inside a sentence).
template <class Range>
std::string joined(const Range& values) {
  std::string s;
  for (const auto& v : values) {
    if (!s.empty()) s += ", ";
    s += std::to_string(v);
  }
  return s;
}

// "[0, 2, 5]" for any range of integers.
template <class Range>
std::string bracketed(const Range& values) {
  std::string s = "[";  // not "[" + joined(...): GCC 12 warns falsely (-Wrestrict) on that
  s += joined(values);
  s += ']';
  return s;
}

// Whole MiB, rounded up: "3 MiB".
inline std::string mib(std::size_t bytes) {
  return std::to_string((bytes + (std::size_t{1} << 20) - 1) >> 20) + " MiB";
}

}  // namespace axonml::distributed
