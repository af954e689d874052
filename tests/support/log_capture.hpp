// Test helpers for what the library logs: StderrCapture redirects fd 2 to a
// file while it lives, LogEnvironment sets AXON_LOG_LEVEL / AXON_DEBUG for
// one test and restores the quiet default after.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "base/log.hpp"

namespace axon_test {

namespace log = axonml::distributed::log;

// Sends fd 2 to a temporary file for its lifetime; text() stops and returns it.
class StderrCapture {
 public:
  StderrCapture() {
    char name[] = "/tmp/axon-test-log-XXXXXX";
    file_ = ::mkstemp(name);
    REQUIRE(file_ >= 0);
    path_ = name;
    std::fflush(stderr);
    saved_ = ::dup(2);
    REQUIRE(::dup2(file_, 2) == 2);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  ~StderrCapture() {
    stop();
    ::unlink(path_.c_str());
  }

  std::string text() {
    stop();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void stop() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    ::close(file_);
    saved_ = -1;
  }

  int file_ = -1;
  int saved_ = -1;
  std::string path_;
};

// Sets the logging variables for one test and restores a quiet default after.
class LogEnvironment {
 public:
  LogEnvironment(const char* level, const char* debug) {
    set("AXON_LOG_LEVEL", level);
    set("AXON_DEBUG", debug);
    log::reload_from_environment();
  }
  LogEnvironment(const LogEnvironment&) = delete;
  LogEnvironment& operator=(const LogEnvironment&) = delete;
  ~LogEnvironment() {
    ::unsetenv("AXON_LOG_LEVEL");
    ::unsetenv("AXON_DEBUG");
    log::reload_from_environment();
  }

 private:
  static void set(const char* name, const char* value) {
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
};

}  // namespace axon_test
