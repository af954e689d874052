// CommThread: the one thread that runs a process group's operations, in the
// order they were queued, and the Work each of them completes.
//
// An op's Work completes (its future with the output tensors, or with the
// exception the op threw) when its function returns. The destructor runs
// what is queued, then joins.
//
// run_here_if_idle() is the fast path for short ops: when nothing is queued
// or running, the caller runs the op itself, which saves the two cross-thread
// wake-ups (caller -> this thread -> the caller's wait()) that cost more
// than a small collective on a busy machine. Call order still holds: an op
// runs here only when every op pushed before it has finished, and no op
// pushed after it starts before it ends.
//
// Thread safety: push() and run_here_if_idle() from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace axonml::torch {

class AxonWork final : public c10d::Work {
 public:
  AxonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  // Called once, on the communication thread.
  void complete();
  void fail(std::exception_ptr error);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class CommThread {
 public:
  CommThread();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  void push(c10::intrusive_ptr<AxonWork> work, std::function<void()> run);

  // Runs `run` on the calling thread and completes `work` when no op is
  // queued or running, and returns true; otherwise returns false and does
  // nothing (the caller then push()es).
  bool run_here_if_idle(const c10::intrusive_ptr<AxonWork>& work, const std::function<void()>& run);

 private:
  struct Task {
    c10::intrusive_ptr<AxonWork> work;
    std::function<void()> run;
  };
  void loop();
  // Runs `run`, then completes or fails `work` with what it threw. Called
  // with `busy_` set by the caller, outside the mutex; clears `busy_` before
  // completing, so that a callback chained on the future may issue the
  // group's next op.
  void run_task(const c10::intrusive_ptr<AxonWork>& work, const std::function<void()>& run);

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // an op is running, on this thread or on a caller's
  std::thread thread_;
};

}  // namespace axonml::torch
