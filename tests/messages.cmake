# What users read when they get something wrong: help texts and error
# messages say what was wrong and what to do (each test runs the program the
# way a user would and matches the text it must print).

if(TARGET axon-launch)
  add_test(NAME "messages: axon-launch --help shows -n N, PROGRAM [ARGS...] and plain flag names"
           COMMAND axon-launch --help)
  set_tests_properties("messages: axon-launch --help shows -n N, PROGRAM [ARGS...] and plain flag names"
    PROPERTIES PASS_REGULAR_EXPRESSION "Usage: axon-launch -n N \\[OPTIONS\\] PROGRAM \\[ARGS\\.\\.\\.\\].*\n  --no-tag-output  "
               FAIL_REGULAR_EXPRESSION "\\{false\\};Excludes")

  add_test(NAME "messages: axon-launch without -n says -n N is required"
           COMMAND axon-launch /bin/true)
  set_tests_properties("messages: axon-launch without -n says -n N is required"
    PROPERTIES PASS_REGULAR_EXPRESSION "axon-launch: -n N is required" FAIL_REGULAR_EXPRESSION "--nproc")
endif()

if(TARGET train AND TARGET axon-launch)
  add_test(NAME "messages: train names a global batch that splits over the ranks, once prefixed"
           COMMAND axon-launch -n 3 $<TARGET_FILE:train> --epochs 1)
  set_tests_properties("messages: train names a global batch that splits over the ranks, once prefixed"
    PROPERTIES PASS_REGULAR_EXPRESSION
               "train: --global-batch 256 does not split evenly over 3 ranks: pass a multiple of 3, e.g. --global-batch 255 or 258"
               FAIL_REGULAR_EXPRESSION "train: train:")

  add_test(NAME "messages: train blames --samples when the data set is smaller than the global batch"
           COMMAND axon-launch -n 2 $<TARGET_FILE:train> --samples 100)
  set_tests_properties("messages: train blames --samples when the data set is smaller than the global batch"
    PROPERTIES PASS_REGULAR_EXPRESSION
               "--global-batch 256 is larger than the data set \\(--samples 100\\): pass --global-batch 100 or less"
               FAIL_REGULAR_EXPRESSION "must be in")
  # ... suggesting a batch that also splits over the ranks (it said "6 or
  # less" for 4 ranks, whose next error was that 6 does not split).
  add_test(NAME "messages: train suggests a global batch that fits the data and splits over the ranks"
           COMMAND axon-launch -n 4 $<TARGET_FILE:train> --samples 6)
  set_tests_properties("messages: train suggests a global batch that fits the data and splits over the ranks"
    PROPERTIES PASS_REGULAR_EXPRESSION "pass --global-batch 4 or less \\(a multiple of 4\\), or --samples 256 or more")
  add_test(NAME "messages: train --die-rank outside the world names the ranks there are"
           COMMAND axon-launch -n 2 $<TARGET_FILE:train> --samples 512 --die-in-epoch 1 --die-rank 5)
  set_tests_properties("messages: train --die-rank outside the world names the ranks there are"
    PROPERTIES PASS_REGULAR_EXPRESSION "train: --die-rank 5 is not a rank of this world of 2 \\(0\\.\\.1\\)")
  add_test(NAME "messages: train --epochs 0 says a whole number of 1 or more is wanted"
           COMMAND $<TARGET_FILE:train> --epochs 0)
  set_tests_properties("messages: train --epochs 0 says a whole number of 1 or more is wanted"
    PROPERTIES PASS_REGULAR_EXPRESSION "--epochs: must be a whole number, 1 or more \\(got 0\\)"
               FAIL_REGULAR_EXPRESSION "not in range")
endif()

