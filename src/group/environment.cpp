#include "group/environment.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/mock_backend.hpp"
#include "axonml/distributed/shm_backend.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "kernels/reduce.hpp"
#ifdef AXON_HAVE_MPI
#include "axonml/distributed/mpi_backend.hpp"
#endif

namespace axonml::distributed {
namespace {

bool is_set(const char* name) { return env::text(name).has_value(); }

// A variable another launcher sets (mpirun's OMPI_COMM_WORLD_SIZE): its
// number, or nothing when it holds none.
std::optional<long long> lenient_count(const char* name) {
  const auto text = env::text(name);
  if (!text) return std::nullopt;
  long long value = 0;
  const char* end = text->data() + text->size();
  const auto [at, error] = std::from_chars(text->data(), end, value);
  if (error != std::errc() || at != end) return std::nullopt;
  return value;
}

// mpirun (Open MPI, or a PMI launcher such as MPICH's hydra or Slurm's) left
// its variables: this process is one rank of an MPI job.
bool started_by_mpirun() {
  return is_set("OMPI_COMM_WORLD_SIZE") || is_set("PMI_SIZE") || is_set("PMIX_RANK");
}

#ifdef AXON_HAVE_MPI
// A process that no MPI launcher started initializes as a world of one of
// its own (an MPI "singleton"). Under axon-launch with AXON_BACKEND=mpi every
// rank would do that and quietly train alone; the launcher's WORLD_SIZE says
// how many it started.
// `sees`: MPI was initialized and said so, or not asked (it would say so).
[[noreturn]] void refuse_singletons_of_a_larger_job(long long launched, const char* sees) {
  const std::string n = std::to_string(launched);
  const std::string by = is_set("AXON_ARENA_FD") ? "axon-launch" : "the launcher";
  throw InvalidArgument("AXON_BACKEND=mpi, but MPI " + std::string(sees) + " a world of 1 while WORLD_SIZE=" + n +
                        " (set by " + by +
                        "): processes that mpirun did not start do not find each other over MPI, so each rank "
                        "would run alone. Use the MPI backend under mpirun (mpirun -np " + n +
                        " PROGRAM), or leave AXON_BACKEND unset (or shm) under axon-launch");
}
#endif

std::shared_ptr<Backend> mpi_backend() {
#ifdef AXON_HAVE_MPI
  // Started by axon-launch and by no MPI launcher: MPI can only be a world
  // of one, so refuse before initializing it. Open MPI 4.1's singletons
  // start and tear down a runtime of their own, and one in about 60 of them
  // dies of SIGSEGV as it exits when several start at once (a plain
  // MPI_Init + MPI_Finalize does too, 1 of 80 runs): the refusal came with
  // a crash report (a review). WORLD_SIZE is read only where it decides:
  // under mpirun a stray value of it must not stop the job (a review of the
  // change: mpirun -x WORLD_SIZE=0 was refused).
  if (is_set("AXON_ARENA_FD") && !started_by_mpirun()) {
    const auto launched = env::integer("WORLD_SIZE", 1, 1 << 30);
    if (launched && *launched > 1) refuse_singletons_of_a_larger_job(*launched, "would see");
  }
  std::shared_ptr<Backend> backend = MpiBackend::from_environment();
  if (backend->world_size() == 1) {
    const auto launched = env::integer("WORLD_SIZE", 1, 1 << 30);
    if (launched && *launched > 1) refuse_singletons_of_a_larger_job(*launched, "sees");
    // A launcher of another MPI (MPICH's mpiexec sets PMI_SIZE) starts
    // processes that this build's MPI takes for singletons: each ran alone,
    // in silence (a review).
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
      const auto started = lenient_count(name);
      if (started && *started > 1) {
        throw InvalidArgument(std::string("MPI sees a world of 1 while ") + name + "=" + std::to_string(*started) +
                              " says the launcher started that many ranks: this build's MPI does not know that "
                              "launcher, so each rank would run alone. Start the program with the mpirun of the "
                              "MPI it was built with (Open MPI), or with axon-launch -n " + std::to_string(*started));
      }
    }
  }
  return backend;
#else
  throw InvalidArgument(
      "AXON_BACKEND=mpi (or a start under mpirun), but this build of axonml_distributed has no "
      "MPI backend: rebuild with MPI installed (-DAXON_WITH_MPI=ON)");
#endif
}

// The rank the launcher gave this process in its environment (axon-launch's
// RANK, mpirun's), or -1: for messages only, before the backend knows it.
int rank_from_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"}) {
    const auto text = env::text(name);
    if (!text) continue;
    try {
      return std::stoi(*text);
    } catch (const std::exception&) {
    }
  }
  return -1;
}

