// The language every public header needs: C++20 (std::span, std::bit_cast,
// designated initializers, concepts). Compiled as C++17, the first error was
// "'bit_cast' is not a member of 'std'" deep in a header, which did not say
// what was missing (a review). Each header that includes no other of ours
// includes this one first.
#pragma once

#if __cplusplus < 202002L
#error "axonml-distributed needs C++20: compile with -std=c++20 (a CMake target that links axonml::distributed gets it)"
#endif