if(TARGET train)
  add_test(NAME "messages: train's first line reads as English (1 rank, synchronous gradient sync)"
           COMMAND train --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("messages: train's first line reads as English (1 rank, synchronous gradient sync)"
    PROPERTIES PASS_REGULAR_EXPRESSION
               "train: 1 rank, 512 samples, global batch 256 \\(256 per rank\\), synchronous gradient sync, no gradient compression"
               FAIL_REGULAR_EXPRESSION "1 ranks|sync sync|none compression")

  # A file that is not a checkpoint: the message names it, prefixed once.
  set(not_a_checkpoint ${CMAKE_CURRENT_BINARY_DIR}/not_a_checkpoint.bin)
  file(WRITE ${not_a_checkpoint} "not a checkpoint\n")
  add_test(NAME "messages: train names a --checkpoint that is not one, once prefixed"
           COMMAND train --epochs 1 --samples 512 --hidden 8 --checkpoint ${not_a_checkpoint})
  set_tests_properties("messages: train names a --checkpoint that is not one, once prefixed"
    PROPERTIES PASS_REGULAR_EXPRESSION "train: --checkpoint [^ ]*not_a_checkpoint.bin is not a checkpoint of this program"
               FAIL_REGULAR_EXPRESSION "train: train:")
  # A damaged checkpoint, a directory, random bytes: each named, nothing
  # allocated for a corrupt count (checkpoint_corrupt_test.sh).
  set(name "messages: train refuses a checkpoint with a corrupt count before allocating it, a directory and random bytes, naming each")
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    add_test(NAME "${name}" COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_corrupt_test.sh $<TARGET_FILE:train> --no-ulimit)
  else()
    add_test(NAME "${name}" COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_corrupt_test.sh $<TARGET_FILE:train>)
  endif()
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "^PASS\n$")
  # A checkpoint that cannot be saved (its directory does not exist) is
  # named with the reason, before any training (a review: after an epoch).
  add_test(NAME "messages: train names a --checkpoint it cannot save, with the reason, before it trains"
           COMMAND train --epochs 1 --samples 512 --hidden 8 --checkpoint ${CMAKE_CURRENT_BINARY_DIR}/no-such-dir/ck)
  set_tests_properties("messages: train names a --checkpoint it cannot save, with the reason, before it trains"
    PROPERTIES PASS_REGULAR_EXPRESSION "train: cannot create a temporary file beside --checkpoint [^ ]*no-such-dir/ck: No such file or directory"
               FAIL_REGULAR_EXPRESSION "epoch 1/1")
endif()

# stress_collectives is made in stress.cmake (included after this file).
add_test(NAME "messages: stress_collectives --help prints its usage" COMMAND stress_collectives --help)
set_tests_properties("messages: stress_collectives --help prints its usage"
  PROPERTIES PASS_REGULAR_EXPRESSION "Usage: axon-launch -n N stress_collectives \\[OPTIONS\\]"
             FAIL_REGULAR_EXPRESSION "FAILED")

add_test(NAME "messages: stress_collectives names a bad value and its option"
         COMMAND stress_collectives --ops many)
set_tests_properties("messages: stress_collectives names a bad value and its option"
    PROPERTIES PASS_REGULAR_EXPRESSION "stress_collectives: --ops many is not a whole number \\(see stress_collectives --help\\)")

