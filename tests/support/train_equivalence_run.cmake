# Runs train alone and under axon-launch with the same arguments and compares
# the final parameters. Variables: LAUNCH, TRAIN, COMPARE, STRATEGY, WORK,
# SAMPLES (the data set's size), RANKS. LAUNCH may be a whole command with
# "|" between its words (mpirun and its options); RANKS, when set, adds
# "-n RANKS" (axon-launch).
string(REPLACE "|" ";" launch "${LAUNCH}")
if(RANKS)
  list(APPEND launch -n ${RANKS})
endif()
file(MAKE_DIRECTORY ${WORK})
if(NOT SAMPLES)
  message(FATAL_ERROR "train_equivalence_run.cmake: -DSAMPLES=... is required")
endif()
set(args --epochs 3 --samples ${SAMPLES} --sync ${STRATEGY})
execute_process(COMMAND ${TRAIN} ${args} --checksum-file ${WORK}/alone.txt RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train alone failed (${rc})")
endif()
execute_process(COMMAND ${launch} ${TRAIN} ${args} --checksum-file ${WORK}/launched.txt RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${launch} train failed (${rc})")
endif()
execute_process(COMMAND ${COMPARE} ${WORK}/launched.txt ${WORK}/alone.txt 1e-5 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "parameters under ${launch} differ from one process's")
endif()
