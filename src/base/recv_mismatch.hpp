// The words every backend uses when a recv's buffer does not fit its
// message, so that a program fails the same way under axon-launch and
// mpirun.
//
// Thread safety: pure functions and an immutable exception.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "axonml/distributed/dtype.hpp"
#include "axonml/distributed/error.hpp"

namespace axonml::distributed {

// What a recv found, in the words messages use ("rank 1").
struct RecvMismatchFacts {
  std::string receiver;
  std::string sender;
  int tag = 0;
  std::size_t message_bytes = 0;
  DataType message_type = DataType::F32;
  std::size_t buffer_bytes = 0;
  DataType buffer_type = DataType::F32;
};

// "recv on rank 1 from rank 0 with tag 5: the message has 16 bytes of f32 but
// the buffer has 16 bytes of i32", or "... the message has 40 bytes but the
// buffer has 12" when only the sizes differ. `where` (" in group [1, 2]")
// follows the tag.
inline std::string recv_mismatch_text(const RecvMismatchFacts& facts, const std::string& where = {}) {
  const bool types_differ = facts.message_type != facts.buffer_type;
  std::string text = "recv on " + facts.receiver + " from " + facts.sender + " with tag " + std::to_string(facts.tag) +
                     where + ": the message has " + std::to_string(facts.message_bytes) + " bytes";
  if (types_differ) text += " of " + std::string(to_string(facts.message_type));
  text += " but the buffer has " + std::to_string(facts.buffer_bytes);
  if (types_differ) return text + " bytes of " + std::string(to_string(facts.buffer_type));
  return text;
}

// The InvalidArgument of a recv whose buffer does not fit its message; its
// facts let a layer that knows the group say which one.
class RecvMismatch : public InvalidArgument {
 public:
  explicit RecvMismatch(RecvMismatchFacts facts, const std::string& where = {})
      : InvalidArgument(recv_mismatch_text(facts, where)), facts_(std::move(facts)) {}
  const RecvMismatchFacts& facts() const { return facts_; }

 private:
  RecvMismatchFacts facts_;
};

}  // namespace axonml::distributed
