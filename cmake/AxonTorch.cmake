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
# A sanitizer-instrumented extension cannot be loaded into the uninstrumented
# python3 (the ASan runtime must come first), so sanitizer builds leave the
# backend out unless asked; the release build tests it.
set(AXON_TORCH_DEFAULT ${AXON_TORCH_FOUND})
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  set(AXON_TORCH_DEFAULT OFF)
endif()
axon_feature(AXON_WITH_TORCH "${AXON_TORCH_FOUND}" "${AXON_TORCH_DEFAULT}"
             "Build the PyTorch backend (needs libtorch, pybind11, python3-torch)")
if(AXON_WITH_TORCH AND NOT AXON_TORCH_FOUND)
  message(FATAL_ERROR "AXON_WITH_TORCH=ON but libtorch, pybind11 or a Python (AXON_TORCH_PYTHON="
                      "${AXON_TORCH_PYTHON}) that imports torch was not found "
                      "(Debian: apt-get install libtorch-dev pybind11-dev python3-torch)")
endif()
if(AXON_WITH_TORCH)
  message(STATUS "PyTorch backend: libtorch ${Torch_VERSION}, ${AXON_TORCH_PYTHON} with torch ${AXON_PYTHON_TORCH_VERSION}")
elseif(AXON_TORCH_FOUND)
  message(STATUS "PyTorch backend left out of this sanitizer build (-DAXON_WITH_TORCH=ON to force it); its tests are skipped")
else()
  message(STATUS "PyTorch not found: the torch backend is not built and its tests are skipped")
endif()

# Where `cmake --install` puts the Python package, relative to the install
# prefix: the interpreter's own site directory for a prefix, with the prefix
# cut off. Debian's interpreter names its system scheme "deb_system"
# (PREFIX/lib/python3/dist-packages, on its path for PREFIX=/usr); any other
# uses "posix_prefix" (PREFIX/lib/python3.X/site-packages). Another prefix
# needs PYTHONPATH=PREFIX/<this>.
if(AXON_WITH_TORCH AND NOT DEFINED AXON_PYTHON_INSTALL_DIR)
  execute_process(
    COMMAND ${AXON_TORCH_PYTHON} -c [[
import sysconfig
scheme = "deb_system" if "deb_system" in sysconfig.get_scheme_names() else "posix_prefix"
print(sysconfig.get_path("platlib", scheme, vars={"base": "/@PREFIX@", "platbase": "/@PREFIX@"})[len("/@PREFIX@/"):])
]]
    OUTPUT_VARIABLE axon_python_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE axon_python_dir_rc)
  if(NOT axon_python_dir_rc EQUAL 0 OR axon_python_dir STREQUAL "")
    message(FATAL_ERROR "could not ask ${AXON_TORCH_PYTHON} for its site directory; set AXON_PYTHON_INSTALL_DIR")
  endif()
  set(AXON_PYTHON_INSTALL_DIR ${axon_python_dir} CACHE STRING
      "Where make install puts the Python package axonml_torch, relative to the prefix")
endif()
