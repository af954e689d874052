# cmake -P script behind the "install:" test (registered in tests/install_consumer.cmake).
# Every step that fails stops the script with the step's output.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR CONFIG CONSUMER_SOURCE WORK_DIR LIBDIR BINDIR GENERATOR CXX PKG_CONFIG RANKS)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/step.cmake)

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --config ${CONFIG} --prefix ${prefix})
foreach(installed
    include/axonml/distributed.hpp
    ${LIBDIR}/cmake/axonml_distributed/axonml_distributedConfig.cmake
    ${LIBDIR}/cmake/axonml_distributed/axonml_distributedConfigVersion.cmake
    ${LIBDIR}/pkgconfig/axonml_distributed.pc
    share/doc/axonml_distributed/LICENSE-MIT
    share/doc/axonml_distributed/LICENSE-APACHE
    share/doc/axonml_distributed/README.md
    share/doc/axonml_distributed/docs/design.md
    share/doc/axonml_distributed/docs/arena.md
    share/doc/axonml_distributed/docs/benchmarks/torch-allreduce.png)
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

# 1b. A project that uses MPI's C++ bindings still has them after
# find_package(axonml_distributed), where the package searches for MPI (a
# static archive with MpiBackend).
if(WITH_MPI AND EXISTS ${prefix}/${LIBDIR}/libaxonml_distributed.a)
  step("configure tests/support/mpi_cxx_consumer" ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/mpi_cxx_consumer
    -B ${WORK_DIR}/mpi-cxx-build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX}
    "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  step("build tests/support/mpi_cxx_consumer (MPI's C++ bindings beside the package)"
    ${CMAKE_COMMAND} --build ${WORK_DIR}/mpi-cxx-build --config ${CONFIG})
endif()

# 2. pkg-config: the same program from one compiler command line.
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
step("pkg-config" ${PKG_CONFIG} --cflags --libs axonml_distributed)
string(STRIP "${step_output}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
step("compile examples/consumer with pkg-config flags" ${CXX} ${cxx_flags} -std=c++20
  ${CONSUMER_SOURCE}/main.cpp -o ${WORK_DIR}/consumer-pkg-config ${pc_flags} ${linker_flags})
run_consumer("examples/consumer (pkg-config)" ${WORK_DIR}/consumer-pkg-config)

# 3. The PyTorch backend (when built, TORCH_PYTHON is the interpreter that
# imports torch): the Python package sits in that interpreter's site
# directory for the prefix, and imports and runs from there with PYTHONPATH
# naming nothing else (not the build tree), from a directory outside it.
if(NOT "${TORCH_PYTHON}" STREQUAL "")
  set(site ${prefix}/${PYTHON_DIR})
  file(GLOB installed_module ${site}/axonml_torch/_C*.so)
  if(NOT EXISTS ${site}/axonml_torch/__init__.py OR NOT installed_module)
    message(FATAL_ERROR "cmake --install did not install the Python package axonml_torch in ${site}")
  endif()
  if(NOT EXISTS ${prefix}/include/axonml/torch/process_group.hpp)
    message(FATAL_ERROR "cmake --install did not install include/axonml/torch/process_group.hpp")
  endif()
  set(check_import [[
import sys, torch, torch.distributed as dist
import axonml_torch
site = sys.argv[1]
assert axonml_torch.__file__.startswith(site + "/"), f"imported {axonml_torch.__file__}, not from {site}"
dist.init_process_group("axon", store=dist.HashStore(), rank=0, world_size=1)
t = torch.arange(5, dtype=torch.float32)
dist.all_reduce(t)
assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0], t
dist.destroy_process_group()
print(f"axonml_torch from {axonml_torch.__file__}: init_process_group('axon') and all_reduce ok")
]])
  file(WRITE ${WORK_DIR}/check_import.py "${check_import}")
  step("import the installed axonml_torch" ${CMAKE_COMMAND} -E chdir ${WORK_DIR}
    ${CMAKE_COMMAND} -E env --unset=PYTHONPATH PYTHONPATH=${site}
    ${TORCH_PYTHON} check_import.py ${site})
  message(STATUS "installed Python package: ${step_output}")

  # find_package(axonml_distributed COMPONENTS torch) from the prefix gives
  # axonml::torch (configured only: compiling against libtorch takes minutes).
  set(torch_consumer ${WORK_DIR}/torch-consumer)
  file(MAKE_DIRECTORY ${torch_consumer})
  file(WRITE ${torch_consumer}/CMakeLists.txt [[
cmake_minimum_required(VERSION 3.25)
project(torch_consumer CXX)
find_package(axonml_distributed 0.1 REQUIRED COMPONENTS torch)
if(NOT TARGET axonml::torch)
  message(FATAL_ERROR "COMPONENTS torch gave no axonml::torch")
endif()
message(STATUS "axonml::torch found in ${axonml_distributed_DIR}")
]])
  step("configure a project with find_package(axonml_distributed COMPONENTS torch)"
    ${CMAKE_COMMAND} -S ${torch_consumer} -B ${torch_consumer}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  string(FIND "${step_output}" "axonml::torch found in ${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "axonml::torch was not found in ${prefix}:\n${step_output}")
  endif()
endif()
