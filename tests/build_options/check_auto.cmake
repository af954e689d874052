# cmake -DAXON_SOURCE_DIR=... -DWORK=... -P check_auto.cmake
# An optional part left at AUTO follows what each configure finds in the
# same build folder (the packages installed after the first configure, as
# `make demo` then `make test` does); OFF and ON stay what they say.
file(REMOVE_RECURSE ${WORK})
function(configure found expected)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${AXON_SOURCE_DIR}/tests/build_options -B ${WORK}
                          -DAXON_SOURCE_DIR=${AXON_SOURCE_DIR} -DPROBE_FOUND=${found} ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(expected STREQUAL "error")
    if(rc EQUAL 0)
      message(FATAL_ERROR "found=${found} ${ARGN}: configure succeeded, expected an error:\n${out}")
    endif()
    if(NOT err MATCHES "expected AUTO, ON or OFF")
      message(FATAL_ERROR "found=${found} ${ARGN}: the error does not name the choices:\n${err}")
    endif()
    return()
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "found=${found} ${ARGN}: configure failed:\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "AXON_WITH_PROBE resolved to ${expected}")
    message(FATAL_ERROR "found=${found} ${ARGN}: expected ${expected}:\n${out}")
  endif()
endfunction()
configure(OFF OFF)                      # first configure: not installed yet
configure(ON ON)                        # installed since: the same folder now builds it
configure(OFF OFF)                      # removed again
configure(ON OFF -DAXON_WITH_PROBE=OFF) # left out on purpose, even when found
configure(ON OFF)                       # and that choice is kept
configure(ON ON -DAXON_WITH_PROBE=AUTO)
configure(ON error -DAXON_WITH_PROBE=maybe)
file(REMOVE_RECURSE ${WORK})
