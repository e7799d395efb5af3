# Finds Kokkos and, with KATTN_ENABLE_KOKKOSKERNELS (the default), Kokkos Kernels when there is
# one, both as Debian ships them (Trilinos, Kokkos 3.4.1) and as Kokkos 4.x installs them
# (spack: one prefix each). kattn uses Kokkos Kernels only to report its version. The config
# dirs found here are recorded in the installed kattnConfig.cmake.
include("${CMAKE_CURRENT_LIST_DIR}/kattnKokkosRepairs.cmake")

find_package(Kokkos REQUIRED)
kattn_repair_kokkos()

if(KATTN_ENABLE_KOKKOSKERNELS)
  # Beside Kokkos first (one prefix for both, or Trilinos), then KokkosKernels_ROOT and the
  # usual places.
  get_filename_component(_kattn_cmake_dir "${Kokkos_DIR}" DIRECTORY)
  find_package(KokkosKernels QUIET HINTS "${_kattn_cmake_dir}/KokkosKernels" "${_kattn_cmake_dir}")
  if(KokkosKernels_FOUND)
    kattn_repair_kokkoskernels()
  else()
    message(STATUS "kattn: no Kokkos Kernels found (set KokkosKernels_ROOT to use one): built without it")
    set(KATTN_ENABLE_KOKKOSKERNELS OFF)
  endif()
endif()

# A Kokkos Kernels built for another Kokkos compiles, links, and breaks at run time.
# Standalone Kokkos Kernels follows Kokkos' major version; Trilinos' (no version of its own,
# a TriBITS package list instead) goes with Trilinos' Kokkos only.
if(KATTN_ENABLE_KOKKOSKERNELS)
  string(REGEX MATCH "^[0-9]+" _kattn_kokkos_major "${Kokkos_VERSION}")
  string(REGEX MATCH "^[0-9]+" _kattn_kk_major "${KokkosKernels_VERSION}")
  if(KokkosKernels_VERSION AND NOT _kattn_kk_major STREQUAL _kattn_kokkos_major)
    message(WARNING "kattn: Kokkos Kernels ${KokkosKernels_VERSION} (${KokkosKernels_DIR}) is not for "
                    "Kokkos ${Kokkos_VERSION} (${Kokkos_DIR}); set KokkosKernels_ROOT to one built with it")
  elseif(DEFINED KokkosKernels_PACKAGE_LIST AND NOT DEFINED Kokkos_PACKAGE_LIST)
    message(WARNING "kattn: Trilinos' Kokkos Kernels (${KokkosKernels_DIR}) works only with Trilinos' "
                    "Kokkos, not ${Kokkos_DIR}; set KokkosKernels_ROOT or Kokkos_ROOT")
  endif()
endif()
