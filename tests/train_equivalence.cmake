# The train example: it runs alone, and under axon-launch -n 4 it ends with
# the parameters of a one-process run (max difference <= 1e-5 of the largest
# parameter), for both gradient sync strategies.
if(TARGET train)
  if(NOT TARGET compare_params)  # tests/mpi.cmake may have made it
    add_executable(compare_params support/compare_params.cpp)
    target_link_libraries(compare_params PRIVATE axon_warnings)
  endif()

  add_test(NAME "train: runs alone and prints its progress and checksum"
           COMMAND train --epochs 1 --samples 8192)
  set_tests_properties("train: runs alone and prints its progress and checksum" PROPERTIES
    PASS_REGULAR_EXPRESSION "epoch 1/1  loss [0-9.]+  accuracy [0-9.]+%.*parameter checksum" TIMEOUT 300)

  add_test(NAME "train: rejects a zero global batch"
           COMMAND train --global-batch 0)
  set_tests_properties("train: rejects a zero global batch" PROPERTIES WILL_FAIL TRUE)

  if(TARGET axon-launch)
    foreach(strategy sync overlapped)
      set(name "train: 4 ranks end with one process's parameters (${strategy})")
      add_test(NAME "${name}"
        COMMAND ${CMAKE_COMMAND} -DLAUNCH=$<TARGET_FILE:axon-launch> -DTRAIN=$<TARGET_FILE:train>
                -DCOMPARE=$<TARGET_FILE:compare_params> -DSTRATEGY=${strategy} -DRANKS=4
                -DSAMPLES=${AXON_TRAIN_TEST_SAMPLES}
                -DWORK=${CMAKE_CURRENT_BINARY_DIR}/train_equivalence_${strategy}
                -P ${CMAKE_CURRENT_SOURCE_DIR}/support/train_equivalence_run.cmake)
      set_tests_properties("${name}" PROPERTIES TIMEOUT 900)
    endforeach()

    # --max-restarts with --checkpoint: a rank killed in epoch 2 of 3, and the
    # job still ends with an undisturbed run's parameters.
    add_test(NAME "train: a rank killed in epoch 2 under --max-restarts 1 ends with undisturbed parameters"
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_restart.sh $<TARGET_FILE:axon-launch>
              $<TARGET_FILE:train> $<TARGET_FILE:compare_params>)
    set_tests_properties("train: a rank killed in epoch 2 under --max-restarts 1 ends with undisturbed parameters"
                         PROPERTIES TIMEOUT 900 LABELS "multiprocess")

    # bf16 compression rounds the averaged gradients, so no equality here:
    # the run must still learn (90% or more in one epoch of 32k samples; f32: 91.1%).
    add_test(NAME "train: 2 ranks with --compress bf16 still learn"
      COMMAND axon-launch -n 2 $<TARGET_FILE:train> --epochs 1 --samples 32768 --compress bf16 --sync overlapped)
    set_tests_properties("train: 2 ranks with --compress bf16 still learn" PROPERTIES
      PASS_REGULAR_EXPRESSION "bf16 gradient compression.*epoch 1/1  loss [0-9.]+  accuracy (9[0-9]|100)\\.[0-9]+%" TIMEOUT 300)
  endif()
endif()
