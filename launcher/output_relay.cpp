#include "output_relay.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace axon_launch {

// A thread that writes what its relays queue, in the order they queued it.
struct OutputRelay::Writer {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::pair<OutputRelay::State*, std::string>> queue;
  int progress_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // rung after every piece written
};

struct OutputRelay::State {
  int fd = -1;
  Writer* writer = nullptr;
  std::size_t queued_bytes = 0;  // under writer->mutex: queued and being written
  std::atomic<bool> gone{false};
  std::atomic<std::uint64_t> lost_bytes{0};  // pieces a write failed for (not gone)
  std::atomic<int> lost_errno{0};            // why the first of them was lost
};

namespace {

using Writer = OutputRelay::Writer;

void write_forever(Writer* w) {
  for (;;) {
    std::deque<std::pair<OutputRelay::State*, std::string>> batch;
    {
      std::unique_lock lock(w->mutex);
      w->wake.wait(lock, [&] { return !w->queue.empty(); });
      batch.swap(w->queue);
    }
    for (auto& [state, bytes] : batch) {
      // Gone only when nobody reads (EPIPE) or the terminal has hung up
      // (EIO): another failure (a full disk, a closed descriptor) loses that
      // piece, and is no reason to stop the ranks' output or the job's
      // restarts (found by a review: 2>/dev/full stopped --max-restarts).
      if (!state->gone.load() && !write_all(state->fd, bytes.data(), bytes.size())) {
        if (errno == EPIPE || errno == EIO) {
          state->gone.store(true);
        } else {
          int none = 0;
          state->lost_errno.compare_exchange_strong(none, errno);
          state->lost_bytes.fetch_add(bytes.size());
        }
      }
      {
        std::lock_guard lock(w->mutex);
        state->queued_bytes -= bytes.size();
      }
      // After every piece, not every batch: a slow reader takes seconds
      // for a batch of megabytes, and a flush bounded by a second without
      // progress would give it up (found by a review).
      const std::uint64_t one = 1;
      (void)!::write(w->progress_fd, &one, sizeof(one));
    }
  }
}

Writer* start_writer() {
  auto* w = new Writer;  // never destroyed: its thread may be blocked in a write when main() returns
  if (w->progress_fd < 0) throw std::runtime_error(std::string("cannot create an eventfd: ") + std::strerror(errno));
  std::thread(write_forever, w).detach();  // std::system_error when no thread can start
  return w;
}

// Whether fds a and b write to one file: one pipe or terminal (2>&1), or
// one file.
bool same_file(int a, int b) {
  struct stat sa {}, sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

struct Relays {
  OutputRelay* out;
  OutputRelay* err;
};

}  // namespace

OutputRelay::OutputRelay(int fd, Writer* writer) : state_(new State) {
  state_->fd = fd;
  state_->writer = writer;
}

// stdout and stderr that are one file share a writer: two would cut each
// other's lines apart there (a write of more than PIPE_BUF bytes to a pipe
// is not atomic), and the order things were queued in is the order of
// events. Otherwise each has its own, so that a reader that stops reading
// one (a paused `| less` on stdout) holds up nothing written to the other.
OutputRelay& OutputRelay::of(int fd) {
  static const Relays relays = [] {
    Writer* out = start_writer();
    Writer* err = same_file(STDOUT_FILENO, STDERR_FILENO) ? out : start_writer();
    return Relays{new OutputRelay(STDOUT_FILENO, out), new OutputRelay(STDERR_FILENO, err)};
  }();
  return fd == STDOUT_FILENO ? *relays.out : *relays.err;
}

void OutputRelay::start() { (void)of(STDOUT_FILENO); }

void OutputRelay::write(std::string bytes) {
  if (bytes.empty() || gone()) return;
  Writer* w = state_->writer;
  {
    std::lock_guard lock(w->mutex);
    state_->queued_bytes += bytes.size();
    w->queue.emplace_back(state_, std::move(bytes));
  }
  w->wake.notify_one();
}

bool OutputRelay::holds_more_than(std::size_t bytes) const {
  std::lock_guard lock(state_->writer->mutex);
  return state_->queued_bytes > bytes;
}

bool OutputRelay::gone() const { return state_->gone.load(); }

std::string OutputRelay::describe_losses() const {
  const std::uint64_t lost = state_->lost_bytes.load();
  if (lost == 0) return {};
  return std::to_string(lost) + " bytes of the job's output could not be written (" +
         std::strerror(state_->lost_errno.load()) + ")";
}

bool OutputRelay::empty() const {
  std::lock_guard lock(state_->writer->mutex);
  return state_->queued_bytes == 0;
}

int OutputRelay::progress_fd() const { return state_->writer->progress_fd; }

void OutputRelay::clear_progress() const {
  std::uint64_t count = 0;
  (void)!::read(state_->writer->progress_fd, &count, sizeof(count));
}

bool flush_relays(int signal_fd, const std::function<bool()>& interrupted,
                  std::optional<std::chrono::milliseconds> idle_limit) {
  OutputRelay* relays[] = {&OutputRelay::of(STDOUT_FILENO), &OutputRelay::of(STDERR_FILENO)};
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    bool empty = true;
    for (OutputRelay* relay : relays) empty = empty && relay->empty();
    if (empty) return true;
    int wait_ms = -1;
    if (idle_limit) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(last_progress + *idle_limit -
                                                                     std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      wait_ms = static_cast<int>(left.count());
    }
    pollfd fds[] = {{signal_fd, POLLIN, 0},
                    {relays[0]->progress_fd(), POLLIN, 0},
                    {relays[1]->progress_fd(), POLLIN, 0}};
    // A piece written between empty() and here has rung its eventfd
    // already, so the poll returns at once.
    if (::poll(fds, 3, wait_ms) < 0 && errno != EINTR) return false;
    if ((fds[0].revents & POLLIN) && interrupted()) return false;
    if ((fds[1].revents | fds[2].revents) & POLLIN) last_progress = std::chrono::steady_clock::now();
    for (OutputRelay* relay : relays) relay->clear_progress();
  }
}

void say(const std::string& line) { OutputRelay::of(STDERR_FILENO).write(line); }

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // A non-blocking output (the shell's, shared with us): wait for
        // room rather than lose the rest (found by a review).
        pollfd room{fd, POLLOUT, 0};
        if (::poll(&room, 1, -1) >= 0 || errno == EINTR) continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace axon_launch
