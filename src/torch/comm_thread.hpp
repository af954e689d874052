// CommThread: the one thread that runs a process group's operations, in the
// order they were queued, and the Work each of them completes.
//
// An op's Work completes (its future with the output tensors, or with the
// exception the op threw) when its function returns. The destructor runs
// what is queued, then joins.
//
// Thread safety: push() from any thread.
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

 private:
  struct Task {
    c10::intrusive_ptr<AxonWork> work;
    std::function<void()> run;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace axonml::torch
