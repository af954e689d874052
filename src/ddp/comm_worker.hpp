// CommWorker: one thread that runs communication jobs in submission order.
//
// Gradient buckets are reduced here while the owner's thread runs backward.
// The first job that throws stores its exception; later jobs are dropped
// (their collectives would only fail in turn or run out of step with peers)
// and drain() rethrows it. Waiting is on condition variables, never spinning.
//
// Thread safety: submit() and drain() from the owner thread only.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace axonml::distributed {

class CommWorker {
 public:
  CommWorker();
  // Drops queued jobs, waits for the running one, joins.
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  void submit(std::function<void()> job);
  // Waits until every submitted job has run or been dropped; rethrows the
  // first failure since the last drain().
  void drain();
  // The worker's thread, for Backend::hold_collectives_for().
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable work_ready_;  // owner -> worker: a job or stop
  std::condition_variable idle_;        // worker -> owner: queue empty, none running
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace axonml::distributed
