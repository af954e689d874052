# The PyTorch backend (tests/torch/): every op against Gloo, DDP against
# Gloo, errors and a killed rank, under torch.multiprocessing and under
# axon-launch. Run with the interpreter that imports torch
# (AXON_TORCH_PYTHON), the built package on PYTHONPATH, and the stand-in
# expecttest module from tests/torch.
if(NOT AXON_WITH_TORCH)
  message(STATUS "PyTorch tests skipped: built without the torch backend (AXON_WITH_TORCH=OFF or torch not found)")
  return()
endif()

set(AXON_TORCH_TEST_ENV
  "PYTHONPATH=${PROJECT_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/torch"
  "PYTHONWARNINGS=ignore"
  "OMP_NUM_THREADS=1")
function(axon_torch_test name)
  add_test(NAME "torch: ${name}" COMMAND ${AXON_TORCH_PYTHON} ${ARGN}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
  set_tests_properties("torch: ${name}" PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")
endfunction()

axon_torch_test("bad input names the op and sizes, a rank killed with SIGKILL is named by the others within a second" test_errors.py)

foreach(n 2 4)
  axon_torch_test("every op equals Gloo or the reference on ${n} ranks, every dtype" test_ops.py ${n})
  axon_torch_test("DDP under axon ends with Gloo's parameters on ${n} ranks, world and subgroup, with and without no_sync" test_ddp.py ${n})
endforeach()

add_test(NAME "torch: examples/torch_ddp.py under axon-launch -n 4 (env:// from its MASTER_ADDR/PORT) ends as one process does"
         COMMAND ${AXON_TORCH_PYTHON} test_launch.py $<TARGET_FILE:axon-launch>
                 ${PROJECT_SOURCE_DIR}/examples/torch_ddp.py 4
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("torch: examples/torch_ddp.py under axon-launch -n 4 (env:// from its MASTER_ADDR/PORT) ends as one process does"
                     PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")
