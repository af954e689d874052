# MpiBackend under a real mpirun: every op, flat and hierarchical (two
# pretend nodes of two ranks, AXON_NODE_ID from each rank's
# OMPI_COMM_WORLD_RANK) over TCP and over shared memory (vader), and the train
# example under mpirun ending with one process's parameters. Skipped, with a
# message, when the library was built without MPI or mpirun is missing.
find_program(AXON_MPIRUN mpirun)
if(NOT AXON_WITH_MPI OR NOT AXON_MPIRUN)
  message(STATUS "MPI tests skipped: built without MPI (AXON_WITH_MPI=OFF) or no mpirun")
  return()
endif()

add_executable(mpi_rank_checks support/mpi_rank_checks.cpp)
target_include_directories(mpi_rank_checks PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(mpi_rank_checks PRIVATE axonml::distributed axon_warnings)

add_executable(mpi_busy_core support/mpi_busy_core.cpp)
target_include_directories(mpi_busy_core PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(mpi_busy_core PRIVATE axonml::distributed axon_warnings)

# Open MPI's own allocations outlive MPI_Finalize, which LeakSanitizer would
# report as our leaks in the asan preset; the ranks inherit mpirun's
# environment.
set(AXON_MPI_TEST_ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")

# We run as root in containers, and 4 ranks on fewer cores.
set(AXON_MPIRUN_ARGS --allow-run-as-root --oversubscribe -np 4)
set(AXON_PRETEND_TWO_NODES /bin/sh -c
    "AXON_NODE_ID=$((OMPI_COMM_WORLD_RANK / 2)) exec \"$0\" \"$@\"")
# Nodes of ranks 0, 2 and 1, 3: a rank's number on its node is not its rank.
set(AXON_PRETEND_TWO_INTERLEAVED_NODES /bin/sh -c
    "AXON_NODE_ID=$((OMPI_COMM_WORLD_RANK % 2)) exec \"$0\" \"$@\"")

foreach(btl "tcp,self" "vader,self")
  add_test(NAME "mpi: every op on 4 ranks, flat (btl ${btl})"
    COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} --mca btl ${btl} -x AXON_HIERARCHICAL=0
            $<TARGET_FILE:mpi_rank_checks> --nodes 0)
  add_test(NAME "mpi: every op on 2 pretend nodes x 2 ranks equals flat (btl ${btl})"
    COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} --mca btl ${btl}
            ${AXON_PRETEND_TWO_NODES} $<TARGET_FILE:mpi_rank_checks> --nodes 2)
endforeach()
add_test(NAME "mpi: every op on one node of 4 ranks through its arena"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} $<TARGET_FILE:mpi_rank_checks> --nodes 1)
add_test(NAME "mpi: AXON_NODE_ID that splits nothing still runs (4 pretend nodes of 1 rank: flat)"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} /bin/sh -c "AXON_NODE_ID=$OMPI_COMM_WORLD_RANK exec \"$0\" \"$@\""
          $<TARGET_FILE:mpi_rank_checks> --nodes 0)
