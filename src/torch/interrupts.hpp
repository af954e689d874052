// Letting Python's signal handlers end a long wait (Ctrl-C in a collective).
//
// CPython runs a signal's handler (SIGINT's raises KeyboardInterrupt) only
// between bytecodes, on the main thread. A main thread waiting in C++ with
// the GIL released, for a peer in an op or in a group's set-up, ran it only
// once the wait ended: with Ctrl-C to axon-launch, when a peer exited on its
// own KeyboardInterrupt and the wait failed naming it. The handler then ran
// while CPython printed that error, and each waiting rank printed a bare
// object dump and "lost sys.stderr" instead of a traceback. So the long
// waits of the main thread run the handlers now and then themselves, and
// what one raises ends the wait.
//
// libaxonml_torch does not link Python: the Python module installs the
// check when imported; a C++ program has none, and its waits are as before.
//
// Only waits that Python called directly, through this module's bindings
// (an op's Work.wait(), a group's set-up), run the check: they mark their
// thread with InterruptibleWaits. A wait libtorch makes from C++ (DDP's
// reducer waits for its bucket broadcast under its own mutex) does not: an
// exception thrown through it left DDP's collectives out of step, and the
// GIL taken under its lock would invert that lock's order (a review).
//
// Thread safety: install_interrupt_check() once, before any group exists;
// check_interrupts() from any thread (it does nothing outside an
// InterruptibleWaits scope, off Python's main thread, or where that thread
// holds the GIL).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <string_view>

#include "axonml/distributed/error.hpp"

namespace axonml::torch {

// Throws what a signal handler raised; returns when none is pending.
using InterruptCheck = void (*)();

void install_interrupt_check(InterruptCheck check);

// Marks the waits of this thread, while it lives, as Python's own (or,
// with false, as not: the ops and callbacks a wait runs on its own thread,
// which may be libtorch's).
class InterruptibleWaits {
 public:
  explicit InterruptibleWaits(bool interruptible = true);
  ~InterruptibleWaits();
  InterruptibleWaits(const InterruptibleWaits&) = delete;
  InterruptibleWaits& operator=(const InterruptibleWaits&) = delete;

 private:
  bool saved_;
};

// Runs the installed check, if any, inside an InterruptibleWaits scope. Its
// exception is Python's, to be handed back to Python as it is (the op's
// wait() raises it).
void check_interrupts();

// How many ops a check's exception interrupted the wait of and are still
// running: the program's end aborts their groups rather than wait for them
// (ProcessGroupAxon::program_ends).
void note_interrupted_op_pending();
void note_interrupted_op_ended();
bool interrupted_ops_pending();

// How often a long wait runs the check: a wait that ends sooner never does.
inline constexpr std::chrono::milliseconds kInterruptCheckPeriod{20};

// What a group's set-up throws when a signal handler raised while it waited
// for its peers: an Error whose message the peers are given as the reason
// this rank left, carrying the handler's own exception, which the Python
// module raises in its place.
class Interrupted : public distributed::Error {
 public:
  Interrupted(const std::string& message, std::exception_ptr raised)
      : distributed::Error(message), raised_(std::move(raised)) {}
  std::exception_ptr raised() const { return raised_; }

 private:
  std::exception_ptr raised_;
};

// The words after `who` in Interrupted's message, for readers that look
// for them (ProcessGroupAxon::member_gone_in).
inline constexpr std::string_view kInterruptedWords = " interrupted (a Python signal handler raised";

// check_interrupts(), with what it throws wrapped in Interrupted: "`who()`
// interrupted (...) while it `waiting()`", who being e.g. "rank 3:". The
// texts are made only then: a set-up polls this every few milliseconds.
void check_interrupts_while(const std::function<std::string()>& who, const std::function<std::string()>& waiting);

}  // namespace axonml::torch
