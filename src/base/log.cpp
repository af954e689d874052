#include "base/log.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace axonml::distributed::log {
namespace {

constexpr Level kDefaultLevel = Level::Warn;
constexpr std::string_view kPattern = "[%n] %H:%M:%S.%e %l: %v";
// Under `axon-launch --tag-output` (its default) the launcher already starts
// every line of this process with "[rank k] " and says so in AXON_TAG_OUTPUT.
constexpr std::string_view kTaggedPattern = "%H:%M:%S.%e %l: %v";

std::string_view env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

bool parse_level(std::string_view text, Level& out) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (Level l : {Level::Trace, Level::Debug, Level::Info, Level::Warn, Level::Error, Level::Off}) {
    if (lower == to_string(l)) {
      out = l;
      return true;
    }
  }
  return false;
}

// One spdlog logger per rank, all writing through one stderr sink: the logger
// name carries the "[rank k]" prefix, so a process hosting several ranks (the
// mock backend's threads) still labels each line with the rank it is about.
// The loggers accept everything; the threshold is ours, so that a disabled
// line costs one atomic load and never reaches spdlog. Lines about the rank
// whose output the launcher tags leave the prefix to the launcher.
class Logging {
 public:
  Logging() : sink_(std::make_shared<spdlog::sinks::stderr_sink_mt>()) { reload(); }

  Level threshold() const { return threshold_.load(std::memory_order_relaxed); }

  // A bad AXON_LOG_LEVEL is reported once per value, however often we reload.
  void reload() {
    std::lock_guard<std::mutex> lock(reload_mutex_);
    Level chosen = kDefaultLevel;
    const std::string_view text = env("AXON_LOG_LEVEL");
    const bool valid = text.empty() || parse_level(text, chosen);
    const std::string_view debug = env("AXON_DEBUG");
    if (!debug.empty() && debug != "0") chosen = std::min(chosen, Level::Debug);
    threshold_.store(chosen, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> loggers_lock(mutex_);
      tagged_rank_ = env("AXON_TAG_OUTPUT") == "1" ? process_rank() : -1;
      loggers_.clear();  // their patterns depend on tagged_rank_
    }
    if (valid) {
      reported_invalid_.clear();
    } else if (text != reported_invalid_) {
      reported_invalid_ = text;
      write(Level::Warn, process_rank(),
            "AXON_LOG_LEVEL=" + std::string(text) +
                " is not one of trace, debug, info, warn, error, off; using " +
                std::string(to_string(chosen)));
    }
  }

  void write(Level at, int rank, std::string_view message) {
    logger_for(rank)->log(to_spdlog(at), message);
  }

 private:
  static spdlog::level::level_enum to_spdlog(Level l) {
    switch (l) {
      case Level::Trace: return spdlog::level::trace;
      case Level::Debug: return spdlog::level::debug;
      case Level::Info: return spdlog::level::info;
      case Level::Warn: return spdlog::level::warn;
      case Level::Error: return spdlog::level::err;
      case Level::Off: return spdlog::level::off;
    }
    return spdlog::level::err;
  }

  std::shared_ptr<spdlog::logger> logger_for(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = loggers_[rank];
    if (!slot) {
      slot = std::make_shared<spdlog::logger>("rank " + std::to_string(rank), sink_);
      slot->set_pattern(std::string(rank == tagged_rank_ ? kTaggedPattern : kPattern));
      slot->set_level(spdlog::level::trace);
      slot->flush_on(spdlog::level::trace);
    }
    return slot;
  }

  std::atomic<Level> threshold_{kDefaultLevel};
  std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink_;
  std::mutex reload_mutex_;
  std::string reported_invalid_;
  std::mutex mutex_;  // guards tagged_rank_ and loggers_
  int tagged_rank_ = -1;
  std::map<int, std::shared_ptr<spdlog::logger>> loggers_;
};

Logging& logging() {
  static Logging instance;
  return instance;
}

}  // namespace

std::string_view to_string(Level level) {
  switch (level) {
    case Level::Trace: return "trace";
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warn";
    case Level::Error: return "error";
    case Level::Off: return "off";
  }
  return "unknown-level";
}

Level level() { return logging().threshold(); }

void reload_from_environment() { logging().reload(); }

int process_rank() {
  // RANK from axon-launch, else Open MPI's mpirun's own variable.
  std::string_view text = env("RANK");
  if (text.empty()) text = env("OMPI_COMM_WORLD_RANK");
  int rank = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
  if (ec != std::errc{} || end != text.data() + text.size() || rank < 0) return 0;
  return rank;
}

void write(Level at, int rank, std::string_view message) {
  if (!enabled(at)) return;
  logging().write(at, rank, message);
}

}  // namespace axonml::distributed::log
