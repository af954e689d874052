// Logging: rank-aware lines on stderr, level from AXON_LOG_LEVEL, and
// AXON_DEBUG=1 naming every collective with its descriptor.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "support/log_capture.hpp"
#include "support/run_ranks.hpp"

namespace {

using namespace axonml::distributed;
namespace log = axonml::distributed::log;
using axon_test::LogEnvironment;
using axon_test::StderrCapture;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int count_matching(const std::vector<std::string>& lines, const std::string& pattern) {
  const std::regex re(pattern);
  int n = 0;
  for (const auto& line : lines) n += std::regex_match(line, re) ? 1 : 0;
  return n;
}

const std::string kStamp = R"(\d\d:\d\d:\d\d\.\d\d\d)";

void two_collectives(int ranks) {
  axon_test::run_ranks(ranks, [](std::shared_ptr<Backend> backend, int r) {
    World world(std::move(backend));
    Tensor t = Tensor::full({5}, static_cast<float>(r));
    all_reduce_sum(t, world.default_group());
    broadcast_from(t, 1, world.default_group());
  });
}

}  // namespace

TEST_CASE("AXON_DEBUG=1 logs each collective with its rank and descriptor", "[log]") {
  LogEnvironment env(nullptr, "1");
  CHECK(log::level() == log::Level::Debug);
  StderrCapture capture;
  two_collectives(2);
  const auto lines = lines_of(capture.text());
  INFO("captured:\n" << capture.text());
  for (int r = 0; r < 2; ++r) {
    const std::string prefix = R"(\[rank )" + std::to_string(r) + R"(\] )" + kStamp + " debug: ";
    CHECK(count_matching(lines, prefix + R"(all_reduce\(f32, 5, sum\) call #0 in group \[0, 1\])") ==
          1);
    CHECK(count_matching(lines, prefix + R"(broadcast\(f32, 5, root 1\) call #1 in group \[0, 1\])") ==
          1);
  }
}

TEST_CASE("by default collectives are not logged and the level is warn", "[log]") {
  LogEnvironment env(nullptr, nullptr);
  CHECK(log::level() == log::Level::Warn);
  StderrCapture capture;
  two_collectives(2);
  log::info(0, "not shown");
  log::warn(3, "arena {} is {} MiB", "axon-1", 64);
  const auto lines = lines_of(capture.text());
  INFO("captured:\n" << capture.text());
  REQUIRE(lines.size() == 1);
  CHECK(count_matching(lines, R"(\[rank 3\] )" + kStamp + " warning: arena axon-1 is 64 MiB") == 1);
}

TEST_CASE("AXON_LOG_LEVEL sets the threshold, in any case", "[log]") {
  const auto [name, expected] = GENERATE(table<const char*, log::Level>({
      {"trace", log::Level::Trace},
      {"debug", log::Level::Debug},
      {"INFO", log::Level::Info},
      {"warn", log::Level::Warn},
      {"Error", log::Level::Error},
      {"off", log::Level::Off},
  }));
  LogEnvironment env(name, nullptr);
  CHECK(log::level() == expected);
  StderrCapture capture;
  log::trace(0, "t");
  log::debug(0, "d");
  log::info(0, "i");
  log::warn(0, "w");
  log::error(0, "e");
  const auto lines = lines_of(capture.text());
  const int shown_levels = 5 - static_cast<int>(expected);
  CHECK(static_cast<int>(lines.size()) == shown_levels);
}

TEST_CASE("AXON_DEBUG=1 lowers a higher AXON_LOG_LEVEL to debug but keeps trace", "[log]") {
  {
    LogEnvironment env("error", "1");
    CHECK(log::level() == log::Level::Debug);
  }
  {
    LogEnvironment env("trace", "1");
    CHECK(log::level() == log::Level::Trace);
  }
  {
    LogEnvironment env("info", "0");
    CHECK(log::level() == log::Level::Info);
  }
}

TEST_CASE("an unknown AXON_LOG_LEVEL, or an AXON_DEBUG or AXON_TAG_OUTPUT not 0 or 1, is an error naming it",
          "[log][env]") {
  const auto [name, value, expected] = GENERATE(table<const char*, const char*, const char*>({
      {"AXON_LOG_LEVEL", "verbose",
       "AXON_LOG_LEVEL=verbose is not one of: trace, debug, info, warn, error, off"},
      {"AXON_DEBUG", "yes", "AXON_DEBUG=yes is not 0 or 1"},
      {"AXON_TAG_OUTPUT", "true", "AXON_TAG_OUTPUT=true is not 0 or 1"},
  }));
  LogEnvironment quiet("info", nullptr);
  ::setenv(name, value, 1);
  CHECK_THROWS_WITH(log::reload_from_environment(), Catch::Matchers::Contains(expected));
  CHECK(log::level() == log::Level::Info);  // a refused reload changes nothing
  // World::init() rereads them, so the typo stops the program at its start.
  CHECK_THROWS_WITH(World::init(), Catch::Matchers::Contains(expected));
  ::unsetenv(name);
}

TEST_CASE("lines without a rank of their own name the launcher's RANK", "[log]") {
  ::setenv("RANK", "6", 1);
  CHECK(log::process_rank() == 6);
  ::setenv("RANK", "six", 1);
  CHECK(log::process_rank() == 0);
  ::unsetenv("RANK");
  CHECK(log::process_rank() == 0);
}

TEST_CASE("under the launcher's tagged output a rank's own lines carry one prefix", "[log]") {
  ::setenv("RANK", "2", 1);
  ::setenv("AXON_TAG_OUTPUT", "1", 1);
  std::string text;
  {
    LogEnvironment env("info", nullptr);
    StderrCapture capture;
    log::info(2, "own line");
    log::info(5, "another rank's line");
    text = capture.text();
  }
  ::unsetenv("RANK");
  ::unsetenv("AXON_TAG_OUTPUT");
  log::reload_from_environment();
  const auto lines = lines_of(text);
  INFO("captured:\n" << text);
  REQUIRE(lines.size() == 2);
  CHECK(count_matching(lines, kStamp + " info: own line") == 1);
  CHECK(count_matching(lines, R"(\[rank 5\] )" + kStamp + " info: another rank's line") == 1);
}
