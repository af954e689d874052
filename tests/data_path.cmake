# Edge cases of the shared-memory data path on real processes
# (programs/data_path_edges.cpp; the same cases on mock worlds are in
# test_point_to_point.cpp and test_collectives_mock.cpp).
add_executable(data_path_edges programs/data_path_edges.cpp)
target_link_libraries(data_path_edges PRIVATE axonml::distributed axon_warnings)

function(axon_data_path_test name ranks case)
  add_test(NAME "data path: ${name}"
           COMMAND axon-launch -n ${ranks} --timeout 60 $<TARGET_FILE:data_path_edges> ${case})
  set_tests_properties("data path: ${name}" PROPERTIES TIMEOUT 300 LABELS "multiprocess" ${ARGN})
endfunction()

axon_data_path_test("a subgroup's message is not received on the world" 2 cross-group)
axon_data_path_test("a thread per group ping-pongs on the world and a subgroup at once" 2 threads)
axon_data_path_test("a send larger than the mailbox completes across a barrier" 2 send-then-barrier)
axon_data_path_test("a rank's sends to itself wait for its own recvs, across a barrier" 2 send-to-self)
# Before the fix a send waited out 50 ms sleeps, 0.3-1.6 s each: twelve
# jobs fail under a 1 s timeout (4 runs of 4), and under 2 s (3 of 3).
# Fixed, a wait there takes milliseconds, and a job about 20 ms on a quiet
# machine; the timeout was 0.4 s, which a job starved beside a load of 19
# met (2 runs of 15; its jobs took up to 2.3 s there).
set(name "data path: a send larger than the mailbox to a rank waiting in a collective completes without waiting out its sleeps (3 oversubscribed ranks, twelve jobs of 20 rounds under a 1 s timeout)")
add_test(NAME "${name}"
         COMMAND sh -c "for job in 1 2 3 4 5 6 7 8 9 10 11 12; do \"$0\" -n 3 --timeout 1 \"$1\" send-then-collective 20 || exit 1; done"
                 $<TARGET_FILE:axon-launch> $<TARGET_FILE:data_path_edges>)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120 LABELS "multiprocess" ENVIRONMENT "AXON_OVERSUBSCRIBED=1")
axon_data_path_test("every collective works through 64-byte slots on 8 ranks" 8 tiny-slots
                    ENVIRONMENT "AXON_SLOT_BYTES=64")

# 77: a transfer took under two timeouts on this machine (nothing shown).
add_executable(long_message programs/long_message.cpp)
target_link_libraries(long_message PRIVATE axonml::distributed axon_warnings)
set(name "data path: messages from a slow sender that take several timeouts to arrive arrive whole, into a posted recv and through the stash")
add_test(NAME "${name}" COMMAND axon-launch -n 2 --timeout 0.5 $<TARGET_FILE:long_message> 64)
set_tests_properties("${name}"
  PROPERTIES TIMEOUT 600 LABELS "multiprocess" SKIP_RETURN_CODE 77
             # Alone: a rank off its CPU for a whole timeout fails it (with
             # a fast sender of 1 GiB under 0.15 s, a neighbour under ctest
             # -j2 did; now the sender is slow and the timeout 0.5 s).
             RUN_SERIAL TRUE)
# The stash of the second message is made while rank 0 waits for room, and
# AddressSanitizer's allocator poisons the shadow of every block it hands
# out (250-350 ms for a 1 GiB stash here): not what this test is about.
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
  set_property(TEST "${name}" PROPERTY ENVIRONMENT "ASAN_OPTIONS=poison_heap=0")
endif()
add_test(NAME "data path: small messages of another tag arriving all along do not keep a recv from timing out"
         COMMAND axon-launch -n 2 --timeout 0.5 $<TARGET_FILE:long_message> stream)
set_tests_properties("data path: small messages of another tag arriving all along do not keep a recv from timing out"
  PROPERTIES TIMEOUT 120 LABELS "multiprocess"
             PASS_REGULAR_EXPRESSION "long_message stream: recv timed out after [0-2][.][0-9]+ s"
             FAIL_REGULAR_EXPRESSION "got a message")
add_test(NAME "data path: a recv whose sender stops half way through the message times out saying it waited for the rest"
         COMMAND axon-launch -n 2 --timeout 0.5 $<TARGET_FILE:long_message> stall)
set_tests_properties("data path: a recv whose sender stops half way through the message times out saying it waited for the rest"
  PROPERTIES TIMEOUT 120 LABELS "multiprocess" SKIP_RETURN_CODE 77
             PASS_REGULAR_EXPRESSION "long_message stall: rank 1: timed out after 0[.]5 s \\(AXON_TIMEOUT\\): recv of 1073741824 bytes with tag 0 from rank 0: waiting for the rest of it")
# The same for this one: each rank allocates 1 GiB before it sends or
# receives, and under AddressSanitizer rank 0 came to its send over 0.5 s
# after rank 1 began to wait, beside the 1 GiB test above (1 run of the
# CI's: "waiting for it to send").
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
  set_property(TEST "data path: a recv whose sender stops half way through the message times out saying it waited for the rest"
               PROPERTY ENVIRONMENT "ASAN_OPTIONS=poison_heap=0")
endif()
