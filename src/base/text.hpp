// Small pieces of text that error messages share, so that every message
// spells a list or a size the same way.
//
// Thread safety: pure functions.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <ranges>
#include <string>
#include <string_view>
#include <vector>

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

// "0, 2, 5" for ranks; in a list of more than kRanksListedOneByOne, every
// run of three or more consecutive ranks as "first-last" ("0-255",
// "0-99, 101-255"): a group of 1024 ranks takes a few characters, not 6 000.
// An abort's reason keeps about 1 000, and at 256 ranks the group's list
// pushed out of it the rank a timeout waited for, which came after (a
// review). Shorter lists stay one by one, as every message printed them.
inline constexpr std::size_t kRanksListedOneByOne = 16;
template <class Range>
std::string joined_ranks(const Range& values) {
  if (static_cast<std::size_t>(std::ranges::distance(values)) <= kRanksListedOneByOne) return joined(values);
  std::string s;
  for (auto it = std::ranges::begin(values); it != std::ranges::end(values);) {
    const auto first = *it;
    auto last = first;
    auto next = std::next(it);
    for (; next != std::ranges::end(values) && *next - 1 == last; ++next) last = *next;  // not last + 1: INT_MAX
    if (!s.empty()) s += ", ";
    const bool run = last - first >= 2;  // three or more
    s += run ? std::to_string(first) + "-" + std::to_string(last) : std::to_string(first);
    it = run ? next : std::next(it);
  }
  return s;
}

// "[0, 2, 5]", or "[0-255]": joined_ranks in brackets.
template <class Range>
std::string bracketed_ranks(const Range& values) {
  std::string s = "[";
  s += joined_ranks(values);
  s += ']';
  return s;
}

// The ranks joined_ranks wrote at the start of `list` ("1, 3", "0-255, 300"),
// which is left just after them. A reason may hold any text (abort()'s),
// so reading stops at the first thing that is not a rank below `limit` or a
// run of them (first <= last < limit): "9-2" or "0-99999" end the list.
inline std::vector<int> read_ranks(std::string_view& list, int limit) {
  std::vector<int> ranks;
  auto number = [&](std::string_view& from, int& value) {
    const auto [end, error] = std::from_chars(from.data(), from.data() + from.size(), value);
    if (error != std::errc() || value < 0 || value >= limit) return false;
    from.remove_prefix(static_cast<std::size_t>(end - from.data()));
    return true;
  };
  for (;;) {
    std::string_view rest = list;
    int first = -1;
    if (!number(rest, first)) break;
    int last = first;
    if (rest.size() > 1 && rest[0] == '-' && rest[1] >= '0' && rest[1] <= '9') {
      rest.remove_prefix(1);
      if (!number(rest, last) || last < first) break;
    }
    for (int r = first; r <= last; ++r) ranks.push_back(r);
    list = rest;
    if (!list.starts_with(", ")) break;
    list.remove_prefix(2);
  }
  return ranks;
}

// The shortest text that reads back as the same double ("0.3", "123456.789",
// "1e+06", "inf"): a value echoed in a message or handed on in a variable
// keeps every digit, where %g keeps six.
inline std::string shortest_text(double value) {
  char text[64];
  *std::to_chars(text, text + sizeof(text) - 1, value).ptr = '\0';
  return text;
}

// A duration in seconds for a message: one decimal when that is exact
// ("3.0", "0.3"), else every digit needed ("0.05", "1.005").
inline std::string format_seconds(double seconds) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  if (std::strtod(text, nullptr) == seconds) return text;
  return shortest_text(seconds);
}

// A size for people: "512 bytes", "12 KiB", "3.5 MiB" (one decimal, to the
// nearest, when not whole). A minimum the user must raise a whole-MiB option
// to is rounded up by the caller first, so "at least 3 MiB" is never low.
inline std::string format_bytes(std::size_t bytes) {
  if (bytes < 10 * 1024) return std::to_string(bytes) + " bytes";
  const bool mib = bytes >= (std::size_t{1} << 20);
  const std::size_t unit = mib ? std::size_t{1} << 20 : std::size_t{1} << 10;
  const char* name = mib ? " MiB" : " KiB";
  if (bytes % unit == 0) return std::to_string(bytes / unit) + name;
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / static_cast<double>(unit));
  return text + std::string(name);
}

// format_bytes, and the exact count too where it rounds: for a request that
// is refused while a free block of the rounded size exists ("a group area of
// 2.0 MiB (2101248 bytes)" beside "the largest free block 2 MiB").
inline std::string format_bytes_exactly(std::size_t bytes) {
  const std::string rounded = format_bytes(bytes);
  if (rounded.find('.') == std::string::npos) return rounded;
  return rounded + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace axonml::distributed
