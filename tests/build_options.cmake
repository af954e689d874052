# Builds this project takes that `make test` does not otherwise build.
#
# Without MPI: MPI is optional (built when found, -DAXON_WITH_MPI=OFF), and
# a change once broke that build (a function only the MPI build used, under
# -Werror). Only where this build has MPI (else it is that build), and only
# from a static, uninstrumented one (the ASan run need not build it again).
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
