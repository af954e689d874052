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

# The modes that once failed (promises that must hold at the edges): a
# thread per group on each rank, send/recv batches with equal tags on
# different subgroups, and NaN payloads in buffers at every alignment.
set(AXON_STRESS_MODES
    "thread-per-group|a thread per group runs random ops on its group at once (seed 3)|200"
    "p2p-subgroups|send/recv batches on subgroups with equal tags never cross (seed 4)|800"
    "nan|all_reduce of NaN payloads in unaligned buffers gives the canonical NaN on every rank (seed 5)|300")
foreach(entry ${AXON_STRESS_MODES})
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 mode)
  list(GET fields 1 what)
  list(GET fields 2 ops)
  string(REGEX MATCH "seed ([0-9]+)" _ "${what}")
  add_test(NAME "stress: ${what}"
           COMMAND axon-launch -n 8 --timeout 120 $<TARGET_FILE:stress_collectives> --mode ${mode}
                   --seed ${CMAKE_MATCH_1} --ops ${ops})
  set_tests_properties("stress: ${what}" PROPERTIES TIMEOUT 600 LABELS "multiprocess")
endforeach()

# At n=3 the odd ranks' group is rank 1 alone, which hands its buffer back
# untouched (NaN payloads too): the NaN mode's check must expect that there
# (a review ran the documented command at n=2 and 3 and it failed).
add_test(NAME "stress: all_reduce of NaN payloads in a group of one hands the payloads back (seed 6, n=3)"
         COMMAND axon-launch -n 3 --timeout 120 $<TARGET_FILE:stress_collectives> --mode nan --seed 6 --ops 300)
set_tests_properties("stress: all_reduce of NaN payloads in a group of one hands the payloads back (seed 6, n=3)"
                     PROPERTIES TIMEOUT 600 LABELS "multiprocess")
