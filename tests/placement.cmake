# axon-launch --bind: ranks pinned where the launcher says, within its allowed CPUs.
add_executable(affinity_probe programs/affinity_probe.cpp)
target_include_directories(affinity_probe PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(affinity_probe PRIVATE axonml::distributed axon_warnings)
foreach(case printed-placement-is-applied default-binds-cores cpuset-smaller-than-ranks-falls-back
             bind-none-leaves-affinity numa-binds-whole-nodes threads-share user-omp-wins bad-bind-value)
  add_test(NAME "placement: ${case}"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/placement_tests.sh ${case}
                   $<TARGET_FILE:axon-launch> $<TARGET_FILE:affinity_probe>)
  set_tests_properties("placement: ${case}" PROPERTIES TIMEOUT 300)
endforeach()
