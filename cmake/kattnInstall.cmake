# `cmake --install`: headers, libkattn, the kattn program and a CMake package
# (kattnConfig.cmake, kattnConfigVersion.cmake, kattnTargets.cmake with namespace kattn::),
# so that other projects can find_package(kattn) and link kattn::kattn.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KATTN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kattn" CACHE STRING
    "Where kattnConfig.cmake is installed, relative to the prefix")

# The installed program finds a shared libkattn beside it and the Kokkos it was linked with,
# unless the caller (spack) sets its own RPATH.
if(NOT DEFINED CMAKE_INSTALL_RPATH)
  set_target_properties(kattn-cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()
if(NOT DEFINED CMAKE_INSTALL_RPATH_USE_LINK_PATH)
  set_target_properties(kattn-cli kattn PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

set_target_properties(kattn-cli PROPERTIES EXPORT_NAME cli)   # kattn::cli, the kattn program
set(_kattn_exported kattn kattn-cli)
if(TARGET kattn_cuda)                                           # kernels/cuda, when built
  set_target_properties(kattn_cuda PROPERTIES EXPORT_NAME cuda)
  list(APPEND _kattn_exported kattn_cuda)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/kernels/cuda/include/kattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()

if(TARGET kattn_dist)                                           # the MPI layer, when built
  set_target_properties(kattn_dist PROPERTIES EXPORT_NAME dist)
  list(APPEND _kattn_exported kattn_dist)
endif()

install(TARGETS ${_kattn_exported} EXPORT kattnTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/kattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/kattn/config.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kattn)

install(EXPORT kattnTargets NAMESPACE kattn:: DESTINATION ${KATTN_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kattnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/kattnConfig.cmake
                              INSTALL_DESTINATION ${KATTN_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API; from 1.0 on, SameMajorVersion.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/kattnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/kattnConfig.cmake ${PROJECT_BINARY_DIR}/cmake/kattnConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/kattnFindKokkos.cmake
        DESTINATION ${KATTN_INSTALL_CMAKEDIR})