# AXON_BACKEND=mpi under axon-launch: each rank would be an MPI world of one
# (an MPI singleton) and train alone; World::init() must refuse instead, each
# rank naming itself (the singleton's OMPI_COMM_WORLD_RANK=0 named rank 0).
# It refuses before initializing MPI: Open MPI's singletons, started several
# at once, sometimes die of SIGSEGV as they exit (a review), so a report of a
# signal fails the test.
if(TARGET train AND TARGET axon-launch AND AXON_WITH_MPI)
  add_test(NAME "messages: AXON_BACKEND=mpi under axon-launch fails instead of giving worlds of one"
           COMMAND axon-launch -n 2 /usr/bin/env AXON_BACKEND=mpi $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("messages: AXON_BACKEND=mpi under axon-launch fails instead of giving worlds of one"
    PROPERTIES PASS_REGULAR_EXPRESSION "\\[rank 1\\] train: rank 1: AXON_BACKEND=mpi, but MPI would see a world of 1 while WORLD_SIZE=2 \\(set by axon-launch\\)"
               FAIL_REGULAR_EXPRESSION "parameter checksum|Process received signal" TIMEOUT 120)
  # Another launcher's WORLD_SIZE (torchrun's, a script's): MPI is asked,
  # and its world of one is refused.
  add_test(NAME "messages: AXON_BACKEND=mpi with another launcher's WORLD_SIZE fails instead of giving a world of one"
           COMMAND /usr/bin/env -u AXON_ARENA_FD AXON_BACKEND=mpi WORLD_SIZE=2 RANK=1 $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("messages: AXON_BACKEND=mpi with another launcher's WORLD_SIZE fails instead of giving a world of one"
    PROPERTIES PASS_REGULAR_EXPRESSION "AXON_BACKEND=mpi, but MPI sees a world of 1 while WORLD_SIZE=2 \\(set by the launcher\\)"
               FAIL_REGULAR_EXPRESSION "parameter checksum" TIMEOUT 120)
endif()

# AXON_BACKEND=mock under axon-launch: the same, a world of one per rank.
if(TARGET train AND TARGET axon-launch)
  add_test(NAME "messages: AXON_BACKEND=mock under axon-launch fails instead of giving worlds of one"
           COMMAND axon-launch -n 2 /usr/bin/env AXON_BACKEND=mock $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("messages: AXON_BACKEND=mock under axon-launch fails instead of giving worlds of one"
    PROPERTIES PASS_REGULAR_EXPRESSION "AXON_BACKEND=mock gives each process a world of its own, but WORLD_SIZE=2"
               FAIL_REGULAR_EXPRESSION "parameter checksum" TIMEOUT 120)
endif()

# WORLD_SIZE above 1 from a launcher that gives no arena and no MPI
# (torchrun, a SLURM script): World::init() refuses rather than give each
# process a world of one that trains alone (found by a review).
if(TARGET train)
  add_test(NAME "messages: WORLD_SIZE=2 without axon-launch or mpirun fails instead of giving a world of one"
           COMMAND /usr/bin/env -u AXON_ARENA_FD WORLD_SIZE=2 RANK=1 $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("messages: WORLD_SIZE=2 without axon-launch or mpirun fails instead of giving a world of one"
    PROPERTIES PASS_REGULAR_EXPRESSION "WORLD_SIZE=2 says a launcher started that many ranks, but this process has neither axon-launch's arena"
               FAIL_REGULAR_EXPRESSION "parameter checksum" TIMEOUT 120)
endif()

# MPICH's mpiexec (PMI_SIZE) starts processes that Open MPI takes for
# singletons: refused, naming the variable, not a world of one each (a review).
if(TARGET train AND AXON_WITH_MPI)
  set(name "messages: PMI_SIZE=4 from another MPI's launcher fails instead of giving a world of one")
  add_test(NAME "${name}"
           COMMAND /usr/bin/env -u AXON_ARENA_FD -u WORLD_SIZE PMI_SIZE=4 PMI_RANK=0 $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("${name}"
    PROPERTIES PASS_REGULAR_EXPRESSION "MPI sees a world of 1 while PMI_SIZE=4 says the launcher started that many ranks"
               FAIL_REGULAR_EXPRESSION "parameter checksum" TIMEOUT 120)
endif()

# AXON_CHECK_COLLECTIVES=0 on one rank only: the rank that checks says the
# setting differs, not "unknown-collective" (found by a review).
if(TARGET train AND TARGET axon-launch)
  add_test(NAME "messages: AXON_CHECK_COLLECTIVES=0 on one rank only is named as a setting that differs"
           COMMAND axon-launch -n 2 /bin/sh -c "if [ \"$RANK\" = 1 ]; then export AXON_CHECK_COLLECTIVES=0; fi; exec \"$0\" --epochs 1 --samples 512 --hidden 8"
                   $<TARGET_FILE:train>)
  set_tests_properties("messages: AXON_CHECK_COLLECTIVES=0 on one rank only is named as a setting that differs"
    PROPERTIES PASS_REGULAR_EXPRESSION "rank 1 published no description of its call, as a rank with AXON_CHECK_COLLECTIVES=0 does.*AXON_CHECK_COLLECTIVES must be the same on every rank"
               FAIL_REGULAR_EXPRESSION "parameter checksum" TIMEOUT 120)
endif()

# AXON_ALLREDUCE_ONE_ROUND_BYTES on one rank only: ranks that chose different
# all-reduce algorithms returned different, wrong sums at call #0 and failed
# only at the next call, blaming AXON_CHECK_COLLECTIVES (a review). Now the
# first call fails on every rank, naming the setting; axon-bench checks every
# result, so a wrong sum would also fail it, without the message.
if(TARGET axon-bench AND TARGET axon-launch)
  set(name "messages: AXON_ALLREDUCE_ONE_ROUND_BYTES on one rank only fails the first all_reduce, naming it, before any sum")
  add_test(NAME "${name}"
           COMMAND axon-launch -n 3 /bin/sh -c "if [ \"$RANK\" = 0 ]; then export AXON_ALLREDUCE_ONE_ROUND_BYTES=0; fi; exec \"$0\" -b 1K -e 1K --no-floor"
                   $<TARGET_FILE:axon-bench>)
  set_tests_properties("${name}"
    PROPERTIES PASS_REGULAR_EXPRESSION "collective mismatch in group \\[0, 1, 2\\] at call #0: rank [12]: all_reduce\\(f32, 256, sum\\) vs rank 0: all_reduce\\(f32, 256, sum\\): the same call, but this rank takes the one-round all-reduce and rank 0 the pipelined one; which a size takes follows AXON_ALLREDUCE_ONE_ROUND_BYTES, which must be the same on every rank"
               FAIL_REGULAR_EXPRESSION "all_reduce +1024 " TIMEOUT 120)
endif()

# Under a cgroup memory limit (v1 or v2) smaller than the arena: a message
# with the sizes, not an OOM kill (a review). Skipped where no cgroup can be made.
if(TARGET axon-launch)
  set(name "messages: axon-launch under a cgroup memory limit below its arena fails at once, naming the sizes")
  add_test(NAME "${name}" COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/memory_limit_test.sh $<TARGET_FILE:axon-launch>)
  set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 PASS_REGULAR_EXPRESSION "^.*PASS\n$")
endif()

# Two jobs that each fit, but not together, reserving at the same moment:
# each runs or is refused naming the sizes, never OOM-killed (a review).
if(TARGET axon-launch)
  set(name "messages: two axon-launch jobs whose arenas fit only one at a time, started together, run or are refused with a message, never OOM-killed")
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    set(lone_mbs 400 440)
  else()
    set(lone_mbs 480 496)
  endif()
  add_test(NAME "${name}" COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/concurrent_arena_test.sh $<TARGET_FILE:axon-launch> ${lone_mbs})
  set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PASS_REGULAR_EXPRESSION "PASS\n$")
endif()

# An arena mapping refused under ulimit -v names that limit, not the
# machine's memory (a review: it advised "free memory" with 22 GiB free).
# Skipped under AddressSanitizer, whose shadow memory alone reserves terabytes
# of address space: no program of that build starts under any ulimit -v.
if(TARGET axon-launch)
  set(name "messages: axon-launch under ulimit -v below its arena names the address-space limit")
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    add_test(NAME "${name}" COMMAND /bin/sh -c "echo 'skipped: an AddressSanitizer build cannot start under ulimit -v'; exit 77")
  else()
    add_test(NAME "${name}" COMMAND /bin/sh -c "ulimit -v 300000 && exec \"$0\" -n 2 --arena-mb 400 /bin/true"
                                    $<TARGET_FILE:axon-launch>)
  endif()
  set_tests_properties("${name}" PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
    PASS_REGULAR_EXPRESSION "cannot reserve 400 MiB of shared memory for the arena \\(mmap: .*this process's address space is limited to 293.0 MiB \\(ulimit -v\\), [0-9.]+ [KMG]?i?B of it in use already: raise that limit")
endif()

# Under a ulimit -v with room for the arena, the job runs, every time: the
# launcher's output thread reserved a malloc arena of its own (64-128 MiB of
# address space) at a moment that raced the job arena's mapping, and 2-17
# of 40 such jobs failed (a review). Twenty runs, 46 MiB to spare.
if(TARGET axon-launch)  # launcher_probe: made in shm.cmake, included after this file
  set(name "messages: axon-launch under a ulimit -v with room for its arena runs the job every time (20 runs)")
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    add_test(NAME "${name}" COMMAND /bin/sh -c "echo 'skipped: an AddressSanitizer build cannot start under ulimit -v'; exit 77")
  else()
    add_test(NAME "${name}" COMMAND /bin/sh -c "ulimit -v 150000 || exit 1; for i in $(seq 20); do \"$0\" -n 2 --arena-mb 100 \"$1\" ok || { echo \"run $i failed\"; exit 1; }; done; echo PASS"
                                    $<TARGET_FILE:axon-launch> $<TARGET_FILE:launcher_probe>)
  endif()
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "failed")
endif()

# A rank in a PID namespace of its own took the launcher for gone at its
# first wait (a review); it is refused at World::init instead. Skipped where
# this machine does not let us make a PID namespace (a container without
# CAP_SYS_ADMIN).
if(TARGET train AND TARGET axon-launch)
  set(name "messages: a rank in a PID namespace other than axon-launch's is refused at World::init, naming it")
  add_test(NAME "${name}"
           COMMAND /bin/sh -c "unshare -p -f true 2>/dev/null || exit 77; \"$0\" -n 2 unshare -p -f \"$1\" --epochs 1 --samples 512 --hidden 8"
                   $<TARGET_FILE:axon-launch> $<TARGET_FILE:train>)
  set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
    PASS_REGULAR_EXPRESSION "rank [01]: this process runs in a PID namespace other than axon-launch's \\(pid [0-9]+ there; started under unshare -p or a sandbox\\?\\): every rank must run in the launcher's"
    FAIL_REGULAR_EXPRESSION "has gone away|parameter checksum")
endif()

if(TARGET train AND TARGET axon-launch)
  # A node the rank cannot use moved nothing, silently (a review's finding).
  add_test(NAME "messages: AXON_NUMA_NODE naming a node the rank cannot use is refused, naming the nodes it can"
           COMMAND axon-launch -n 2 /usr/bin/env AXON_NUMA_NODE=1023 $<TARGET_FILE:train> --epochs 1 --samples 512 --hidden 8)
  set_tests_properties("messages: AXON_NUMA_NODE naming a node the rank cannot use is refused, naming the nodes it can"
    PROPERTIES PASS_REGULAR_EXPRESSION "AXON_NUMA_NODE=1023 names a NUMA node this process cannot place memory on \\(its nodes: [0-9]")
endif()
