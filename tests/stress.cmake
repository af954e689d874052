# Seeded random collectives at n=8, every result verified (stress_collectives.cpp).
# Fixed seeds keep CI reproducible; run the program without --seed for a fresh one.
add_executable(stress_collectives programs/stress_collectives.cpp)
target_link_libraries(stress_collectives PRIVATE axonml::distributed axon_warnings)

add_test(NAME "stress: 3000 random collectives on 8 ranks are correct (seed 1)"
         COMMAND axon-launch -n 8 --timeout 120 $<TARGET_FILE:stress_collectives> --seed 1 --ops 3000)
add_test(NAME "stress: random collectives through 4 KiB slots are correct on 8 ranks (seed 2)"
         COMMAND axon-launch -n 8 --timeout 120 $<TARGET_FILE:stress_collectives> --seed 2 --ops 1000
                 --max-bytes 262144)
set_tests_properties("stress: random collectives through 4 KiB slots are correct on 8 ranks (seed 2)"
                     PROPERTIES ENVIRONMENT "AXON_SLOT_BYTES=4096")
set_tests_properties("stress: 3000 random collectives on 8 ranks are correct (seed 1)"
                     "stress: random collectives through 4 KiB slots are correct on 8 ranks (seed 2)"
                     PROPERTIES TIMEOUT 600 LABELS "multiprocess")