set_tests_properties(
  "mpi: every op on 4 ranks, flat (btl tcp,self)"
  "mpi: every op on 2 pretend nodes x 2 ranks equals flat (btl tcp,self)"
  "mpi: every op on 4 ranks, flat (btl vader,self)"
  "mpi: every op on 2 pretend nodes x 2 ranks equals flat (btl vader,self)"
  "mpi: every op on one node of 4 ranks through its arena"
  "mpi: AXON_NODE_ID that splits nothing still runs (4 pretend nodes of 1 rank: flat)"
  PROPERTIES TIMEOUT 600 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
             ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
# WORLD_SIZE is another launcher's variable: under mpirun a stray value of
# it is not ours to refuse (a review: the singleton check read it first).
set(name "mpi: a stray WORLD_SIZE=0 in an mpirun job's environment is left alone")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x WORLD_SIZE=0 -x AXON_HIERARCHICAL=0 $<TARGET_FILE:mpi_rank_checks> --nodes 0)
set_tests_properties("${name}" PROPERTIES TIMEOUT 600 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")

# The same train binary under mpirun (hierarchical: 2 pretend nodes) ends
# with the parameters of one process.
if(TARGET train)
  if(NOT TARGET compare_params)
    add_executable(compare_params support/compare_params.cpp)
    target_link_libraries(compare_params PRIVATE axon_warnings)
  endif()
  foreach(strategy sync overlapped)
    set(name "train: mpirun -np 4 ends with one process's parameters (${strategy})")
    string(REPLACE ";" "|" launch "${AXON_MPIRUN};${AXON_MPIRUN_ARGS};${AXON_PRETEND_TWO_NODES}")
    add_test(NAME "${name}"
      COMMAND ${CMAKE_COMMAND} "-DLAUNCH=${launch}" -DTRAIN=$<TARGET_FILE:train>
              -DCOMPARE=$<TARGET_FILE:compare_params> -DSTRATEGY=${strategy}
              -DSAMPLES=${AXON_TRAIN_TEST_SAMPLES}
              -DWORK=${CMAKE_CURRENT_BINARY_DIR}/train_equivalence_mpi_${strategy}
              -P ${CMAKE_CURRENT_SOURCE_DIR}/support/train_equivalence_run.cmake)
    set_tests_properties("${name}" PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
  endforeach()
endif()

# The README's promises, one program under both launchers (mpi_promises.cpp
# says what each mode checks). Short AXON_TIMEOUTs keep the timeout modes
# quick; the ring must finish long before its timeout.
# A World with static storage duration, destroyed at exit, while a thread
# loops all_reduces on it: support/static_world_exit.cpp.
add_executable(static_world_exit support/static_world_exit.cpp)
target_link_libraries(static_world_exit PRIVATE axonml::distributed axon_warnings)
set(name "mpi: a static World's thread still calling all_reduce as main returns is refused at exit, not crashed in the destroyed backend (mpirun -np 4)")
add_test(NAME "${name}" COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_TIMEOUT=60 $<TARGET_FILE:static_world_exit>)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120 ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}"
                     PASS_REGULAR_EXPRESSION "static_world_exit: rank [0-9]+'s thread: .*exiting"
                     FAIL_REGULAR_EXPRESSION "Segmentation|signal 11|exited on signal")

add_executable(mpi_promises support/mpi_promises.cpp)
target_include_directories(mpi_promises PRIVATE ${PROJECT_SOURCE_DIR}/src)
# MPI itself only to ask the thread level MPI was started with (mode threads).
target_link_libraries(mpi_promises PRIVATE axonml::distributed MPI::MPI_CXX axon_warnings)
set(AXON_PROMISES
  "ring 1 MiB from every rank to the next, then receive|ring 1048576|AXON_TIMEOUT=60"
  "all_reduces on the world and on a subgroup and a send/recv ring on the world, from three threads at once, are right|threads 300|AXON_TIMEOUT=60"
  "a recv whose buffer is not the message's size or element type throws InvalidArgument naming both, and the job's ranks in a subgroup|recv-size|AXON_TIMEOUT=60"
  "barrier skipped by rank 1 times out naming rank 1|collective-timeout|AXON_TIMEOUT=1"
  "a rank late to an all_reduce the others gave up throws PeerFailure with their reason, and so does their next call|late-rank|AXON_TIMEOUT=2"
  "Backend::abort() on rank 1 makes every other rank's waiting barrier and its next call throw PeerFailure with rank 1's reason|abort|AXON_TIMEOUT=60"
  "a rank that comes to an all_reduce as the others give it up fails its next call at once|late-at-the-timeout|AXON_TIMEOUT=2"
  "World::init() twice in one process throws InvalidArgument on the caller|init-twice|AXON_TIMEOUT=60"
  "alloc_shared gives a tensor in the arena or says that the backend has none|alloc-shared|AXON_TIMEOUT=60"
  "an all_gather refused on rank 1 only still counts there: its next call and the others' pending one are a mismatch saying the ranks are out of step|refused-on-one-rank|AXON_TIMEOUT=60"
  "every rank refusing a second thread beside the same call fails the next call on every rank, each mark naming its own rank|two-threads-one-group|AXON_TIMEOUT=60"
  "barrier vs all_reduce is a CollectiveMismatch showing both|mismatch barrier-vs-all-reduce|AXON_TIMEOUT=60"
  "all_reduce of 0 vs 1 elements is a CollectiveMismatch showing both|mismatch count-0-vs-1|AXON_TIMEOUT=60"
  "gather to different roots is a CollectiveMismatch showing both|mismatch gather-roots|AXON_TIMEOUT=60"
  "all_reduce of 100 vs 200 f32 is a CollectiveMismatch showing both|mismatch sizes|AXON_TIMEOUT=60"
  "all_reduce of 100000 vs 200000 f32 is a CollectiveMismatch showing both|mismatch large-sizes|AXON_TIMEOUT=60"
  "flat f32 / f64 reductions equal the shared-memory backend's bit for bit, and a group of one leaves NaN payloads as they were|rank-order|AXON_TIMEOUT=60")
