# axon-bench checks every result it times (#wrong) and exits non-zero on any
# wrong element: run a short sweep of every collective and dtype as a test.
if(TARGET axon-bench)
  foreach(dtype f32 f64 bf16 f16 i32 i64)
    add_test(NAME "axon-bench: every collective verifies at world size 1 (${dtype})"
      COMMAND axon-bench -c all -d ${dtype} -o average -b 4 -e 1M -f 16 -n 2 -w 1)
  endforeach()
  # Sizes hold whole elements: -b 3 -e 3 printed a sweep of no rows and exited 0.
  add_test(NAME "axon-bench: a --max-bytes below one element is refused, naming it"
           COMMAND axon-bench -b 3 -e 3)
  set_tests_properties("axon-bench: a --max-bytes below one element is refused, naming it" PROPERTIES
    PASS_REGULAR_EXPRESSION "axon-bench: -e/--max-bytes 3 is less than one f32 element \\(4 bytes\\): no row to run")
  # Bad options exit 2, as the program's own checks do (CLI11 gave 105),
  # and a negative --seconds-per-size is one.
  add_test(NAME "axon-bench: a negative --seconds-per-size is refused with exit status 2"
           COMMAND sh -c "\"$0\" --seconds-per-size -1; echo \"exit status $?\"" $<TARGET_FILE:axon-bench>)
  set_tests_properties("axon-bench: a negative --seconds-per-size is refused with exit status 2" PROPERTIES
    PASS_REGULAR_EXPRESSION "--seconds-per-size: must be a number of seconds, 0 or more \\(got -1\\)\n.*exit status 2")
  # A misspelt option ran the default mode and exited 0 (a review).
  set(name "axon-bench: an unknown option is refused with exit status 2, naming it")
  add_test(NAME "${name}" COMMAND sh -c "\"$0\" -b 4 -e 4 --shared-bufers; echo \"exit status $?\"" $<TARGET_FILE:axon-bench>)
  set_tests_properties("${name}" PROPERTIES
    PASS_REGULAR_EXPRESSION "The following argument was not expected: --shared-bufers.*exit status 2")
  set(name "axon-bench: --version prints the project's version")
  add_test(NAME "${name}" COMMAND axon-bench --version)
  set_tests_properties("${name}" PROPERTIES PASS_REGULAR_EXPRESSION "^axon-bench ${PROJECT_VERSION}\n$")
  # A --json path that cannot be written fails before the sweep, not after it (a review).
  set(name "axon-bench: a --json path that cannot be written is refused before any row runs")
  add_test(NAME "${name}" COMMAND sh -c "\"$0\" --json /nonexistent-dir/x.json -b 4 -e 4; echo \"exit status $?\"" $<TARGET_FILE:axon-bench>)
  set_tests_properties("${name}" PROPERTIES
    PASS_REGULAR_EXPRESSION "axon-bench: cannot write --json /nonexistent-dir/x.json \\(No such file or directory\\)\nexit status 2"
    FAIL_REGULAR_EXPRESSION "all_reduce +4")
  if(TARGET axon-launch)
    set(name "axon-bench: a --json path that cannot be written ends every rank under axon-launch -n 2, exit 2, naming it once")
    add_test(NAME "${name}"
      COMMAND sh -c "\"$0\" -n 2 \"$1\" --json /nonexistent-dir/x.json -b 4 -e 4; echo \"exit status $?\""
              $<TARGET_FILE:axon-launch> $<TARGET_FILE:axon-bench>)
    set_tests_properties("${name}" PROPERTIES
      PASS_REGULAR_EXPRESSION "\\[rank 0\\] axon-bench: cannot write --json /nonexistent-dir/x.json \\(No such file or directory\\).*exit status 2"
      FAIL_REGULAR_EXPRESSION "all_reduce +4;job aborted")
  endif()
  # A size that cannot fit is named, not reported as std::bad_alloc (found by a review).
  set(name "axon-bench: a --max-bytes larger than the machine's memory is refused, naming it")
  add_test(NAME "${name}" COMMAND sh -c "\"$0\" -b 1T -e 1T; echo \"exit status $?\"" $<TARGET_FILE:axon-bench>)
  set_tests_properties("${name}" PROPERTIES
    PASS_REGULAR_EXPRESSION "axon-bench: -e/--max-bytes 1099511627776 is more than this machine's memory \\([0-9]+ bytes\\).*\n.*exit status 2")
  # (Not under AddressSanitizer, which starts under no ulimit -v.)
  if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    set(name "axon-bench: running out of memory names the largest size, not std::bad_alloc")
    add_test(NAME "${name}" COMMAND sh -c "ulimit -v 1000000; \"$0\" -b 512M -e 512M -n 1 -w 0; echo \"exit status $?\"" $<TARGET_FILE:axon-bench>)
    set_tests_properties("${name}" PROPERTIES
      PASS_REGULAR_EXPRESSION "axon-bench: out of memory: each rank holds a few buffers of the largest size \\(-e/--max-bytes\\); give a smaller one\n.*exit status 1")
  endif()
