# cmake -P script behind "docs: README's C++ snippets ...": builds the
# readme_snippets target (README.md's ```cpp blocks, extracted at build time)
# and runs it. A snippet that no longer compiles fails here, with the
# compiler's message pointing at README.md's line.
foreach(var BUILD_DIR CONFIG PROGRAM)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "build_and_run.cmake: -D${var}=... is required")
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --config ${CONFIG} --target readme_snippets
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README.md's C++ snippets do not compile:\n${out}\n${err}")
endif()
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README.md's C++ snippets failed (exit ${rc})")
endif()
