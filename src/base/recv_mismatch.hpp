// The words every backend uses when a recv's buffer does not fit its
// message, so that a program fails the same way under axon-launch and
// mpirun.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed {

// "recv on rank 1 from rank 0 with tag 5: the message has 16 bytes of f32 but
// the buffer has 16 bytes of i32", or "... the message has 40 bytes but the
// buffer has 12" when only the sizes differ. `receiver` and `sender` are as
// messages name them ("rank 1").
inline std::string recv_mismatch_text(const std::string& receiver, const std::string& sender, int tag,
                                      std::size_t message_bytes, DataType message_type, std::size_t buffer_bytes,
                                      DataType buffer_type) {
  std::string text = "recv on " + receiver + " from " + sender + " with tag " + std::to_string(tag) +
                     ": the message has " + std::to_string(message_bytes) + " bytes";
  if (message_type != buffer_type) text += " of " + std::string(to_string(message_type));
  text += " but the buffer has " + std::to_string(buffer_bytes);
  if (message_type != buffer_type) return text + " bytes of " + std::string(to_string(buffer_type));
  return text;
}

}  // namespace axonml::distributed
