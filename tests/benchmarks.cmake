# axon-bench checks every result it times (#wrong) and exits non-zero on any
# wrong element: run a short sweep of every collective and dtype as a test.
if(TARGET axon-bench)
  foreach(dtype f32 f64 bf16 f16 i32 i64)
    add_test(NAME "axon-bench: every collective verifies at world size 1 (${dtype})"
      COMMAND axon-bench -c all -d ${dtype} -o average -b 4 -e 1M -f 16 -n 2 -w 1)
  endforeach()
endif()
if(TARGET axon-bench-mpi)
  find_program(AXON_MPIRUN mpirun)
  if(AXON_MPIRUN)
    add_test(NAME "axon-bench-mpi: every collective verifies under mpirun -np 3"
      COMMAND ${AXON_MPIRUN} --allow-run-as-root --oversubscribe -np 3
              $<TARGET_FILE:axon-bench-mpi> -c all -d bf16 -b 4 -e 64K -f 16 -n 2 -w 1)
    set_tests_properties("axon-bench-mpi: every collective verifies under mpirun -np 3" PROPERTIES TIMEOUT 120)
  endif()
endif()
