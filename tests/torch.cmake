# The PyTorch backend (tests/torch/): every op against Gloo, DDP against
# Gloo, errors and a killed rank, under torch.multiprocessing and under
# axon-launch. Run with the interpreter that imports torch
# (AXON_TORCH_PYTHON), the built package on PYTHONPATH, and the stand-in
# expecttest module from tests/torch.
if(NOT AXON_WITH_TORCH)
  message(STATUS "PyTorch tests skipped: built without the torch backend (AXON_WITH_TORCH=OFF or torch not found)")
  return()
endif()

set(AXON_TORCH_TEST_ENV
  "PYTHONPATH=${PROJECT_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/torch"
  "PYTHONWARNINGS=ignore"
  "OMP_NUM_THREADS=1")
function(axon_torch_test name)
  add_test(NAME "torch: ${name}" COMMAND ${AXON_TORCH_PYTHON} ${ARGN}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
  set_tests_properties("torch: ${name}" PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")
endfunction()

axon_torch_test("bad input names the op and sizes, a rank killed with SIGKILL, or one whose program ended while peers waited for it (rank 0 too), is named by the others within a second" test_errors.py)

axon_torch_test("an irecv posted before its send, batch_isend_irecv and an irecv before a collective complete on 3 ranks, and a receive's Work names its source" test_p2p.py 3)

axon_torch_test("init_method file:// and tcp://, and a FileStore given as store=, set up the group and a subgroup on 3 ranks without axon-launch, well inside the timeout; a rank that comes after a peer timed out and exited gives that peer's reason" test_init_methods.py 3)
axon_torch_test("init, new_group of two ranks and destroy without a barrier, five times on 4 ranks: the ranks outside the subgroup end cleanly too" test_reinit.py 4 5)
axon_torch_test("init again on the same port while one rank is late to destroy, four times on 3 ranks: the others wait until rank 0's store is down instead of reading the old group's keys" test_reinit.py 3 4 late)
axon_torch_test("init again on the same port while rank 0 is late to destroy, eight times on 3 ranks: the others, whose store broke before they saw every rank in, still wait until rank 0's listener is gone" test_reinit.py 3 8 late0)
axon_torch_test("init again on the same port at once, eight times on 3 ranks: the others' destroy sees rank 0's new store as the old one gone, within 3 s (a failing probe made it wait 5 s every time)" test_reinit.py 3 8 same-port)
axon_torch_test("a subgroup held from a destroyed world of 4 ranks, one of which ended since, leaves the next world's new_group barrier alone, on 3 ranks" test_reinit.py old-world 4)
axon_torch_test("init again while a DDP model still holds the old default group (so the old store's keys) is refused at once on every rank, naming why; dropping the model lets it work, on 3 ranks" test_reinit.py held 3)
axon_torch_test("a group destroyed while its op still runs returns once the op ends (the GIL is released while its threads are joined)" test_destroy.py 3)
axon_torch_test("an async collective never waits for its peers in the caller (a send after it, two groups in opposite order), and a callback's collectives and PowerSGD's DDP hook run" test_async.py)
axon_torch_test("the async patterns and callbacks also complete with every collective on the communication thread (AXON_TORCH_INLINE_BYTES=0)" test_async.py 0)
axon_torch_test("new_group([0, 1]) of a 3-process job on 2 CPUs, spawned without axon-launch, waits oversubscribed as the default group does (no polls before the first yield), judged by the job's processes, not the subgroup's 2" test_oversubscribed_subgroup.py)
axon_torch_test("an async all_reduce whose peer is 100 ms late spends under 5 ms of the caller's CPU before it returns, even when AXON_SPIN_POLLS asks for a million polls" test_async.py spin)
axon_torch_test("200 rounds of callbacks nested three deep (an irecv's callback runs a collective, a send/recv and an async collective whose callback runs an isend/irecv ring) complete on 3 ranks" test_callbacks.py 3 200)
axon_torch_test("a collective issued from a future's callback pairs in program order on every rank: after the ops called before the future was taken, before those called after, on 2 ranks" test_callback_order.py 2 20)
axon_torch_test("callbacks' collectives pair in program order on 3 ranks with every collective on the communication thread (AXON_TORCH_INLINE_BYTES=0)" test_callback_order.py 3 10 0)
axon_torch_test("a future's callback that waits on an op queued after its own runs the ops up to it, in order, instead of hanging every rank" test_callback_waits.py)
axon_torch_test("the nested callbacks also complete with every collective on the communication thread (AXON_TORCH_INLINE_BYTES=0)" test_callbacks.py 3 100 0)
axon_torch_test("collectives run in call order on 3 ranks, a short one on the caller's thread when its peers wait in it, done on return" test_order.py 3)
axon_torch_test("collectives run in call order on 2 ranks with every one on the communication thread (AXON_TORCH_INLINE_BYTES=0)" test_order.py 2 0)

# The harness starts its ranks from a fork server that has imported torch
# (tests/torch/harness.py: a rank starts in ~0.1 s, not ~1.4 s of CPU); these
# two start theirs as torch.multiprocessing.spawn does, each importing torch.
foreach(n 2 4)
  axon_torch_test("every op equals Gloo or the reference on ${n} ranks, every dtype; MIN and MAX are NaN where any one rank holds a NaN" test_ops.py ${n})
  axon_torch_test("DDP under axon ends with Gloo's parameters on ${n} ranks, world and subgroup, with and without no_sync, and with gradient_as_bucket_view" test_ddp.py ${n})
endforeach()
foreach(name "every op equals Gloo or the reference on 2 ranks, every dtype; MIN and MAX are NaN where any one rank holds a NaN"
             "DDP under axon ends with Gloo's parameters on 2 ranks, world and subgroup, with and without no_sync, and with gradient_as_bucket_view")
  set_property(TEST "torch: ${name}" APPEND PROPERTY ENVIRONMENT AXON_TEST_START_METHOD=spawn)
endforeach()

axon_torch_test("a reduction without a runtime kernel (uint8, int16, bool, int8) and a reduce() grow a rank's peak memory by a piece from each rank, not by copies of the tensor, with exact results, on 3 ranks" test_fallback_memory.py 3)

axon_torch_test("a rank stopped in zero-copy all_reduces and continued after its peer timed out raises too, never returning another rank's later writes as its result, and writes at most one 32 KiB piece into the peer's tensor" test_zero_copy_stopped.py 3)

foreach(n 2 3)
  axon_torch_test("tensors placed in the group's shared memory all-reduce to the same bytes as private ones on ${n} ranks, the ranks agree when one cannot place, the space comes back, and DDP with zero_copy_allreduce_hook equals Gloo, also under join() with uneven inputs, and PyTorch's allreduce_hook bitwise on a group of a power of two" test_zero_copy.py ${n})
endforeach()

set(name "torch: axonml_torch.__version__ is the project's version")
add_test(NAME "${name}" COMMAND ${AXON_TORCH_PYTHON} -c "import axonml_torch; print(axonml_torch.__version__)")
set_tests_properties("${name}" PROPERTIES PASS_REGULAR_EXPRESSION "^${PROJECT_VERSION}\n$" ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

# examples/torch_spawn.py with no rank ran nothing and exited 0 (a review).
add_test(NAME "torch: examples/torch_spawn.py --ranks 0 is refused, naming the option"
         COMMAND ${AXON_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/examples/torch_spawn.py --ranks 0)
set_tests_properties("torch: examples/torch_spawn.py --ranks 0 is refused, naming the option"
                     PROPERTIES PASS_REGULAR_EXPRESSION "--ranks 0: at least one rank is needed"
                                ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

add_test(NAME "torch: examples/torch_ddp.py under axon-launch -n 4 (env:// from its MASTER_ADDR/PORT) ends as the script run alone without a launcher does"
         COMMAND ${AXON_TORCH_PYTHON} test_launch.py $<TARGET_FILE:axon-launch>
                 ${PROJECT_SOURCE_DIR}/examples/torch_ddp.py 4
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("torch: examples/torch_ddp.py under axon-launch -n 4 (env:// from its MASTER_ADDR/PORT) ends as the script run alone without a launcher does"
                     PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

set(name "torch: a rank that ends its program early fails nothing that does not need it: a 4 MB send, 40 isends and a subgroup all_reduce between the others complete, under axon-launch -n 3")
add_test(NAME "${name}" COMMAND ${AXON_TORCH_PYTHON} test_early_exit.py $<TARGET_FILE:axon-launch>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("${name}" PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

set(name "torch: axon-launch's summary of a failed PyTorch job gives the reason its groups failed (a timeout naming the rank never come, a rank that raised, a rank that exited 0 before init_process_group, named at once), also when every rank ended before the launcher reaped one")
add_test(NAME "${name}" COMMAND ${AXON_TORCH_PYTHON} test_launcher_summary.py $<TARGET_FILE:axon-launch>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("${name}" PROPERTIES TIMEOUT 900 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

set(name "torch: Ctrl-Z (SIGTSTP to axon-launch) stops a PyTorch job and SIGCONT continues it; two 6 s pauses, in a group's set-up and in an all_reduce, time out nothing under 4 s timeouts")
add_test(NAME "${name}" COMMAND ${AXON_TORCH_PYTHON} test_pause.py $<TARGET_FILE:axon-launch>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("${name}" PROPERTIES TIMEOUT 300 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

set(name "torch: Ctrl-C reaches a rank waiting for its peers: a signal handler's exception ends an op's wait() (the op goes on; a program that ends does not wait for it) and a group's set-up (its peers are told), not a wait made from C++; Ctrl-C to axon-launch gives each waiting rank a KeyboardInterrupt traceback, in DDP's backward after the error the peer's exit caused, printed whole; a handler's SystemExit due as an error is printed ends the program quietly with its status")
add_test(NAME "${name}" COMMAND ${AXON_TORCH_PYTHON} test_interrupt.py $<TARGET_FILE:axon-launch>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("${name}" PROPERTIES TIMEOUT 300 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

set(name "torch: a training job with DataLoader workers under the file_system sharing strategy leaves no torch_* file in /dev/shm when a rank raises, is SIGKILLed or the job is interrupted (torch_shm_manager gets to unlink them); SIGTERM to axon-launch reaches the ranks, not their workers, so a preemption handler saves, meets its peer and exits 0")
add_test(NAME "${name}" COMMAND ${AXON_TORCH_PYTHON} test_launcher_jobs.py $<TARGET_FILE:axon-launch>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("${name}" PROPERTIES TIMEOUT 300 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")

# A subset of PyTorch's own suite in `make test` (36 s in a fresh clone's
# make test, 109 s while each rank imported torch itself); `make
# test-torch-suite` runs all of it (78 s). The subset: every op family the
# backend implements.
set(AXON_TORCH_SUITE_SUBSET -k test_all_reduce_sum -k test_all_reduce_max -k test_broadcast
    -k test_all_gather -k test_barrier -k test_all_to_all -k test_scatter -k test_gather
    -k test_reduce_sum -k test_send_recv)
add_test(NAME "torch: PyTorch's distributed_test.py, a subset (all_reduce, broadcast, all_gather, barrier, all_to_all, scatter, gather, reduce, send/recv) passes on axon"
         COMMAND ${AXON_TORCH_PYTHON} run_distributed_test.py ${AXON_TORCH_SUITE_SUBSET}
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
# Its temporary files go in a folder of its own, checked empty afterwards:
# every run used to leave an axon-dist-test-* folder in /tmp (a review).
set(AXON_TORCH_SUITE_TMP ${CMAKE_CURRENT_BINARY_DIR}/torch-suite-tmp)
file(MAKE_DIRECTORY ${AXON_TORCH_SUITE_TMP})
set_tests_properties("torch: PyTorch's distributed_test.py, a subset (all_reduce, broadcast, all_gather, barrier, all_to_all, scatter, gather, reduce, send/recv) passes on axon"
                     PROPERTIES TIMEOUT 1800 ENVIRONMENT "${AXON_TORCH_TEST_ENV};WORLD_SIZE=2;TMPDIR=${AXON_TORCH_SUITE_TMP}"
                     FIXTURES_SETUP torch_suite_tmp)
set(name "torch: PyTorch's distributed_test.py subset leaves nothing in its temporary folder")
add_test(NAME "${name}" COMMAND sh -c "leftovers=$(ls -A \"$0\"); test -z \"$leftovers\" || { echo \"left in $0: $leftovers\"; exit 1; }" ${AXON_TORCH_SUITE_TMP})
set_tests_properties("${name}" PROPERTIES TIMEOUT 30 FIXTURES_REQUIRED torch_suite_tmp)

# examples/torch_allreduce.cpp: the libtorch C++ side, ProcessGroupAxon over a
# TCPStore from axon-launch's MASTER_ADDR/MASTER_PORT. Every rank counts its
# wrong elements and the counts are summed over the group: rank 0's line says
# 0 only when both ranks got every element right.
if(TARGET torch_allreduce)
  set(name "torch: examples/torch_allreduce (libtorch C++, TCPStore) sums correctly on every rank under axon-launch -n 2")
  add_test(NAME "${name}" COMMAND axon-launch -n 2 $<TARGET_FILE:torch_allreduce>)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300
    PASS_REGULAR_EXPRESSION "rank 1 of 2: allreduce sum of 1048576 floats, 0 wrong.*every rank's result checked: 0 wrong|every rank's result checked: 0 wrong.*rank 1 of 2: allreduce sum of 1048576 floats, 0 wrong")
endif()

# The concrete group type, its collectives called with their options left
# out as with ProcessGroupGloo (the overrides once dropped the defaults).
add_executable(torch_concrete_calls programs/torch_concrete_calls.cpp)
target_link_libraries(torch_concrete_calls PRIVATE axonml::torch axon_warnings)
set(name "torch: ProcessGroupAxon held as itself takes every collective with its options left out, as ProcessGroupGloo")
add_test(NAME "${name}" COMMAND axon-launch -n 2 $<TARGET_FILE:torch_concrete_calls>)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120
  PASS_REGULAR_EXPRESSION "rank 0: 0 of 14 calls with default options gave a wrong result"
  FAIL_REGULAR_EXPRESSION "[1-9][0-9]* of 14 calls|exited with code|signal")

# A libtorch program holding its group in a global: destroyed after main
# returns, among the static destructors, it corrupted the heap (a review).
add_executable(torch_global_group programs/torch_global_group.cpp)
target_link_libraries(torch_global_group PRIVATE axonml::torch axon_warnings)
foreach(mode idle pending)
  set(name "torch: a libtorch group held in a global is destroyed after main returns without corrupting the heap (${mode})")
  add_test(NAME "${name}" COMMAND axon-launch -n 2 $<TARGET_FILE:torch_global_group> ${mode})
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120
    PASS_REGULAR_EXPRESSION "rank 1: sum 3, leaving the group to the static destructors"
    FAIL_REGULAR_EXPRESSION "malloc|corrupted|signal|exited with code")
endforeach()

# A libtorch program's group made without global_ranks waited, as it went,
# for rank 0 to destroy its group too and then up to 1 s for rank 0's store
# to close, as torch.distributed's default group must (a review).
add_executable(torch_group_destroy programs/torch_group_destroy.cpp)
target_link_libraries(torch_group_destroy PRIVATE axonml::torch axon_warnings)
set(name "torch: a libtorch group made without global_ranks is destroyed without waiting for its peers (rank 0 2 s late to destroy, three times on 3 ranks)")
add_test(NAME "${name}" COMMAND axon-launch -n 3 $<TARGET_FILE:torch_group_destroy> 2000 1000)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120)

# benchmarks/torch_compare.py --quick: the gloo-vs-axon benchmark keeps
# working (n=2, three sizes, two DDP steps; each rank bound to its own CPU
# as axon-launch binds, on this 2-core machine); it exits non-zero on any wrong
# all_reduce element or when the gloo and axon DDP replicas end apart. Once
# with DDP's defaults, once with every replica's gradients as views into its
# buckets (the DDP table then says so), and once with placed tensors written
# before and read after every timed call (--fresh-inputs).
foreach(variant "" "--gradient-as-bucket-view" "--gradient-as-bucket-view --zero-copy --fresh-inputs")
  if(variant STREQUAL "--gradient-as-bucket-view --zero-copy --fresh-inputs")
    set(name "torch: benchmarks/torch_compare.py --quick ${variant} checks placed tensors and the zero-copy DDP hook against gloo")
    set(expect "fresh inputs: every tensor written.*zc/axon +rw alone +rw/gloo +wrong\n.*\n +1 MiB .* [0-9]+\\.[0-9][0-9][0-9] +0\n.*axon-zc: with zero_copy_allreduce_hook.*comm 95% CI.*torch_compare: every result checked")
    set(json torch_compare_quick_zero_copy.json)
  elseif(variant)
    set(name "torch: benchmarks/torch_compare.py --quick ${variant} checks DDP against gloo")
    set(expect "gradient_as_bucket_view=True, ms.*torch_compare: every result checked")
    set(json torch_compare_quick_view.json)
  else()
    set(name "torch: benchmarks/torch_compare.py --quick binds its ranks as axon-launch does and checks every all_reduce and DDP against gloo")
    set(expect "ranks bound as axon-launch --bind core binds them \\(rank 0 to CPUs \\[[0-9].*torch_compare: every result checked")
    set(json torch_compare_quick.json)
  endif()
  separate_arguments(variant_args UNIX_COMMAND "${variant}")
  add_test(NAME "${name}"
           COMMAND ${AXON_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/benchmarks/torch_compare.py --quick ${variant_args}
                   --json ${CMAKE_CURRENT_BINARY_DIR}/${json}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties("${name}" PROPERTIES TIMEOUT 600 ENVIRONMENT "${AXON_TORCH_TEST_ENV}"
                       PASS_REGULAR_EXPRESSION "${expect}")
endforeach()

# benchmarks/torch_call_path.py --quick: the call-path decomposition keeps
# working, and a one-rank all_reduce leaves its tensor unchanged.
set(name "torch: benchmarks/torch_call_path.py --quick runs every row and leaves a one-rank all_reduce's tensor unchanged")
add_test(NAME "${name}"
         COMMAND ${AXON_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/benchmarks/torch_call_path.py --quick
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties("${name}" PROPERTIES TIMEOUT 300 ENVIRONMENT "${AXON_TORCH_TEST_ENV}"
                     PASS_REGULAR_EXPRESSION "axon.allreduce.*torch_call_path: the tensor is unchanged after every call")

# torch_compare.py prints, beside each n=2 row, the copy floor axon-bench
# measured and that floor over Gloo's time, and at n=8 neither (a two-rank
# copy bounds nothing there); and "rw alone" (--fresh-inputs' loop with a
# barrier for the all_reduce) and rw/gloo in a table whose rows have it:
# --replot of a small --json, measuring nothing.
set(name "torch: benchmarks/torch_compare.py --replot prints the copy floor beside n=2 rows only, and the writes and reads alone where they were measured")
add_test(NAME "${name}"
         COMMAND ${AXON_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/benchmarks/torch_compare.py
                 --replot ${CMAKE_CURRENT_SOURCE_DIR}/torch/torch_compare_floor.json
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties("${name}" PROPERTIES TIMEOUT 120 ENVIRONMENT "${AXON_TORCH_TEST_ENV}"
  PASS_REGULAR_EXPRESSION "copy floor floor/gloo +wrong\n +1 MiB +1 200 +125 +0\\.104 +110 +1\\.14 +104 +0\\.087 +0\n.*on 8 ranks.*rw alone: the same loop with an axon barrier.*axon/bench +rw alone +rw/gloo +wrong\n +1 MiB +24 000 +1 300 +0\\.054 +900 +1\\.44 +700 +0\\.029 +0\n")

# benchmarks/torch_bucket_mean.py --quick: both ways of taking a DDP bucket's
# mean (the hook's AVG, PyTorch's div_ then SUM) run and give the mean, with
# the same bits at a power of two.
if(TARGET axon-launch)
  set(name "torch: benchmarks/torch_bucket_mean.py --quick on 2 ranks: the hook's AVG and PyTorch's div_ then SUM give the same bits")
  add_test(NAME "${name}"
           COMMAND axon-launch --no-tag-output -n 2 ${AXON_TORCH_PYTHON} benchmarks/torch_bucket_mean.py --quick
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 ENVIRONMENT "${AXON_TORCH_TEST_ENV}"
                       PASS_REGULAR_EXPRESSION "torch_bucket_mean: the same bits both ways \\(a power of two: required\\); elements off the mean: 0"
                       # A pass expression makes ctest ignore the exit status: a rank
                       # that failed after rank 0 printed must still fail the test.
                       FAIL_REGULAR_EXPRESSION "wrong in all|Traceback|exited with code|was killed by signal")
endif()

# AXON_DEBUG's line per collective names the job's rank in a subgroup too
# (it named the subgroup arena's own numbering: rank 0 for the job's rank 1).
if(TARGET axon-launch)
  set(name "torch: AXON_DEBUG's line for a collective in new_group([1, 2]) carries the job's rank under axon-launch -n 3")
  add_test(NAME "${name}"
           COMMAND axon-launch --no-tag-output -n 3 ${AXON_TORCH_PYTHON} subgroup_debug_log.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120
    ENVIRONMENT "${AXON_TORCH_TEST_ENV};AXON_DEBUG=1"
    PASS_REGULAR_EXPRESSION "\\[rank 2\\] [0-9:.]+ debug: all_reduce\\(f32, 4, sum\\) call #1 in group \\[1, 2\\]"
    FAIL_REGULAR_EXPRESSION "\\[rank 0\\] [0-9:.]+ debug: [^\n]*in group \\[1, 2\\]")
endif()

# A Python without torch (often the python3 first on PATH is not Debian's)
# gets told what axonml_torch needs and which interpreter to use, not just
# "No module named 'torch'" (found by a review). sys.modules["torch"] = None
# makes this interpreter's `import torch` fail as such a Python's would.
add_test(NAME "messages: importing axonml_torch in a Python that cannot import torch names PyTorch 1.13 and /usr/bin/python3"
         COMMAND ${AXON_TORCH_PYTHON} -c "import sys; sys.modules['torch'] = None; import axonml_torch")
set_tests_properties("messages: importing axonml_torch in a Python that cannot import torch names PyTorch 1.13 and /usr/bin/python3"
  PROPERTIES ENVIRONMENT "${AXON_TORCH_TEST_ENV}"
             PASS_REGULAR_EXPRESSION "axonml_torch needs PyTorch \\(1\\.13, Debian 12's python3-torch\\), and this Python \\([^)]*\\) cannot import it: .*Run the program with /usr/bin/python3")

axon_torch_test("a group whose last reference its own op's callback drops (an all_reduce, a send, a recv, a send with ops queued behind it) is destroyed there, on 3 ranks" test_drop_in_callback.py 3 5)
set(name "torch: a program that ends while the op whose callback drops its group still waits ends cleanly, under axon-launch -n 2")
add_test(NAME "${name}"
         COMMAND $<TARGET_FILE:axon-launch> -n 2 --timeout 60 ${AXON_TORCH_PYTHON} test_drop_in_callback.py exit-race
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/torch)
set_tests_properties("${name}" PROPERTIES TIMEOUT 120 ENVIRONMENT "${AXON_TORCH_TEST_ENV}")