foreach(promise IN LISTS AXON_PROMISES)
  string(REPLACE "|" ";" fields "${promise}")
  list(GET fields 0 what)
  list(GET fields 1 mode)
  list(GET fields 2 env)
  separate_arguments(mode_args UNIX_COMMAND "${mode}")
  set(name "mpi: ${what} (mpirun -np 4, flat)")
  add_test(NAME "${name}"
    COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_HIERARCHICAL=0 -x ${env}
            $<TARGET_FILE:mpi_promises> ${mode_args})
  # FAILED: a rank other than 0 whose checks failed where no tally sums them.
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                       FAIL_REGULAR_EXPRESSION "\\] FAILED: " ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
  # The same program under axon-launch: the shared-memory backend keeps the
  # same promises with the same words.
  if(TARGET axon-launch)
    string(REGEX REPLACE "AXON_TIMEOUT=" "" seconds "${env}")
    set(name "shm: ${what} (axon-launch -n 4, as under mpirun)")
    add_test(NAME "${name}"
      COMMAND $<TARGET_FILE:axon-launch> -n 4 --timeout ${seconds} $<TARGET_FILE:mpi_promises> ${mode_args})
    set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                         FAIL_REGULAR_EXPRESSION "\\] FAILED: ")
  endif()
endforeach()

# The modes that meet through files after an abort (abort-in-broadcast,
# exit-with-thread) get a folder of their own for each run, removed after
# it: each run's files have the job's own name, and every run used to leave
# four of them in the build folder.
set(AXON_IN_FRESH_FOLDER sh ${CMAKE_CURRENT_SOURCE_DIR}/support/in_fresh_folder.sh)
# Runs the command and then says its status ("job exit status N"), for tests
# whose verdict is in the output (PASS_REGULAR_EXPRESSION ignores the status).
# (Lines, not ';': a CMake list would split the script there.)
set(AXON_SAY_STATUS /bin/sh -c "\"$@\"\necho \"job exit status $?\"" sh)

# The same abort in the middle of large broadcasts on 2 pretend nodes of 2
# ranks: a rank waiting in its node's arena for a node-mate whose cross-node
# wait ended with the notice waited out AXON_TIMEOUT (a review: 5 runs in 10).
# On interleaved nodes a node-mate's relayed error named it by its number on
# the node ("rank 1 aborted: rank 2: ...", a review).
foreach(layout "0 1 | 2 3" "0 2 | 1 3")
  if(layout STREQUAL "0 1 | 2 3")
    set(pretend ${AXON_PRETEND_TWO_NODES})
  else()
    set(pretend ${AXON_PRETEND_TWO_INTERLEAVED_NODES})
  endif()
  set(name "mpi: Backend::abort() from rank 1's thread ends every rank's loop of 64 MiB broadcasts with its reason, on 2 pretend nodes (${layout})")
  add_test(NAME "${name}"
    COMMAND ${AXON_IN_FRESH_FOLDER} ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_TIMEOUT=60 ${pretend}
            $<TARGET_FILE:mpi_promises> abort-in-broadcast)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                       FAIL_REGULAR_EXPRESSION "\\] FAILED: " ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
