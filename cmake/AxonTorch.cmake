# Finds what the PyTorch backend needs and sets AXON_WITH_TORCH.
set(AXON_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python 3 interpreter that imports torch")
set(AXON_TORCH_FOUND OFF)
find_package(Torch QUIET)
# pybind11 looks for its own interpreter: make it the one that imports torch.
set(PYTHON_EXECUTABLE ${AXON_TORCH_PYTHON} CACHE FILEPATH "" FORCE)
find_package(pybind11 CONFIG QUIET)
if(Torch_FOUND AND pybind11_FOUND AND EXISTS ${AXON_TORCH_PYTHON})
  execute_process(COMMAND ${AXON_TORCH_PYTHON} -c "import torch, sys; print(torch.__version__)"
                  OUTPUT_VARIABLE AXON_PYTHON_TORCH_VERSION RESULT_VARIABLE axon_torch_import
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(axon_torch_import EQUAL 0)
    set(AXON_TORCH_FOUND ON)
  endif()
endif()
option(AXON_WITH_TORCH "Build the PyTorch backend (needs libtorch, pybind11, python3-torch)" ${AXON_TORCH_FOUND})
if(AXON_WITH_TORCH AND NOT AXON_TORCH_FOUND)
  message(FATAL_ERROR "AXON_WITH_TORCH=ON but libtorch, pybind11 or a Python (AXON_TORCH_PYTHON="
                      "${AXON_TORCH_PYTHON}) that imports torch was not found "
                      "(Debian: apt-get install libtorch-dev pybind11-dev python3-torch)")
endif()
if(AXON_WITH_TORCH)
  message(STATUS "PyTorch backend: libtorch ${Torch_VERSION}, ${AXON_TORCH_PYTHON} with torch ${AXON_PYTHON_TORCH_VERSION}")
else()
  message(STATUS "PyTorch not found: the torch backend is not built and its tests are skipped")
endif()
