# The docs stay true: what README.md shows is compiled and run from README.md
# itself, and every path README.md and docs/*.md name exists (tests/docs/).
# Python 3 is part of the set-up (scripts/install-deps.sh); without it these
# tests are not registered, with a message.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "docs tests skipped: no python3 (scripts/install-deps.sh installs it)")
  return()
endif()

set(AXON_README ${PROJECT_SOURCE_DIR}/README.md)
set(AXON_README_SNIPPETS ${CMAKE_CURRENT_SOURCE_DIR}/docs/readme_snippets.py)

# README's ```cpp blocks as one translation unit, regenerated when README
# changes. Not built with the rest: a README edit must fail its test, not
# the build; the test builds it.
add_custom_command(
  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/readme_snippets.cpp
  COMMAND ${Python3_EXECUTABLE} ${AXON_README_SNIPPETS} generate ${AXON_README}
          ${CMAKE_CURRENT_BINARY_DIR}/readme_snippets.cpp
  DEPENDS ${AXON_README} ${AXON_README_SNIPPETS}
  COMMENT "Extracting the C++ snippets of README.md")
add_executable(readme_snippets EXCLUDE_FROM_ALL ${CMAKE_CURRENT_BINARY_DIR}/readme_snippets.cpp)
target_link_libraries(readme_snippets PRIVATE axonml::distributed)

add_test(NAME "docs: README's C++ snippets compile and run on a world of one"
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DCONFIG=$<CONFIG>
          -DPROGRAM=$<TARGET_FILE:readme_snippets>
          -P ${CMAKE_CURRENT_SOURCE_DIR}/docs/build_and_run.cmake)
set_tests_properties("docs: README's C++ snippets compile and run on a world of one"
  PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "all README snippets ran")

set(AXON_README_SHELL_ARGS)
if(AXON_WITH_MPI)
  list(APPEND AXON_README_SHELL_ARGS --mpi)
endif()
if(AXON_WITH_TORCH)
  list(APPEND AXON_README_SHELL_ARGS --torch)
endif()
# The commands run the launcher and train; they need every program built
# (make test builds everything first). Only in an uninstrumented build: the
# commands are the same in every build, and under a sanitizer the README's
# full-size training runs took ~120 s of the ASan run for what the train
# tests there (tests/train_equivalence.cmake, mpi.cmake) already cover.
if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  add_test(NAME "docs: README's shell commands run in this build tree"
    COMMAND ${Python3_EXECUTABLE} ${AXON_README_SNIPPETS} shell ${AXON_README}
            --source-dir ${PROJECT_SOURCE_DIR} --build-dir ${PROJECT_BINARY_DIR} ${AXON_README_SHELL_ARGS})
  set_tests_properties("docs: README's shell commands run in this build tree" PROPERTIES TIMEOUT 600)
endif()

add_test(NAME "docs: every path README.md and docs/*.md name exists"
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/docs/doc_paths.py
          ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})

add_test(NAME "docs: arena.md names the layout version the code writes"
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/docs/arena_layout_version.py ${PROJECT_SOURCE_DIR})