endforeach()
if(TARGET axon-launch)
  set(name "shm: Backend::abort() from rank 1's thread ends every rank's loop of 64 MiB broadcasts with its reason (axon-launch -n 4)")
  add_test(NAME "${name}" COMMAND ${AXON_IN_FRESH_FOLDER} $<TARGET_FILE:axon-launch> -n 4 --timeout 60
                                   $<TARGET_FILE:mpi_promises> abort-in-broadcast)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                       FAIL_REGULAR_EXPRESSION "\\] FAILED: ")
endif()

# Rank 0's main returns while a thread of it loops all_reduces with the
# others' threads: under MPI it crashed (SIGSEGV) in the MPI its exit had
# finalized, 9 runs in 9 (a review); now its exit refuses the thread's next
# call and tells the others, whose loops end naming it.
foreach(layout flat nodes)
  if(layout STREQUAL "flat")
    set(how -x AXON_HIERARCHICAL=0)
    set(where "flat")
  else()
    set(how ${AXON_PRETEND_TWO_NODES})
    set(where "2 pretend nodes x 2 ranks")
  endif()
  set(name "mpi: a rank whose main returns while its thread loops all_reduces ends the others' loops with PeerFailure naming its exit, not a crash (mpirun -np 4, ${where})")
  add_test(NAME "${name}"
    COMMAND ${AXON_IN_FRESH_FOLDER} ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_TIMEOUT=60 ${how}
            $<TARGET_FILE:mpi_promises> exit-with-thread)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                       FAIL_REGULAR_EXPRESSION "\\] FAILED: |Segmentation fault|signal 11"
                       ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
endforeach()
set(name "mpi: a rank whose main returns while its thread waits in a recv nobody answers ends within seconds, not after AXON_TIMEOUT (mpirun -np 4)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_TIMEOUT=60 $<TARGET_FILE:mpi_promises> exit-with-waiting-thread)
set_tests_properties("${name}" PROPERTIES TIMEOUT 30 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                     FAIL_REGULAR_EXPRESSION "\\] FAILED: |Segmentation fault|signal 11"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
if(TARGET axon-launch)
  set(name "shm: a rank whose main returns while its thread loops all_reduces ends the others' loops with PeerFailure naming its exit, and the job with status 1 (axon-launch -n 4)")
  add_test(NAME "${name}" COMMAND ${AXON_SAY_STATUS} ${AXON_IN_FRESH_FOLDER} $<TARGET_FILE:axon-launch> -n 4 --timeout 60
                                   $<TARGET_FILE:mpi_promises> exit-with-thread)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures.*job exit status 1"
                       FAIL_REGULAR_EXPRESSION "\\] FAILED: |Segmentation fault|signal 11")
endif()

# Every rank's World has static storage duration, and a detached thread
# loops all_reduces on it as main returns: under axon-launch rank 0 died of
# SIGSEGV in the World its exit destroyed (6 runs of 45, a review), where
# under mpirun the exit refused the thread's calls first. Each rank's thread
# prints its verdict as its process exits, after the job's last tally could,
# so the test counts the verdicts: one per rank (or a rank whose thread was
# between calls, named so by its peers); and says the job's status
# (support/count_static_world_verdicts.py).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(AXON_COUNT_STATIC_WORLD_VERDICTS ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/support/count_static_world_verdicts.py)
set(name "mpi: every rank's static World, with a detached thread looping all_reduces on it as main returns, refuses the thread's calls at exit before its destructor runs (mpirun -np 4)")
add_test(NAME "${name}"
  COMMAND ${AXON_COUNT_STATIC_WORLD_VERDICTS} ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_TIMEOUT=60
          $<TARGET_FILE:mpi_promises> exit-with-static-world)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "threads of a static World that ended as promised: 4"
                     FAIL_REGULAR_EXPRESSION "FAILED|Segmentation|signal 11|exited on signal"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
if(TARGET axon-launch)
  set(name "shm: every rank's static World, with a detached thread looping all_reduces on it as main returns, refuses the thread's calls at exit before its destructor runs, and the job ends with status 1 (axon-launch -n 4)")
  add_test(NAME "${name}"
    COMMAND ${AXON_COUNT_STATIC_WORLD_VERDICTS} $<TARGET_FILE:axon-launch> -n 4 --timeout 60
            $<TARGET_FILE:mpi_promises> exit-with-static-world)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "threads of a static World that ended as promised: 4, job exit status 1"
                       FAIL_REGULAR_EXPRESSION "FAILED|Segmentation|signal 11|killed by signal")
  # A review's two crashes: a static ProcessGroup (made by new_group, itself
  # a call, so destroyed before the exit's steps) under a looping thread
  # (90 of 90 runs, with threads on the world too), and a thread that calls
  # again at once after its refusal, past the exit's steps (18 of 30 at n=8).
  foreach(variant group retrying)
    set(name "shm: a static World's thread looping all_reduces as main returns ends as promised, not crashed, also ${variant} (axon-launch -n 8)")
    if(variant STREQUAL "group")
      string(REPLACE "also group" "also on a static group made after the first call" name "${name}")
    else()
      string(REPLACE "also retrying" "also calling again at once after every error" name "${name}")
    endif()
    set(counted_verdicts "threads of a static World that ended as promised: 8,")
    if(variant STREQUAL "group")
      # The group's destructor runs while its thread is in a call (8 ranks
      # of 8 in 24 runs): the group is kept, and says so.
      string(APPEND counted_verdicts ".*groups kept under a call: [1-8]")
    endif()
    add_test(NAME "${name}"
      COMMAND ${AXON_COUNT_STATIC_WORLD_VERDICTS} $<TARGET_FILE:axon-launch> -n 8 --timeout 60
              $<TARGET_FILE:mpi_promises> exit-with-static-world ${variant})
    set_tests_properties("${name}" PROPERTIES TIMEOUT 120
                         PASS_REGULAR_EXPRESSION "${counted_verdicts}"
                         FAIL_REGULAR_EXPRESSION "FAILED|Segmentation|signal 11|killed by signal")
  endforeach()
