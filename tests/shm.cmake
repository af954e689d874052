# Multi-process tests: real ranks started by axon-launch over a /dev/shm arena.
add_executable(shm_collectives_check programs/shm_collectives_check.cpp)
target_link_libraries(shm_collectives_check PRIVATE axonml::distributed axon_warnings)

foreach(n 1 2 3 8)
  add_test(NAME "shm: every collective is correct on ${n} ranks"
           COMMAND axon-launch -n ${n} --timeout 120 $<TARGET_FILE:shm_collectives_check>)
  set_tests_properties("shm: every collective is correct on ${n} ranks" PROPERTIES TIMEOUT 600)
endforeach()
foreach(n 3 8)
  add_test(NAME "shm: collectives through 4 KiB slots are correct on ${n} ranks"
           COMMAND axon-launch -n ${n} --timeout 120 $<TARGET_FILE:shm_collectives_check>)
  set_tests_properties("shm: collectives through 4 KiB slots are correct on ${n} ranks" PROPERTIES
                       TIMEOUT 600 ENVIRONMENT "AXON_SLOT_BYTES=4096")
endforeach()

# The launcher's own behaviour: exit statuses, arguments, output, cleanup.
add_executable(launcher_probe programs/launcher_probe.cpp)
target_link_libraries(launcher_probe PRIVATE axonml::distributed axon_warnings)
target_include_directories(launcher_probe PRIVATE ${PROJECT_SOURCE_DIR}/src)  # shm/arena_layout.hpp
foreach(case bad-arguments missing-program arena-too-large success master-port exit-code signal-status output-lines
             rank-killed launcher-killed interrupt interrupt-delivered-twice interrupt-not-heeded interrupt-handled-slowly flooding-output stalled-reader early-exit hung-rank late-rank leave-early finish-early peer-left
             start-timeout init-twice rank-twice child-joins exec-self no-leak restarts leftover-children leftover-daemon
             signal-reach failed-before-signal suspend)
  add_test(NAME "launcher: ${case}"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/launcher_tests.sh ${case}
                   $<TARGET_FILE:axon-launch> $<TARGET_FILE:launcher_probe>)
  set_tests_properties("launcher: ${case}" PROPERTIES TIMEOUT 300)
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(address|thread)")
    # Cases that need a ulimit -v skip that part: no AddressSanitizer (or
    # ThreadSanitizer) program starts under one; nor do 256 such processes
    # fit in a CI machine's memory (hung-rank).
    set_property(TEST "launcher: ${case}" PROPERTY ENVIRONMENT "AXON_TEST_ASAN=1")
  endif()
endforeach()
