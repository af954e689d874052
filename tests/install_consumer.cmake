# The installed package works for someone else's project: install this build
# into a temporary prefix, build examples/consumer against it with CMake
# (find_package) and with pkg-config, and run both, under axon-launch -n 2
# when this build has the launcher. With the PyTorch backend, also: the
# installed Python package imports and runs with PYTHONPATH naming only the
# installed tree, and find_package(... COMPONENTS torch) gives axonml::torch.
include(GNUInstallDirs)
find_program(AXON_PKG_CONFIG pkg-config REQUIRED)

if(TARGET axon-launch)
  set(AXON_CONSUMER_RANKS 2)
else()
  set(AXON_CONSUMER_RANKS 1)
endif()

add_test(NAME "install: examples/consumer builds and runs against the installed package"
  COMMAND ${CMAKE_COMMAND}
    -DBUILD_DIR=${PROJECT_BINARY_DIR}
    -DCONFIG=$<CONFIG>
    -DCONSUMER_SOURCE=${PROJECT_SOURCE_DIR}/examples/consumer
    -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_consumer
    -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
    -DBINDIR=${CMAKE_INSTALL_BINDIR}
    -DGENERATOR=${CMAKE_GENERATOR}
    -DCXX=${CMAKE_CXX_COMPILER}
    "-DCXX_FLAGS=${CMAKE_CXX_FLAGS}"
    "-DLINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}"
    -DPKG_CONFIG=${AXON_PKG_CONFIG}
    -DRANKS=${AXON_CONSUMER_RANKS}
    -DWITH_MPI=${AXON_WITH_MPI}
    -DTORCH_PYTHON=$<$<BOOL:${AXON_WITH_TORCH}>:${AXON_TORCH_PYTHON}>
    -DPYTHON_DIR=$<$<BOOL:${AXON_WITH_TORCH}>:${AXON_PYTHON_INSTALL_DIR}>
    -P ${CMAKE_CURRENT_SOURCE_DIR}/support/install_consumer.cmake)
set_tests_properties("install: examples/consumer builds and runs against the installed package"
  PROPERTIES TIMEOUT 600 LABELS install)

# The same with shared libraries (-DBUILD_SHARED_LIBS=ON, which the README
# offers): a second, smaller build of this source (no tests, benchmarks or
# examples), installed and used the same three ways. Each installed library
# and module must find the others wherever the prefix is (a review found the
# installed Python package of a shared build unable to load libaxonml_torch's
# own dependency). Only from a static, uninstrumented build: a shared build
# is already checked by the test above, and a sanitizer's runtime cannot be
# loaded into python3.
get_target_property(AXON_TEST_LIBRARY_TYPE axonml_distributed TYPE)
if(AXON_TEST_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY" AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  add_test(NAME "install: a shared-library build's installed CMake package, pkg-config file and Python package find their libraries"
    COMMAND ${CMAKE_COMMAND}
      -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
      -DSHARED_BUILD_DIR=${CMAKE_CURRENT_BINARY_DIR}/shared_build
      "-DFOUND_PREFIX_PATH=${CMAKE_PREFIX_PATH}"
      -DFOUND_TORCH_DIR=${Torch_DIR}
      -DCONFIG=$<CONFIG>
      -DCONSUMER_SOURCE=${PROJECT_SOURCE_DIR}/examples/consumer
      -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_consumer_shared
      -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
      -DBINDIR=${CMAKE_INSTALL_BINDIR}
      -DGENERATOR=${CMAKE_GENERATOR}
      -DCXX=${CMAKE_CXX_COMPILER}
      -DPKG_CONFIG=${AXON_PKG_CONFIG}
      -DRANKS=${AXON_CONSUMER_RANKS}
      -DTORCH_PYTHON=$<$<BOOL:${AXON_WITH_TORCH}>:${AXON_TORCH_PYTHON}>
      -DPYTHON_DIR=$<$<BOOL:${AXON_WITH_TORCH}>:${AXON_PYTHON_INSTALL_DIR}>
      -P ${CMAKE_CURRENT_SOURCE_DIR}/support/install_consumer_shared.cmake)
  set_tests_properties("install: a shared-library build's installed CMake package, pkg-config file and Python package find their libraries"
    PROPERTIES TIMEOUT 1800 LABELS install)
endif()
