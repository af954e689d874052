// ProcessWatch: whether another process of this machine has exited.
//
// A pidfd (Linux 5.3+) polls readable once its process has exited, zombie or
// not, and cannot be fooled by a pid the kernel has since given to another
// process. Where pidfd_open is missing, kill(pid, 0) stands in: it misses a
// zombie (a killed child its parent has not reaped) and a reused pid.
//
// Thread safety: exited() may be called from any number of threads.
#pragma once

#include <string>

namespace axonml::distributed {

class ProcessWatch {
 public:
  ProcessWatch() = default;  // watches nothing; exited() is false
  // Throws PeerFailure naming `who` ("rank 1") when the process has already
  // exited.
  ProcessWatch(int pid, const std::string& who);
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  bool exited() const;
  int pid() const { return pid_; }

 private:
  int pid_ = 0;
  int pidfd_ = -1;
};

}  // namespace axonml::distributed