endif()
# The count itself, on the output of a job whose rank 5 had its thread
# between calls as its exit began (an ASan run beside busy loops; its
# verdict lines as the fixed verdict prints them): rank 5 counts, named by
# its peers and silent; had it warned of a call in flight, it would not.
set(name "shm: a static World job's count takes a rank whose thread was between calls as its exit began (silent, named by its peers as exited with status 0), and not one that warned of a call in flight")
add_test(NAME "${name}: the job's own output"
  COMMAND ${AXON_COUNT_STATIC_WORLD_VERDICTS} cat ${CMAKE_CURRENT_SOURCE_DIR}/support/static_world_between_calls.txt)
set_tests_properties("${name}: the job's own output" PROPERTIES
                     PASS_REGULAR_EXPRESSION "rank\\(s\\) 5 exited with their thread between calls.*ended as promised: 8, job exit status 0")
add_test(NAME "${name}: rank 5 warned"
  COMMAND ${AXON_COUNT_STATIC_WORLD_VERDICTS} /bin/sh -c "cat \"$0\" && echo '[rank 5] 01:47:16.200 warning: ShmBackend: exiting while a call of this library is still running on another thread'"
          ${CMAKE_CURRENT_SOURCE_DIR}/support/static_world_between_calls.txt)
set_tests_properties("${name}: rank 5 warned" PROPERTIES PASS_REGULAR_EXPRESSION "ended as promised: 7,")

# Rank 1 does its part in every call and then exits with status 1: the
# others finish every call. Its exit's notice overtook its last messages in
# 2-3 runs of 8 (a review), so the job runs 6 times.
set(name "mpi: a rank that exits with status 1 after its part in every call lets the others finish them (mpirun -np 4, 6 runs)")
add_test(NAME "${name}"
  COMMAND /bin/sh -c "for run in 1 2 3 4 5 6; do \"$@\" 2>&1 | grep -E 'checks per rank|FAILED|error' | sed \"s/^/run $run: /\"; done" sh
          ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_TIMEOUT=60 $<TARGET_FILE:mpi_promises> exit-nonzero-after-its-part)
