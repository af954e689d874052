# The optional parts (MPI, PyTorch) are AUTO|ON|OFF: AUTO follows what each
# configure finds, so a build folder configured before the packages were
# installed picks them up later (cmake/AxonFeature.cmake).
add_test(NAME "build options: AXON_WITH_TORCH/MPI=AUTO follows what each configure finds; OFF and ON stay as given"
         COMMAND ${CMAKE_COMMAND} -DAXON_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/build_options_probe -P ${CMAKE_CURRENT_SOURCE_DIR}/build_options/check_auto.cmake)

# What `make test` prints last after a failure (scripts/recap-failed-tests.sh).
add_test(NAME "make test's recap of failed tests names each one (by output, by regular expression, never run) with its reason and last lines"
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/recap_test.sh ${PROJECT_SOURCE_DIR})

# The build without MPI, which `make test` does not otherwise make: MPI is
# optional (built when found, -DAXON_WITH_MPI=OFF), and a change once broke
# that build (a function only the MPI build used, under -Werror). Only where
# this build has MPI (else it is that build), and only from a static,
# uninstrumented one (the ASan run need not build it again).
get_target_property(AXON_TEST_LIBRARY_TYPE axonml_distributed TYPE)
if(AXON_WITH_MPI AND AXON_TEST_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY" AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  set(name "build: without MPI the launcher and train build and run, and AXON_BACKEND=mpi says there is no MPI backend")
  add_test(NAME "${name}"
    COMMAND ${CMAKE_COMMAND}
      -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
      -DBUILD_DIR=${CMAKE_CURRENT_BINARY_DIR}/build_without_mpi
      -DCONFIG=$<CONFIG>
      -DGENERATOR=${CMAKE_GENERATOR}
      -DCXX=${CMAKE_CXX_COMPILER}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/support/build_without_mpi.cmake)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 1800 LABELS install)
endif()

# Compiled as C++17, the public headers said "'bit_cast' is not a member of
# 'std'"; they now say what they need, from every header that includes no
# other of ours (a review).
foreach(header axonml/distributed.hpp axonml/distributed/tensor.hpp axonml/distributed/error.hpp axonml/nn/threads.hpp)
  set(name "build: ${header} compiled as C++17 says it needs C++20")
  add_test(NAME "${name}"
    COMMAND sh -c "echo '#include \"${header}\"' | \"$0\" -std=c++17 -I\"$1\" -fsyntax-only -x c++ - 2>&1; echo \"exit status $?\""
            ${CMAKE_CXX_COMPILER} ${PROJECT_SOURCE_DIR}/include)
  set_tests_properties("${name}" PROPERTIES
    PASS_REGULAR_EXPRESSION "cxx20.hpp:[0-9]+:[0-9]+: error: #error \"axonml-distributed needs C\\+\\+20: compile with -std=c\\+\\+20.*exit status 1")
endforeach()
