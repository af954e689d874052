# The arena's free space comes back: many more subgroups and shared tensors
# than a small arena holds at once, created and freed by real ranks.
add_executable(arena_churn programs/arena_churn.cpp)
target_link_libraries(arena_churn PRIVATE axonml::distributed axon_warnings)

set(AXON_ARENA_CHURN "arena: 10000 subgroups and shared tensors created and freed fit in a 64 MiB arena on 4 ranks")
add_test(NAME "${AXON_ARENA_CHURN}"
         COMMAND axon-launch -n 4 --arena-mb 64 --timeout 120 $<TARGET_FILE:arena_churn> 10000)
set_tests_properties("${AXON_ARENA_CHURN}" PROPERTIES TIMEOUT 300)