set_tests_properties("${name}" PROPERTIES TIMEOUT 180
                     PASS_REGULAR_EXPRESSION "run 6: mpi_promises exit-nonzero-after-its-part: [0-9]+ checks per rank, 0 failures"
                     FAIL_REGULAR_EXPRESSION "FAILED|error|[1-9][0-9]* failures"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
if(TARGET axon-launch)
  set(name "shm: a rank that exits with status 1 after its part in every call lets the others finish them (axon-launch -n 4)")
  add_test(NAME "${name}" COMMAND $<TARGET_FILE:axon-launch> -n 4 --timeout 60 $<TARGET_FILE:mpi_promises> exit-nonzero-after-its-part)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                       FAIL_REGULAR_EXPRESSION "\\] FAILED: |\\] error: ")
endif()

# Rank 1 hangs (60 s) while the others time out: they print the tally (rank
# 0's own, no collective) and return, and mpirun must end the job within
# seconds rather than wait in MPI_Finalize for rank 1: the test's 30 s
# timeout fails it otherwise.
set(name "mpi: a rank that hangs alive does not keep the others in MPI_Finalize: mpirun ends the job after AXON_TIMEOUT (mpirun -np 4, flat)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_HIERARCHICAL=0 -x AXON_TIMEOUT=1
          $<TARGET_FILE:mpi_promises> hung-peer)
set_tests_properties("${name}" PROPERTIES TIMEOUT 30
                     PASS_REGULAR_EXPRESSION "waited 1000 ms \\(AXON_TIMEOUT\\) at exit for peers that never reached MPI_Finalize"
                     FAIL_REGULAR_EXPRESSION "[1-9][0-9]* failures"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")

# A collective from an atexit handler that runs after this library finalized
# MPI: Open MPI aborted the job from inside MPI_Irecv, naming only itself.
set(name "mpi: an all_reduce from an atexit handler after MPI_Finalize throws InvalidArgument naming the op (mpirun -np 4)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} $<TARGET_FILE:mpi_promises> after-exit)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "after exit: InvalidArgument: all_reduce on rank [0-3]: MPI has been finalized"
                     FAIL_REGULAR_EXPRESSION "MPI_FINALIZE|another exception|all_reduce completed|[1-9][0-9]* failures"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")

# Rank 0 alone has a short timeout: the others wait for it at the end.
set(name "mpi: recv from a rank that never sends times out naming op and peer (mpirun -np 4, flat)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} ${AXON_MPIRUN_ARGS} -x AXON_HIERARCHICAL=0
          /bin/sh -c "AXON_TIMEOUT=$((OMPI_COMM_WORLD_RANK == 0 ? 1 : 60)) exec \"$0\" \"$@\""
          $<TARGET_FILE:mpi_promises> recv-timeout)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "checks per rank, 0 failures"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")

# A malformed AXON_* variable is reported with the rank that read it, under
# either launcher (it was "AXON_NODE_ID=abc is not a whole number ...", with
# nothing to say whose output it was).
set(name "mpi: a malformed AXON_NODE_ID is reported naming the rank (mpirun -np 2)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 2 -x AXON_NODE_ID=abc
          $<TARGET_FILE:mpi_promises> init-twice)
set_tests_properties("${name}" PROPERTIES TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "rank 1: AXON_NODE_ID=abc is not a whole number"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
if(TARGET axon-launch)
  # Set in each rank, past the launcher: a malformed AXON_TIMEOUT in the
  # launcher's own environment is refused by the launcher (launcher: bad-arguments).
  set(name "shm: a malformed AXON_TIMEOUT is reported naming the rank (axon-launch -n 2)")
  add_test(NAME "${name}" COMMAND $<TARGET_FILE:axon-launch> -n 2
           /bin/sh -c "AXON_TIMEOUT=0 exec \"$0\" \"$@\"" $<TARGET_FILE:mpi_promises> init-twice)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "rank 1: AXON_TIMEOUT=0 is not a number of seconds")
endif()

# AXON_BACKEND=mock under mpirun: each rank would run alone, as under
# axon-launch; mpirun's count is in OMPI_COMM_WORLD_SIZE, not WORLD_SIZE
# (found by a review: every rank trained alone and exited 0).
if(TARGET train)
  set(name "mpi: AXON_BACKEND=mock under mpirun fails instead of giving worlds of one")
  add_test(NAME "${name}"
    COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 2 -x AXON_BACKEND=mock
            $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}"
    PASS_REGULAR_EXPRESSION "rank 1: AXON_BACKEND=mock gives each process a world of its own, but OMPI_COMM_WORLD_SIZE=2"
    FAIL_REGULAR_EXPRESSION "parameter checksum")
endif()

# A process of the job that ends (status 0) before World::init(): Open MPI's
# MPI_Init waits for every process, and the others waited there for ever,
# AXON_TIMEOUT or not (a review: 8 of 10 jobs hung). Now they end after
# AXON_TIMEOUT saying why, and mpirun ends the job. (In about 1 run of 5
# mpirun itself sees the early exit first and ends the job, "exiting
# improperly": no hang either.) (launcher_probe is made in shm.cmake,
# included after this file.)
set(name "mpi: a process that ends before World::init() ends the others' MPI_Init after AXON_TIMEOUT, saying why (mpirun -np 3)")
add_test(NAME "${name}"
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi_early_exit_test.sh ${AXON_MPIRUN} $<TARGET_FILE:launcher_probe>)
set_tests_properties("${name}" PROPERTIES TIMEOUT 90 ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}"
  PASS_REGULAR_EXPRESSION "mpi_early_exit_test: ok")

