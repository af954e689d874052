// memcpy that accepts the null pointers empty spans may carry.
#pragma once

#include <cstddef>
#include <cstring>

namespace axonml::distributed::collectives {

inline void copy_bytes(void* dest, const void* src, std::size_t bytes) {
  if (bytes != 0) std::memcpy(dest, src, bytes);
}

}  // namespace axonml::distributed::collectives
