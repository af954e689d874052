#include "base/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace axonml::distributed::check {

void fail(std::string_view what, const std::string& detail, std::source_location where) {
  std::fprintf(stderr, "axonml: check failed at %s:%u (%s): %.*s (%s)\n", where.file_name(),
               static_cast<unsigned>(where.line()), where.function_name(),
               static_cast<int>(what.size()), what.data(), detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace axonml::distributed::check