# A rank that exits with a non-zero status between collectives: it waited
# for the others in the exit's barrier while they waited for it in theirs,
# until AXON_TIMEOUT (60 s here), and then they blamed each other (a
# review). Now the others' barrier throws at once, naming it and its status.
set(name "mpi: a rank that exits with status 3 makes the others' barrier throw at once naming it and its status (mpirun -np 3)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 3 -x AXON_TIMEOUT=60 $<TARGET_FILE:launcher_probe> exit 1 3)
set_tests_properties("${name}" PROPERTIES TIMEOUT 30 ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}"
  PASS_REGULAR_EXPRESSION "probe rank [02] caught PeerFailure: .*job aborted: rank 1 exited with status 3")

# MPI's waits, as the shared-memory ones: a rank with a core of its own stops
# yielding once its yields lose the core to a busy thread; an oversubscribed
# one keeps yielding. RUN_SERIAL: the counts are of this job's own contention.
# The third case leaves the verdict to mpirun's OMPI_MCA_mpi_oversubscribe
# (which is 0 for 2 ranks on 2 cores or more, --oversubscribe or not).
foreach(case "-x AXON_OVERSUBSCRIBED=0|a rank with a core of its own stops yielding to a busy thread on its core after two yields lost it"
             "-x AXON_OVERSUBSCRIBED=1|oversubscribed ranks keep yielding beside a busy thread (a long yield is a peer rank's turn)"
             "|mpirun's own verdict on oversubscription decides whether a rank's waits keep yielding beside a busy thread")
  string(REPLACE "|" ";" fields "${case}")
  list(GET fields 0 told)
  list(GET fields 1 what)
  separate_arguments(told UNIX_COMMAND "${told}")
  set(name "mpi: ${what} (mpirun -np 2, flat)")
  add_test(NAME "${name}"
    COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 2 -x AXON_HIERARCHICAL=0 ${told}
            -x AXON_TIMEOUT=60 $<TARGET_FILE:mpi_busy_core>)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE PASS_REGULAR_EXPRESSION ", 0 wrong: ok"
                       ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
endforeach()
# 64 KiB through the node's arena (hierarchical, mpirun binding each rank to
# a core): its waits counted the bound ranks as oversubscribed and kept
# yielding (a review).
set(name "mpi: the node arena's waits of ranks mpirun bound to a core each stop yielding to a busy thread (mpirun -np 2, hierarchical, 64 KiB)")
add_test(NAME "${name}"
  COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 2 -x AXON_TIMEOUT=60 $<TARGET_FILE:mpi_busy_core> 16384)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE PASS_REGULAR_EXPRESSION ", 0 wrong: ok"
                     ENVIRONMENT "${AXON_MPI_TEST_ENVIRONMENT}")
