#include "ddp/comm_worker.hpp"

namespace axonml::distributed {

CommWorker::CommWorker() : thread_([this] { run(); }) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    jobs_.clear();
  }
  work_ready_.notify_one();
  thread_.join();
}

void CommWorker::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

void CommWorker::drain() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
  if (failure_) {
    auto failure = std::exchange(failure_, nullptr);
    std::rethrow_exception(failure);
  }
}

void CommWorker::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    if (failure_) {
      if (jobs_.empty()) idle_.notify_all();
      continue;
    }
    running_job_ = true;
    lock.unlock();
    std::exception_ptr failure;
    try {
      job();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    running_job_ = false;
    if (failure && !failure_) failure_ = failure;
    if (jobs_.empty()) idle_.notify_all();
  }
}

}  // namespace axonml::distributed
