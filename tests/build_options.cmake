# The optional parts (MPI, PyTorch) are AUTO|ON|OFF: AUTO follows what each
# configure finds, so a build folder configured before the packages were
# installed picks them up later (cmake/AxonFeature.cmake).
add_test(NAME "build options: AXON_WITH_TORCH/MPI=AUTO follows what each configure finds; OFF and ON stay as given"
         COMMAND ${CMAKE_COMMAND} -DAXON_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/build_options_probe -P ${CMAKE_CURRENT_SOURCE_DIR}/build_options/check_auto.cmake)

# What `make test` prints last after a failure (scripts/recap-failed-tests.sh).
add_test(NAME "make test's recap of failed tests names each one (by output, by regular expression, never run) with its reason and last lines"
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/recap_test.sh ${PROJECT_SOURCE_DIR})
