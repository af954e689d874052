// The one reader of AXON_* variables: strict, typed, and naming the variable
// and the value it rejects.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/world.hpp"
#include "axonml/distributed/shm_backend.hpp"
#include "base/env.hpp"
#include "shm/wait.hpp"

using namespace axonml::distributed;
using Catch::Matchers::Contains;

namespace {

// Sets a variable for one scope.
struct ScopedVariable {
  const char* name;
  ScopedVariable(const char* n, const char* value) : name(n) { ::setenv(name, value, 1); }
  ~ScopedVariable() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("an unset or empty variable reads as absent", "[env]") {
  ::unsetenv("AXON_TEST_VARIABLE");
  CHECK_FALSE(env::text("AXON_TEST_VARIABLE"));
  CHECK_FALSE(env::integer("AXON_TEST_VARIABLE", 0, 10));
  ScopedVariable empty("AXON_TEST_VARIABLE", "");
  CHECK_FALSE(env::timeout_seconds("AXON_TEST_VARIABLE"));
  CHECK_FALSE(env::flag("AXON_TEST_VARIABLE"));
}

TEST_CASE("integers outside the range or with leading blanks or trailing text are refused, naming both", "[env]") {
  {
    ScopedVariable v("AXON_TEST_VARIABLE", "42");
    CHECK(env::integer("AXON_TEST_VARIABLE", 0, 100) == 42);
  }
  for (const char* bad : {"12x", "101", "-1", "0x10", "99999999999999999999999", "  42", "\t42"}) {
    ScopedVariable v("AXON_TEST_VARIABLE", bad);
    CHECK_THROWS_WITH(env::integer("AXON_TEST_VARIABLE", 0, 100),
                      Contains(std::string("AXON_TEST_VARIABLE=") + bad) &&
                          Contains("a whole number in 0..100"));
  }
}

TEST_CASE("a timeout in seconds takes axon-launch's --timeout range, 0.01..1e+06, and names it when refused", "[env]") {
  for (const auto& [text, seconds] : {std::pair{"2.5", 2.5}, std::pair{"0.01", 0.01}, std::pair{"1e6", 1e6},
                                      std::pair{"1000000", 1e6}, std::pair{"300", 300.0}}) {
    ScopedVariable v("AXON_TEST_VARIABLE", text);
    CHECK(env::timeout_seconds("AXON_TEST_VARIABLE") == seconds);
  }
  CHECK(env::timeout_range_text() == "0.01..1e+06");
  for (const char* bad : {"abc", "1e-9", "0", "0.009", "0.001", "-3", "inf", "nan", "1000000.5", "31536000",
                          "2s", " 2.5", "0x10", "0X1p4"}) {
    ScopedVariable v("AXON_TEST_VARIABLE", bad);
    CHECK_THROWS_WITH(env::timeout_seconds("AXON_TEST_VARIABLE"),
                      Contains(std::string("AXON_TEST_VARIABLE=") + bad) &&
                          Contains("is not a number of seconds in 0.01..1e+06"));
  }
}

TEST_CASE("flags and choices accept only their spellings", "[env]") {
  {
    ScopedVariable v("AXON_TEST_VARIABLE", "1");
    CHECK(env::flag("AXON_TEST_VARIABLE") == true);
  }
  {
    ScopedVariable v("AXON_TEST_VARIABLE", "yes");
    CHECK_THROWS_WITH(env::flag("AXON_TEST_VARIABLE"), Contains("AXON_TEST_VARIABLE=yes is not 0 or 1"));
  }
  {
    ScopedVariable v("AXON_TEST_VARIABLE", "avx3");
    CHECK_THROWS_WITH(env::choice("AXON_TEST_VARIABLE", {"scalar", "avx2"}),
                      Contains("AXON_TEST_VARIABLE=avx3 is not one of: scalar, avx2"));
  }
}

TEST_CASE("a choice in any case returns the allowed spelling and refuses others", "[env]") {
  {
    ScopedVariable v("AXON_TEST_VARIABLE", "INFO");
    CHECK(env::choice_any_case("AXON_TEST_VARIABLE", {"debug", "info"}) == "info");
    CHECK_THROWS_WITH(env::choice("AXON_TEST_VARIABLE", {"debug", "info"}),
                      Contains("AXON_TEST_VARIABLE=INFO is not one of: debug, info"));
  }
  {
    ScopedVariable v("AXON_TEST_VARIABLE", "Verbose");
    CHECK_THROWS_WITH(env::choice_any_case("AXON_TEST_VARIABLE", {"debug", "info"}),
                      Contains("AXON_TEST_VARIABLE=Verbose is not one of: debug, info"));
  }
}

TEST_CASE("a garbage AXON_TIMEOUT is an error, not the default", "[env][timeout]") {
  ScopedVariable v("AXON_TIMEOUT", "soon");
  CHECK_THROWS_WITH(shm::default_timeout(), Contains("AXON_TIMEOUT=soon"));
}

TEST_CASE("AXON_TIMEOUT becomes the nearest millisecond, not a truncation", "[env][timeout]") {
  CHECK(env::timeout_milliseconds(1.005) == std::chrono::milliseconds(1005));
  CHECK(env::timeout_milliseconds(0.01) == std::chrono::milliseconds(10));
  CHECK(env::timeout_milliseconds(1e6) == std::chrono::milliseconds(1'000'000'000));
  ScopedVariable v("AXON_TIMEOUT", "1.005");
  CHECK(shm::default_timeout() == std::chrono::milliseconds(1005));
}

TEST_CASE("the shm backend reads the launcher's variables with the same strict reader", "[env][shm]") {
  ::unsetenv("WORLD_SIZE");
  CHECK_THROWS_WITH(ShmBackend::from_environment(),
                    Contains("WORLD_SIZE is not set (start the program with axon-launch)"));
  ScopedVariable world("WORLD_SIZE", "2");
  for (const char* bad : {"x", " 1", "2"}) {
    ScopedVariable rank("RANK", bad);
    CHECK_THROWS_WITH(ShmBackend::from_environment(),
                      Contains(std::string("RANK=") + bad + " is not a whole number in 0..1"));
  }
}

TEST_CASE("MPI's variables are refused when misspelt wherever the program runs, not only under mpirun", "[env]") {
  ScopedVariable node("AXON_NODE_ID", "x");
  CHECK_THROWS_WITH(World::init(), Contains("AXON_NODE_ID=x"));
  ::unsetenv("AXON_NODE_ID");
  ScopedVariable hierarchical("AXON_HIERARCHICAL", "maybe");
  CHECK_THROWS_WITH(World::init(), Contains("AXON_HIERARCHICAL=maybe"));
}