endif()
find_package(Python3 COMPONENTS Interpreter)
if(TARGET axon-bench AND TARGET axon-launch AND Python3_Interpreter_FOUND)
  set(name "axon-bench: every row under axon-launch -n 2 carries the floor measured just before it (round trip, hand-off)")
  add_test(NAME "${name}"
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/benchmarks/check_floor.py
            $<TARGET_FILE:axon-launch> -n 2 -- $<TARGET_FILE:axon-bench>)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300)
  # Shared buffers (every rank writes its reduced slice into every rank's
  # buffer) with inputs written afresh before every call: the first and the
  # last timed call of each size are checked, on 3 ranks and odd slices.
  foreach(dtype f32 bf16)
    set(name "axon-bench: all_reduce of shared buffers with fresh inputs verifies under axon-launch -n 3 (${dtype})")
    add_test(NAME "${name}"
      COMMAND axon-launch -n 3 --arena-mb 96 -- $<TARGET_FILE:axon-bench> -c all_reduce -d ${dtype} -b 12K -e 12M -f 8
              -n 5 -w 1 --shared-buffers --fresh-inputs --no-floor)
    set_tests_properties("${name}" PROPERTIES TIMEOUT 120
      PASS_REGULAR_EXPRESSION "all_reduce +6291456 .*# wrong elements in total: 0")
  endforeach()
  # DeepSpeed's CPU shm all-reduce, rebuilt (axon-bench-deepspeed-shm): both
  # of its paths (under and over 1 MiB) on 3 ranks with uneven slices, and a
  # message of 32 MiB + 512 KiB (a full chunk, then a small one) on 2.
  if(TARGET axon-bench-deepspeed-shm)
    set(name "axon-bench-deepspeed-shm: DeepSpeed's shm all-reduce, rebuilt, verifies under axon-launch -n 3 and -n 2 across its chunk and path boundaries")
    add_test(NAME "${name}"
      COMMAND sh -c "\"$0\" -n 3 -- \"$1\" -b 20 -e 20M -f 8 -n 3 -w 1 --no-floor &&
                     \"$0\" -n 2 -- \"$1\" -b 34078720 -e 34078720 -n 3 -w 1 --no-floor"
              $<TARGET_FILE:axon-launch> $<TARGET_FILE:axon-bench-deepspeed-shm>)
    set_tests_properties("${name}" PROPERTIES TIMEOUT 120
      PASS_REGULAR_EXPRESSION "deepspeed-shm.*ranks: 3.*all_reduce +5242880 .*# wrong elements in total: 0.*ranks: 2.*all_reduce +34078720 .*# wrong elements in total: 0")
  endif()
  # ab_compare.py: one build against itself, with a setting in B only; its
  # table has a row per size with both medians and the ratio, then the same
  # per phase of the host (a phase neither side saw has rows that say so).
  set(name "ab_compare.py: two runs of axon-bench alternated under axon-launch print one row per size with A, B and B/A, overall and per phase")
  add_test(NAME "${name}"
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/benchmarks/ab_compare.py
            --a $<TARGET_FILE:axon-bench> --b $<TARGET_FILE:axon-bench> --env-b AXON_SPIN_POLLS=0
            --launcher $<TARGET_FILE:axon-launch> --ranks 2 --rounds 2 --split-phases -- -b 4 -e 64K -f 128 -n 5 -w 1)
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300
    PASS_REGULAR_EXPRESSION "# n=2: 2 interleaved rounds.*AXON_SPIN_POLLS=0.*all_reduce +4 +[0-9.]+ +[0-9.]+ +[0-9.]+.*all_reduce +512 .*all_reduce +65536 .*# fast phase .round trip 0-100 ns.*all_reduce +4 +[0-9]+ +[0-9]+ +([0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+|\\(not seen by both\\)).*# slow phase .round trip 200-inf ns.*all_reduce +65536 +[0-9]+ +[0-9]+ +([0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+|\\(not seen by both\\))")
