# Finds Kokkos and, with KATTN_ENABLE_KOKKOSKERNELS (the default), Kokkos Kernels when there is
# one, both as Debian ships them (Trilinos, Kokkos 3.4.1) and as Kokkos 4.x installs them
# (spack: one prefix each). kattn uses Kokkos Kernels only to report its version. The config
# dirs found here are recorded in the installed kattnConfig.cmake.
#
# With KATTN_KOKKOS_SOURCE (a Kokkos 4.x source directory, or the URL of a source tarball) Kokkos
# is built here, with kattn, instead: OpenMP by default, so that a machine whose only Kokkos is
# Debian's Serial one runs kattn on all its cores. `cmake --install` installs that Kokkos into
# kattn's prefix, where the installed kattnConfig.cmake finds it.
include("${CMAKE_CURRENT_LIST_DIR}/kattnKokkosRepairs.cmake")

set(KATTN_KOKKOS_SOURCE "" CACHE STRING
    "Build Kokkos with kattn from this Kokkos 4.x source directory or source tarball URL (OpenMP unless Kokkos_ENABLE_* say otherwise)")
set(KATTN_KOKKOS_SOURCE_SHA256 "" CACHE STRING "sha256 of the tarball KATTN_KOKKOS_SOURCE names (checked when set)")

if(KATTN_KOKKOS_SOURCE)
  include(FetchContent)
  if(IS_DIRECTORY "${KATTN_KOKKOS_SOURCE}")
    FetchContent_Declare(Kokkos SOURCE_DIR "${KATTN_KOKKOS_SOURCE}")
  elseif(KATTN_KOKKOS_SOURCE MATCHES "^[a-z]+://")
    set(_kattn_kokkos_hash "")
    if(KATTN_KOKKOS_SOURCE_SHA256)
      set(_kattn_kokkos_hash URL_HASH SHA256=${KATTN_KOKKOS_SOURCE_SHA256})
    endif()
    FetchContent_Declare(Kokkos URL "${KATTN_KOKKOS_SOURCE}" ${_kattn_kokkos_hash} DOWNLOAD_EXTRACT_TIMESTAMP ON)
  else()
    message(FATAL_ERROR "kattn: KATTN_KOKKOS_SOURCE=${KATTN_KOKKOS_SOURCE} is neither a directory nor a URL; "
                        "give a Kokkos 4.x source tree or the URL of its source tarball")
  endif()
  # OpenMP (and Serial, Kokkos' default) unless the caller chose the backends.
  get_cmake_property(_kattn_cache_vars CACHE_VARIABLES)
  if(NOT _kattn_cache_vars MATCHES "(^|;)Kokkos_ENABLE_(OPENMP|THREADS|CUDA|HIP|SYCL|SERIAL)(;|$)")
    set(Kokkos_ENABLE_OPENMP ON CACHE BOOL "Kokkos' OpenMP backend (set by kattn: KATTN_KOKKOS_SOURCE)")
  endif()
  FetchContent_MakeAvailable(Kokkos)
  # What find_package(Kokkos) would have set: the backends (Kokkos_DEVICES, Kokkos_ENABLE_<BACKEND>),
  # kokkos_check(), the version.
  include("${kokkos_BINARY_DIR}/KokkosConfigCommon.cmake")
  include("${kokkos_BINARY_DIR}/KokkosConfigVersion.cmake")
  set(Kokkos_VERSION "${PACKAGE_VERSION}")
  if(Kokkos_VERSION VERSION_LESS 4.0)
    message(FATAL_ERROR "kattn: KATTN_KOKKOS_SOURCE holds Kokkos ${Kokkos_VERSION}; building it with kattn needs Kokkos 4.x")
  endif()
  # Installed into kattn's prefix: kattnConfig.cmake looks for it there (kattnInstall.cmake).
  set(KATTN_KOKKOS_IN_TREE ON)
  set(Kokkos_DIR "${kokkos_BINARY_DIR}")
  set(Kokkos_FOUND TRUE)
  message(STATUS "kattn: Kokkos ${Kokkos_VERSION} built with kattn from ${KATTN_KOKKOS_SOURCE} (backends: ${Kokkos_DEVICES})")
  # The only Kokkos Kernels on such a machine is Debian's, for Kokkos 3.4.1: not for this Kokkos.
  if(KATTN_ENABLE_KOKKOSKERNELS AND NOT KokkosKernels_ROOT AND NOT DEFINED ENV{KokkosKernels_ROOT})
    message(STATUS "kattn: Kokkos built from source: Kokkos Kernels not used (set KokkosKernels_ROOT to one built for it)")
    set(KATTN_ENABLE_KOKKOSKERNELS OFF)
  endif()
else()
  set(KATTN_KOKKOS_IN_TREE OFF)
  find_package(Kokkos REQUIRED)
  kattn_repair_kokkos()
endif()

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
