# cmake -P script behind the "install: a shared-library build's ..." test
# (tests/install_consumer.cmake): builds this source with BUILD_SHARED_LIBS=ON
# (the library, the PyTorch backend when this build has it, the launcher),
# then runs install_consumer.cmake against that build.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR SHARED_BUILD_DIR CONFIG)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer_shared.cmake: -D${var}=... is required")
  endif()
endforeach()

set(configure_args -S ${SOURCE_DIR} -B ${SHARED_BUILD_DIR} -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX} -DBUILD_SHARED_LIBS=ON
  -DAXON_BUILD_TESTS=OFF -DAXON_BUILD_BENCHMARKS=OFF -DAXON_BUILD_EXAMPLES=OFF)
# Where this build found its packages (a libtorch outside the default path).
if(NOT "${FOUND_PREFIX_PATH}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${FOUND_PREFIX_PATH}")
endif()
if(NOT "${FOUND_TORCH_DIR}" STREQUAL "" AND NOT "${FOUND_TORCH_DIR}" MATCHES "NOTFOUND$")
  list(APPEND configure_args "-DTorch_DIR=${FOUND_TORCH_DIR}")
endif()
if("${TORCH_PYTHON}" STREQUAL "")
  list(APPEND configure_args -DAXON_WITH_TORCH=OFF)
else()
  list(APPEND configure_args -DAXON_WITH_TORCH=ON -DAXON_TORCH_PYTHON=${TORCH_PYTHON})
endif()

include(${CMAKE_CURRENT_LIST_DIR}/step.cmake)
step("configure the shared-library build" ${CMAKE_COMMAND} ${configure_args})
# One job: this runs beside the other tests, which must keep their cores.
step("the shared-library build" ${CMAKE_COMMAND} --build ${SHARED_BUILD_DIR} --config ${CONFIG} -j 1)

set(BUILD_DIR ${SHARED_BUILD_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/install_consumer.cmake)