endif()
if(TARGET axon-bench-mpi)
  find_program(AXON_MPIRUN mpirun)
  if(AXON_MPIRUN)
    if(Python3_Interpreter_FOUND)
      set(name "axon-bench-mpi: every row under mpirun -np 2 carries the floor measured just before it")
      add_test(NAME "${name}"
        COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/benchmarks/check_floor.py
                ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 2 -- $<TARGET_FILE:axon-bench-mpi>)
      set_tests_properties("${name}" PROPERTIES TIMEOUT 300)
      if(TARGET axon-launch)
        set(name "phase_split.py: rows of alternated axon-bench and axon-bench-mpi runs are split by their own round trip, with ours/MPI per size")
        add_test(NAME "${name}"
          COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/benchmarks/phase_split.py --seconds 1 --max 1K
                  --build ${PROJECT_BINARY_DIR})
        set_tests_properties("${name}" PROPERTIES TIMEOUT 300
          PASS_REGULAR_EXPRESSION "# fast phase.*# slow phase.*ours/mpi")
      endif()
    endif()
    add_test(NAME "axon-bench-mpi: every collective verifies under mpirun -np 3"
      COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 3
              $<TARGET_FILE:axon-bench-mpi> -c all -d bf16 -b 4 -e 64K -f 16 -n 2 -w 1)
    set_tests_properties("axon-bench-mpi: every collective verifies under mpirun -np 3" PROPERTIES TIMEOUT 120)
    # Every rank learns that --json cannot be written: rank 0 alone returning
    # left the others waiting in the sweep for good (a review).
    set(name "axon-bench-mpi: a --json path that cannot be written ends every rank under mpirun -np 2, exit 2")
    add_test(NAME "${name}"
      COMMAND sh -c "\"$0\" --allow-run-as-root --oversubscribe -np 2 \"$1\" --json /nonexistent-dir/x.json -b 4 -e 4; echo \"exit status $?\""
              ${AXON_MPIRUN} $<TARGET_FILE:axon-bench-mpi>)
    set_tests_properties("${name}" PROPERTIES TIMEOUT 60
      PASS_REGULAR_EXPRESSION "axon-bench: cannot write --json /nonexistent-dir/x.json \\(No such file or directory\\).*exit status 2"
      FAIL_REGULAR_EXPRESSION "all_reduce +4")
  endif()
endif()

# ddp_step: a few steps of a tiny MLP, alone and under axon-launch -n 2 with
# each strategy and compression, so that the benchmark keeps working.
if(TARGET ddp_step)
  add_test(NAME "ddp_step: times a few steps in one process"
    COMMAND ddp_step --widths 32,64,10 --batch 8 --steps 3 --warmup 1)
  set_tests_properties("ddp_step: times a few steps in one process" PROPERTIES
    PASS_REGULAR_EXPRESSION "ranks 1  no DDP.*step median [0-9.]+ ms" TIMEOUT 120)
  if(TARGET axon-launch)
    foreach(strategy sync overlapped)
      foreach(compress none bf16)
        set(name "ddp_step: times a few DDP steps under axon-launch -n 2 (${strategy}, ${compress})")
        add_test(NAME "${name}"
          COMMAND axon-launch -n 2 --arena-mb 16 $<TARGET_FILE:ddp_step> --widths 32,64,10 --batch 8
                  --steps 3 --warmup 1 --bucket-mb 0.004 --strategy ${strategy} --compress ${compress})
        set_tests_properties("${name}" PROPERTIES
          PASS_REGULAR_EXPRESSION "ranks 2  ${strategy} ${compress}.*buckets [2-9] \\([1-9] shared\\).*step median [0-9.]+ ms"
          TIMEOUT 120)
      endforeach()
    endforeach()
  endif()
endif()

# cma-probe: a small probe's run checks every byte it copied; --help and a
# bad argument must not run a probe (--help once ran one of 1 byte: a review).
if(TARGET cma-probe)
  add_test(NAME "cma-probe: copies through the kernel and through shared memory are checked byte for byte"
           COMMAND cma-probe --rounds 3 4K 64K)
  set_tests_properties("cma-probe: copies through the kernel and through shared memory are checked byte for byte"
    PROPERTIES PASS_REGULAR_EXPRESSION "65536 .* (ok|refused)")
  add_test(NAME "cma-probe: --help prints its usage and runs nothing" COMMAND cma-probe --help)
  set_tests_properties("cma-probe: --help prints its usage and runs nothing" PROPERTIES
    PASS_REGULAR_EXPRESSION "^Usage: cma-probe \\[--rounds R\\] SIZE\\.\\.\\." FAIL_REGULAR_EXPRESSION "median")
  # One-round probes: each round is the reader's last, after which it exits;
  # the writer took an exit just after the round's mark for an early end (1
  # probe in ~300, a fresh-clone run's failure).
  set(name "cma-probe: a reader that ends right after its last round is not taken for one that ended early (3000 one-round probes)")
  add_test(NAME "${name}" COMMAND sh -c "\"$0\" --rounds 1 $(seq 3000 | sed 's/.*/4K/') >/dev/null; echo \"exit status $?\"" $<TARGET_FILE:cma-probe>)
  set_tests_properties("${name}" PROPERTIES
    PASS_REGULAR_EXPRESSION "^exit status 0" FAIL_REGULAR_EXPRESSION "ended early")
  set(name "cma-probe: a bad size is refused with exit status 2, naming it")
  add_test(NAME "${name}" COMMAND sh -c "\"$0\" 64X; echo \"exit status $?\"" $<TARGET_FILE:cma-probe>)
  set_tests_properties("${name}" PROPERTIES
    PASS_REGULAR_EXPRESSION "cma-probe: size 64X is not a size in bytes \\(K and M suffixes\\)\n.*exit status 2")
endif()
