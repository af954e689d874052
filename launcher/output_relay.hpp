// OutputRelay: the launcher's stdout or stderr, written by a thread of the
// launcher's own (one for both when they are one file, as with 2>&1).
//
// Everything the launcher writes while it runs a job, the ranks' tagged
// lines and its own messages, goes through the relay of its target. A reader
// that stops reading (a paused `| less`, Ctrl-S on a terminal, a full pipe)
// then stalls only that thread: the supervisor still reaps ranks, publishes
// their ends, aborts, forwards signals and kills (it blocked in write() and
// did none of that; found by a review). Bytes wait in the relay's queue; past
// kHighWater the supervisor stops reading the ranks' pipes into it, so the
// ranks block in their own writes, as they would writing to that output
// themselves, and the launcher's memory stays bounded. The order of what is
// queued is kept, so rank lines and the launcher's messages interleave as
// they were queued.
//
// Once a write fails with EPIPE (nobody reads any more) or EIO (the
// terminal has hung up), the relay is
// gone(): what is queued and what comes after is dropped, and the ranks'
// streams into it close, so that a rank writing there gets SIGPIPE
// (OutputStream). Another failure (a full disk, a file at ulimit -f) loses that piece only; a
// non-blocking output's EAGAIN waits for room.
//
// Thread safety: every member from any thread, and flush_relays(); the
// relays live until the process exits (their threads may be blocked in a
// write when it does).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace axon_launch {

class OutputRelay {
 public:
  // Queued bytes past which the supervisor stops reading ranks' output into
  // the relay (see above).
  static constexpr std::size_t kHighWater = 4 << 20;

  // The relay of STDOUT_FILENO or STDERR_FILENO, made on first use.
  static OutputRelay& of(int fd);
  // Makes both relays and their threads now; throws std::runtime_error or
  // std::system_error when it cannot (of() then never throws).
  static void start();

  // Queues `bytes` for writing; never blocks.
  void write(std::string bytes);
  // More than `bytes` wait to be written (the supervisor stops reading
  // ranks' output into the relay past kHighWater).
  bool holds_more_than(std::size_t bytes) const;
  // A write found nobody reading (EPIPE) or the terminal hung up (EIO).
  bool gone() const;
  // "N bytes of the job's output could not be written (File too large)" for
  // the pieces another failure lost; empty when none was.
  std::string describe_losses() const;
  // Readable (an eventfd, the same for relays that share a writer) whenever
  // the relay's writer has written a piece: poll it to learn that the relay
  // may hold less now, or that a flush may be done. Reading it
  // (clear_progress()) rearms it.
  int progress_fd() const;
  void clear_progress() const;
  // Nothing waits (everything queued is written, or the relay is gone).
  bool empty() const;

  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // output_relay.cpp's: a relay's queue and flags, and the thread that
  // writes for it.
  struct State;
  struct Writer;

 private:
  OutputRelay(int fd, Writer* writer);

  State* state_;  // never freed: the writer may outlive main()
};

// Waits until every relay is empty (true), or until `interrupted()`, asked
// whenever `signal_fd` is readable, says to stop, or nothing has been
// written for `idle_limit` (false).
bool flush_relays(int signal_fd, const std::function<bool()>& interrupted,
                  std::optional<std::chrono::milliseconds> idle_limit = std::nullopt);

// A line of the launcher's own, "axon-launch: ...\n", queued on stderr's relay.
void say(const std::string& line);

// Writes all of `data` to `fd`, blocking; false when a write failed for good
// (EPIPE, or another error). The relays' threads use it, and a forked
// child's last words before exec, which has no relay threads.
bool write_all(int fd, const char* data, std::size_t size);

}  // namespace axon_launch