std::shared_ptr<Backend> backend_from_environment_unnamed() {
  // The logging variables were read leniently by the first log line (which
  // may not throw); a typo in them stops the program here, at its start.
  log::reload_from_environment();
  // Likewise AXON_KERNEL, read at the first reduction, which would report a
  // typo only from inside a collective, with the peers in it too.
  kernels::selected_isa();
  // And MpiBackend's own variables, read only under mpirun: a typo there is
  // refused wherever the program runs, not first when the job moves to MPI
  // (found by a review: AXON_NODE_ID=x passed alone and under axon-launch).
  (void)env::flag("AXON_HIERARCHICAL");
  (void)env::integer("AXON_NODE_ID", 0, 1'000'000'000);
  const std::string backend = env::choice("AXON_BACKEND", {"shm", "mpi", "mock"}).value_or("");
  if (backend == "shm") return ShmBackend::from_environment();
  if (backend == "mpi") return mpi_backend();
  if (backend == "mock") {
    // A world of one: under a launcher that started several ranks, each
    // would train alone and quietly. mpirun says how many in its own
    // variables, not WORLD_SIZE (found by a review: under mpirun each rank
    // ran alone).
    // mpirun's variables are read leniently: a value this library would
    // refuse is not one a launcher of ranks set.
    for (const auto& [name, launched] : {std::pair{"WORLD_SIZE", env::integer("WORLD_SIZE", 1, 1 << 30)},
                                         std::pair{"OMPI_COMM_WORLD_SIZE", lenient_count("OMPI_COMM_WORLD_SIZE")},
                                         std::pair{"PMI_SIZE", lenient_count("PMI_SIZE")}}) {
      if (launched && *launched > 1) {
        throw InvalidArgument("AXON_BACKEND=mock gives each process a world of its own, but " + std::string(name) +
                              "=" + std::to_string(*launched) +
                              " says a launcher started that many ranks: each would run alone. Leave "
                              "AXON_BACKEND unset (or shm) under axon-launch, mpi under mpirun");
      }
    }
    return MockBackend::single();
  }
  // Under axon-launch the arena's descriptor is set; under mpirun, MPI's variables;
  // run alone, a world of one.
  if (is_set("AXON_ARENA_FD")) return ShmBackend::from_environment();
  if (started_by_mpirun()) return mpi_backend();
  // Alone, unless a launcher other than these two (torchrun, a SLURM
  // script) started several processes: each would train alone and quietly
  // (found by a review).
  const auto launched = env::integer("WORLD_SIZE", 1, 1 << 30);
  if (launched && *launched > 1) {
    throw InvalidArgument("WORLD_SIZE=" + std::to_string(*launched) +
                          " says a launcher started that many ranks, but this process has neither axon-launch's "
                          "arena (AXON_ARENA_FD) nor MPI's variables: World::init() would give each a world of "
                          "its own. Start the program with axon-launch -n N (or mpirun), or unset WORLD_SIZE to "
                          "run it alone");
  }
  return MockBackend::single();
}

}  // namespace

// Why: a malformed AXON_* variable ("AXON_TIMEOUT=0 is not ...") was
// reported without the rank, though every error names it; with several
// ranks' output interleaved, the reader could not tell whose it was.
//
// The rank is read before the backend starts: MPI started as a singleton
// (AXON_BACKEND=mpi under axon-launch) sets OMPI_COMM_WORLD_RANK=0 in every
// rank, and rank 1's refusal then said "rank 0: ..." (found by a review).
std::shared_ptr<Backend> backend_from_environment() {
  const int rank = rank_from_launcher();
  try {
    return backend_from_environment_unnamed();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    if (rank < 0 || what.rfind("rank ", 0) == 0) throw;
    throw InvalidArgument("rank " + std::to_string(rank) + ": " + what);
  }
}

}  // namespace axonml::distributed
