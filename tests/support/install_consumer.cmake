# cmake -P script behind the "install:" test (registered in tests/install_consumer.cmake).
# Every step that fails stops the script with the step's output.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR CONFIG CONSUMER_SOURCE WORK_DIR LIBDIR BINDIR GENERATOR CXX PKG_CONFIG RANKS)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

function(step what)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --config ${CONFIG} --prefix ${prefix})
foreach(installed
    include/axonml/distributed.hpp
    ${LIBDIR}/cmake/axonml_distributed/axonml_distributedConfig.cmake
    ${LIBDIR}/cmake/axonml_distributed/axonml_distributedConfigVersion.cmake
    ${LIBDIR}/pkgconfig/axonml_distributed.pc)
  if(NOT EXISTS ${prefix}/${installed})
    message(FATAL_ERROR "cmake --install did not install ${installed}")
  endif()
endforeach()

# Runs `program` on RANKS ranks and checks that every rank printed its line.
function(run_consumer what program)
  if(RANKS GREATER 1)
    step("${what}" ${prefix}/${BINDIR}/axon-launch -n ${RANKS} ${program})
  else()
    step("${what}" ${program})
  endif()
  math(EXPR last "${RANKS} - 1")
  foreach(r RANGE ${last})
    string(REGEX MATCH "rank ${r} of ${RANKS}: all_reduce_sum = [0-9.]+ \\(expected [0-9.]+\\) ok"
      found "${step_output}")
    if(NOT found)
      message(FATAL_ERROR "${what}: no success line from rank ${r} of ${RANKS} in:\n${step_output}")
    endif()
  endforeach()
  message(STATUS "${what}:\n${step_output}")
endfunction()

# 1. CMake: find_package(axonml_distributed 0.1) from the prefix and nowhere else.
separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
separate_arguments(linker_flags UNIX_COMMAND "${LINKER_FLAGS}")
set(build ${WORK_DIR}/cmake-build)
step("configure examples/consumer" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${build}
  -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${CONFIG}
  -DCMAKE_CXX_COMPILER=${CXX}
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}"
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS ${build}/CMakeCache.txt found_dir REGEX "^axonml_distributed_DIR:")
string(FIND "${found_dir}" "${prefix}/" at)
if(NOT at GREATER -1)
  message(FATAL_ERROR "examples/consumer found the package outside ${prefix}: ${found_dir}")
endif()
step("build examples/consumer" ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})
run_consumer("examples/consumer (CMake package)" ${build}/consumer)

# 2. pkg-config: the same program from one compiler command line.
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
step("pkg-config" ${PKG_CONFIG} --cflags --libs axonml_distributed)
string(STRIP "${step_output}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
step("compile examples/consumer with pkg-config flags" ${CXX} ${cxx_flags} -std=c++20
  ${CONSUMER_SOURCE}/main.cpp -o ${WORK_DIR}/consumer-pkg-config ${pc_flags} ${linker_flags}
  # pkg-config has no run-time path: a shared library outside the loader's
  # path needs one (CMake adds it itself for the other build).
  -Wl,-rpath,${prefix}/${LIBDIR})
run_consumer("examples/consumer (pkg-config)" ${WORK_DIR}/consumer-pkg-config)
