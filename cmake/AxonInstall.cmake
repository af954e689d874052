# `cmake --install`: the public headers, libaxonml_distributed (static, or
# shared with -DBUILD_SHARED_LIBS=ON), the tools, a CMake package
# (find_package(axonml_distributed) -> axonml::distributed) and a pkg-config
# file. Included at the end of the top-level CMakeLists.txt, once every target
# exists.
#
# Both package files are relocatable: `cmake --install build --prefix /any/where`
# gives a tree that works from /any/where (the tests install into a temporary
# prefix and build examples/consumer against it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(AXON_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/axonml_distributed)

# include/axonml/torch/ only with the library that implements it.
set(AXON_HEADER_EXCLUDES "")
if(NOT AXON_WITH_TORCH)
  set(AXON_HEADER_EXCLUDES PATTERN "torch" EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" ${AXON_HEADER_EXCLUDES})

# The tools other parts of the project define, when they are part of this build.
set(AXON_TOOLS "")
foreach(tool IN ITEMS axon-launch axon-bench)
  if(TARGET ${tool})
    list(APPEND AXON_TOOLS ${tool})
  endif()
endforeach()
if(AXON_TOOLS)
  # An installed tool finds a shared libaxonml_distributed beside it, wherever
  # the tree was installed.
  file(RELATIVE_PATH AXON_BIN_TO_LIB ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(${AXON_TOOLS} PROPERTIES INSTALL_RPATH "$ORIGIN/${AXON_BIN_TO_LIB}")
endif()

install(TARGETS axonml_distributed ${AXON_TOOLS}
  EXPORT axonml_distributedTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT axonml_distributedTargets
  NAMESPACE axonml::
  DESTINATION ${AXON_PACKAGE_DIR})

# What a consumer's link needs beyond the library itself. The library links
# spdlog and rt privately: a shared library carries them in its own DT_NEEDED,
# a static archive leaves them to whoever links it.
get_target_property(AXON_LIBRARY_TYPE axonml_distributed TYPE)
if(AXON_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")
  set(AXON_LIBRARY_KIND static)
  set(AXON_LINK_ONLY_DEPENDENCIES spdlog)
  set(AXON_PC_REQUIRES "tbb spdlog")
  set(AXON_PC_LIBS "-lrt -pthread")
  set(AXON_PC_LIBS_PRIVATE "")
else()
  set(AXON_LIBRARY_KIND shared)
  set(AXON_LINK_ONLY_DEPENDENCIES "")
  set(AXON_PC_REQUIRES "tbb")
  # pkg-config has no notion of a run-time path: without one, a program built
  # from the .pc file alone cannot start unless the prefix is on the loader's
  # path (found by a review).
  set(AXON_PC_LIBS "-Wl,-rpath,\${libdir}")
  set(AXON_PC_LIBS_PRIVATE "-lrt -pthread")
endif()

# MpiBackend links MPI privately, like spdlog: a static archive needs it
# found again ("mpi-c" is the pkg-config name Open MPI and MPICH both install).
set(AXON_STATIC_NEEDS_MPI FALSE)
if(AXON_WITH_MPI AND AXON_LIBRARY_KIND STREQUAL "static")
  set(AXON_STATIC_NEEDS_MPI TRUE)
  string(APPEND AXON_PC_REQUIRES " mpi-c")
endif()

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/axonml_distributedConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/axonml_distributedConfig.cmake
  INSTALL_DESTINATION ${AXON_PACKAGE_DIR})
# 0.x: a new minor version may break the API, so only 0.1.* satisfies 0.1.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/axonml_distributedConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/axonml_distributedConfig.cmake
  ${PROJECT_BINARY_DIR}/package/axonml_distributedConfigVersion.cmake
  DESTINATION ${AXON_PACKAGE_DIR})

# pkg-config: prefix is found from the .pc file's own place (${pcfiledir}).
file(RELATIVE_PATH AXON_PC_PREFIX_FROM_PCFILEDIR
  ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" AXON_PC_PREFIX_FROM_PCFILEDIR "${AXON_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/axonml_distributed.pc.in
  ${PROJECT_BINARY_DIR}/package/axonml_distributed.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/axonml_distributed.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The licence texts, which whoever ships a program linked with the static
# library ships beside it.
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE-MIT ${PROJECT_SOURCE_DIR}/LICENSE-APACHE
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The README and docs/ beside them: the installed headers' comments refer to
# README.md and docs/*.md by those names (a review found them missing).
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
  FILES_MATCHING PATTERN "*.md" PATTERN "*.png")

# The PyTorch backend, when built: libaxonml_torch in its own export set
# (find_package(axonml_distributed COMPONENTS torch) -> axonml::torch, which
# finds Torch; without the component nothing needs Torch), and the Python
# package axonml_torch in the interpreter's site directory for this prefix
# (AXON_PYTHON_INSTALL_DIR, cmake/AxonTorch.cmake).
if(AXON_WITH_TORCH)
  # A shared libaxonml_torch finds the shared libaxonml_distributed beside it:
  # the run-time paths of the program or module that loads it do not reach its
  # own dependencies (DT_RUNPATH applies to direct ones only; found by a
  # review: the installed Python package and a libtorch program of a shared
  # build failed with "libaxonml_distributed.so.0.1: cannot open shared object file").
  set_target_properties(axonml_torch PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS axonml_torch
    EXPORT axonml_torchTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT axonml_torchTargets
    NAMESPACE axonml::
    DESTINATION ${AXON_PACKAGE_DIR})

  set(AXON_PYTHON_PACKAGE_DIR ${AXON_PYTHON_INSTALL_DIR}/axonml_torch)
  # _C finds a shared libaxonml_torch in the prefix's libdir, wherever the
  # tree was installed.
  file(RELATIVE_PATH AXON_PYTHON_TO_LIB ${CMAKE_INSTALL_PREFIX}/${AXON_PYTHON_PACKAGE_DIR}
       ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(axonml_torch_python PROPERTIES INSTALL_RPATH "$ORIGIN/${AXON_PYTHON_TO_LIB}")
  install(TARGETS axonml_torch_python LIBRARY DESTINATION ${AXON_PYTHON_PACKAGE_DIR})
  install(FILES ${PROJECT_SOURCE_DIR}/python/axonml_torch/__init__.py DESTINATION ${AXON_PYTHON_PACKAGE_DIR})
endif()
