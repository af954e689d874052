#include "base/log.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"

namespace axonml::distributed::log {
namespace {

constexpr Level kDefaultLevel = Level::Warn;
constexpr std::string_view kPattern = "[%n] %H:%M:%S.%e %l: %v";
// Under `axon-launch --tag-output` (its default) the launcher already starts
// every line of this process with "[rank k] " and says so in AXON_TAG_OUTPUT.
constexpr std::string_view kTaggedPattern = "%H:%M:%S.%e %l: %v";

struct Settings {
  Level threshold = kDefaultLevel;
  bool tagged = false;  // AXON_TAG_OUTPUT=1
};

// The settings the environment asks for; a value env:: refuses throws
// InvalidArgument naming it.
Settings read_settings() {
  Settings settings;
  if (const auto name = env::choice_any_case("AXON_LOG_LEVEL",
                                             {"trace", "debug", "info", "warn", "error", "off"})) {
    for (Level l : {Level::Trace, Level::Debug, Level::Info, Level::Warn, Level::Error, Level::Off}) {
      if (*name == to_string(l)) settings.threshold = l;
    }
  }
  if (env::flag("AXON_DEBUG").value_or(false)) {
    settings.threshold = std::min(settings.threshold, Level::Debug);
  }
  settings.tagged = env::flag("AXON_TAG_OUTPUT").value_or(false);
  return settings;
}

// One spdlog logger per rank, all writing through one stderr sink: the logger
// name carries the "[rank k]" prefix, so a process hosting several ranks (the
// mock backend's threads) still labels each line with the rank it is about.
// The loggers accept everything; the threshold is ours, so that a disabled
// line costs one atomic load and never reaches spdlog. Lines about the rank
// whose output the launcher tags leave the prefix to the launcher.
class Logging {
 public:
  // The first line of a process may come from anywhere (a destructor, a
  // noexcept path), so a bad value is not thrown here: it is reported once
  // and the defaults apply. World::init() reloads, and throws there.
  Logging() : sink_(std::make_shared<spdlog::sinks::stderr_sink_mt>()) {
    try {
      apply(read_settings());
    } catch (const InvalidArgument& e) {
      Settings fallback;
      try {
        fallback.tagged = env::flag("AXON_TAG_OUTPUT").value_or(false);  // one prefix, the launcher's
      } catch (const InvalidArgument&) {
      }
      apply(fallback);
      write(Level::Warn, process_rank(),
            std::string(e.what()) +
                "; logging at warn until the set-up (World::init() or an axon process group), which refuses the value");
    }
  }

  Level threshold() const { return static_cast<Level>(detail::threshold.load(std::memory_order_relaxed)); }

  // Throws on a bad value, leaving the settings as they were.
  void reload() { apply(read_settings()); }

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

  void apply(const Settings& settings) {
    detail::threshold.store(static_cast<int>(settings.threshold), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex_);
    tagged_rank_ = settings.tagged ? process_rank() : -1;
    loggers_.clear();  // their patterns depend on tagged_rank_
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

  std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink_;
  std::mutex mutex_;  // guards tagged_rank_ and loggers_
  int tagged_rank_ = -1;
  std::map<int, std::shared_ptr<spdlog::logger>> loggers_;
};

// Never destroyed: destructors that run among the static destructors (a
// group or World held in a global) may still log. Its sink flushes every line.
Logging& logging() {
  static auto* instance = new Logging;
  return *instance;
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

Level detail::read_threshold() { return logging().threshold(); }

void reload_from_environment() { logging().reload(); }

int process_rank() {
  // RANK from axon-launch, else Open MPI's mpirun's own variable.
  // Only a label: a bad value names rank 0 rather than failing a log line.
  const std::string text =
      env::text("RANK").value_or(env::text("OMPI_COMM_WORLD_RANK").value_or(""));
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
