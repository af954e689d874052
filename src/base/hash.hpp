// Fnv1a: the 64-bit FNV-1a hash, for the digests that ranks compare to tell
// whether they agree (group lists, parameter shapes). Not cryptographic; a
// collision only weakens an error check, never changes a result.
//
// Thread safety: a value type; one owner.
#pragma once

#include <cstdint>

namespace axonml::distributed {

class Fnv1a {
 public:
  // Mixes the eight bytes of `value`, least significant first.
  Fnv1a& add(std::uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash_ ^= (value >> (8 * byte)) & 0xff;
      hash_ *= 1099511628211ull;
    }
    return *this;
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 1469598103934665603ull;
};

}  // namespace axonml::distributed
