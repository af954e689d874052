# cmake -P script behind the "build: without MPI ..." test (tests/build_options.cmake):
# configures this source with -DAXON_WITH_MPI=OFF (and no PyTorch backend),
# builds the launcher and the train example, and runs them: MPI is optional
# ("built when found"), and a change once broke that build with a function
# only the MPI build uses (-Werror=unused-function).
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR BUILD_DIR CONFIG GENERATOR CXX)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "build_without_mpi.cmake: -D${var}=... is required")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/step.cmake)

step("configure without MPI" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX} -DAXON_WITH_MPI=OFF -DAXON_WITH_TORCH=OFF
  -DAXON_BUILD_TESTS=OFF -DAXON_BUILD_BENCHMARKS=OFF -DAXON_BUILD_EXAMPLES=ON)
# One job: this runs beside the other tests, which must keep their cores.
step("the build without MPI" ${CMAKE_COMMAND} --build ${BUILD_DIR} --config ${CONFIG} -j 1 --target axon-launch train)

file(GLOB_RECURSE launcher LIST_DIRECTORIES false "${BUILD_DIR}/launcher/axon-launch")
file(GLOB_RECURSE train LIST_DIRECTORIES false "${BUILD_DIR}/examples/train")
if(NOT launcher OR NOT train)
  message(FATAL_ERROR "the build without MPI made no axon-launch or train under ${BUILD_DIR}")
endif()
step("axon-launch -n 2 train, built without MPI" ${launcher} -n 2 ${train} --epochs 1 --samples 512 --hidden 8)
if(NOT step_output MATCHES "parameter checksum")
  message(FATAL_ERROR "train built without MPI printed no checksum:\n${step_output}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env AXON_BACKEND=mpi ${train} --epochs 1 --samples 512 --hidden 8
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "this build of axonml_distributed has no MPI backend")
  message(FATAL_ERROR "AXON_BACKEND=mpi in a build without MPI (status ${rc}) did not say so:\n${out}${err}")
endif()
message(STATUS "built without MPI: axon-launch -n 2 train ran, AXON_BACKEND=mpi refused")
