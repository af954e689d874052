# A random rank of a stress workload killed at a random moment, 20 times.
add_test(NAME "fault: a rank killed at a random moment, 20 times, fails the job cleanly"
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fault_tests.sh
                 $<TARGET_FILE:axon-launch> $<TARGET_FILE:stress_collectives> 20 6)
set_tests_properties("fault: a rank killed at a random moment, 20 times, fails the job cleanly"
                     PROPERTIES TIMEOUT 900 LABELS "multiprocess")
