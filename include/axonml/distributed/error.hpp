// Errors a user or a peer can cause.
//
// Every failure that comes from outside this library's own logic (a bad
// argument, a dead or hung peer, ranks that call different collectives) is
// thrown as a subclass of axonml::distributed::Error, whose what() names the
// op, the rank, the sizes and the limit that was broken. Bugs in the library
// itself are assertions, not exceptions.
//
// Thread safety: immutable after construction; safe to copy and rethrow
// across threads (the DDP communication thread does).
#pragma once

#include "axonml/distributed/cxx20.hpp"

#include <stdexcept>
#include <string>

namespace axonml::distributed {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An argument is wrong: a size, a rank, a shape, a group list.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// The run cannot go on: a peer died, the launcher vanished, the job was
// aborted, or a wait passed its deadline.
class PeerFailure : public Error {
 public:
  using Error::Error;
};

class Timeout : public PeerFailure {
 public:
  using PeerFailure::PeerFailure;
};

// Ranks of one group called different collectives (or the same one with
// different arguments) at the same point of their programs.
class CollectiveMismatch : public Error {
 public:
  using Error::Error;
};

}  // namespace axonml::distributed
