# step(WHAT COMMAND...): runs COMMAND in a cmake -P script; if it fails, stops
# the script with WHAT, the command and its output; else leaves that output
# in `step_output` for the caller.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()
