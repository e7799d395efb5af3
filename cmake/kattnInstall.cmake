# `cmake --install`: headers, libkattn, the kattn and kattn-scale programs and a CMake package
# (kattnConfig.cmake, kattnConfigVersion.cmake, kattnTargets.cmake with namespace kattn::),
# so that other projects can find_package(kattn) and link kattn::kattn.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KATTN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kattn" CACHE STRING
    "Where kattnConfig.cmake is installed, relative to the prefix")

set(_kattn_libraries kattn)
foreach(_lib kattn_dist kattn_cuda)
  if(TARGET ${_lib})
    list(APPEND _kattn_libraries ${_lib})
  endif()
endforeach()

# Installed, the program finds the shared kattn libraries relative to itself ($ORIGIN: the
# prefix may be moved), the libraries find each other the same way, and all of them find the
# Kokkos, MPI and CUDA they were linked with (their directories outside the build tree),
# unless the caller (spack) sets RPATHs of its own.
if(NOT DEFINED CMAKE_INSTALL_RPATH)
  file(RELATIVE_PATH _kattn_bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
  set_target_properties(kattn-cli kattn-scale PROPERTIES INSTALL_RPATH "$ORIGIN/${_kattn_bin_to_lib}")
  set_target_properties(${_kattn_libraries} PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()
if(NOT DEFINED CMAKE_INSTALL_RPATH_USE_LINK_PATH)
  set_target_properties(kattn-cli kattn-scale ${_kattn_libraries} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

set_target_properties(kattn-cli PROPERTIES EXPORT_NAME cli)   # kattn::cli, the kattn program
set(_kattn_exported kattn_core kattn kattn-cli)
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
install(TARGETS kattn-scale RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # the scaling study, not exported
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/kattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/kattn/config.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kattn)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

install(EXPORT kattnTargets NAMESPACE kattn:: DESTINATION ${KATTN_INSTALL_CMAKEDIR})

# What kattnConfig.cmake records of this build, to find the same dependencies again.
if(BUILD_SHARED_LIBS)
  set(KATTN_SHARED_LIBS ON)
else()
  set(KATTN_SHARED_LIBS OFF)
endif()
set(KATTN_KOKKOSKERNELS_DIR "")
if(KATTN_ENABLE_KOKKOSKERNELS)
  set(KATTN_KOKKOSKERNELS_DIR "${KokkosKernels_DIR}")
endif()
# The Kokkos config dir kattnConfig.cmake finds Kokkos in: the one found at configure, or, for a
# Kokkos built with kattn (KATTN_KOKKOS_SOURCE), the one installed beside kattn in its prefix.
set(KATTN_KOKKOS_DIR "${Kokkos_DIR}")
if(KATTN_KOKKOS_IN_TREE)
  set(KATTN_KOKKOS_DIR "\${PACKAGE_PREFIX_DIR}/${CMAKE_INSTALL_LIBDIR}/cmake/Kokkos")
endif()
set(KATTN_MPI_HOME "")
if(KATTN_ENABLE_MPI AND MPI_CXX_COMPILER)   # <MPI_HOME>/bin/mpicxx
  get_filename_component(KATTN_MPI_HOME "${MPI_CXX_COMPILER}" DIRECTORY)
  get_filename_component(KATTN_MPI_HOME "${KATTN_MPI_HOME}" DIRECTORY)
endif()
set(KATTN_CUDATOOLKIT_ROOT "")
if(KATTN_ENABLE_CUDA)                       # <CUDAToolkit_ROOT>/bin/nvcc
  get_filename_component(KATTN_CUDATOOLKIT_ROOT "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  get_filename_component(KATTN_CUDATOOLKIT_ROOT "${KATTN_CUDATOOLKIT_ROOT}" DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kattnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/kattnConfig.cmake
                              INSTALL_DESTINATION ${KATTN_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API; from 1.0 on, SameMajorVersion.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/kattnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/kattnConfig.cmake ${PROJECT_BINARY_DIR}/cmake/kattnConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/kattnKokkosRepairs.cmake
        DESTINATION ${KATTN_INSTALL_CMAKEDIR})
