# The arena's free space comes back: many more subgroups and shared tensors
# than a small arena holds at once, created and freed by real ranks.
add_executable(arena_churn programs/arena_churn.cpp)
target_link_libraries(arena_churn PRIVATE axonml::distributed axon_warnings)

set(AXON_ARENA_CHURN "arena: 10000 subgroups and shared tensors created and freed fit in a 64 MiB arena on 4 ranks")
add_test(NAME "${AXON_ARENA_CHURN}"
         COMMAND axon-launch -n 4 --arena-mb 64 --timeout 120 $<TARGET_FILE:arena_churn> 10000)
set_tests_properties("${AXON_ARENA_CHURN}" PROPERTIES TIMEOUT 300)

# The adversarial pass's program: per-epoch subgroups and shared tensors on
# ranks that never wait for each other between epochs, in the default arena.
# With every request served from the front of the free space it ran out of
# one 2 MiB piece while 4.2 MiB were free (7 of 12 runs at 4 ranks).
add_executable(arena_epochs programs/arena_epochs.cpp)
target_link_libraries(arena_epochs PRIVATE axonml::distributed axon_warnings)
set(AXON_ARENA_EPOCHS "arena: 1000 epochs of a subgroup and shared tensors without a barrier fit the default arena on 4 ranks")
add_test(NAME "${AXON_ARENA_EPOCHS}" COMMAND axon-launch -n 4 --timeout 120 $<TARGET_FILE:arena_epochs> 1000)
set_tests_properties("${AXON_ARENA_EPOCHS}" PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "arena_epochs: 1000 epochs; ")

add_test(NAME "messages: arena_churn --help prints its usage" COMMAND arena_churn --help)
set_tests_properties("messages: arena_churn --help prints its usage"
  PROPERTIES PASS_REGULAR_EXPRESSION "usage: axon-launch -n N \\[--arena-mb M\\] arena_churn \\[ITERATIONS\\]")
add_test(NAME "messages: arena_churn refuses ITERATIONS that is not a number" COMMAND arena_churn many)
set_tests_properties("messages: arena_churn refuses ITERATIONS that is not a number"
  PROPERTIES WILL_FAIL TRUE)
add_test(NAME "messages: arena_churn names ITERATIONS that is not a number" COMMAND arena_churn many)
set_tests_properties("messages: arena_churn names ITERATIONS that is not a number"
  PROPERTIES PASS_REGULAR_EXPRESSION "arena_churn: ITERATIONS must be a whole number of at least 1, got 'many'")
