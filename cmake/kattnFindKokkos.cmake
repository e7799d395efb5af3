# Finds Kokkos and Kokkos Kernels, both as Debian ships them (Trilinos 3.4.1) and as Kokkos 4.x
# installs them (spack), and repairs what Debian's config gets wrong. Used by the build and by
# the installed kattnConfig.cmake.

if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos REQUIRED)
endif()

# Debian's Trilinos build: Kokkos::kokkos names the include dir /usr/lib/include, which does not
# exist, and carries -DKOKKOS_DEPENDENCE as a link item. The right dir is Kokkos_INCLUDE_DIRS.
get_target_property(_kattn_kokkos_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
set(_kattn_kokkos_inc_ok TRUE)
foreach(_dir IN LISTS _kattn_kokkos_inc)
  if(NOT _dir MATCHES "^\\$<" AND NOT EXISTS "${_dir}")
    set(_kattn_kokkos_inc_ok FALSE)
  endif()
endforeach()
if(NOT _kattn_kokkos_inc_ok)
  set_property(TARGET Kokkos::kokkos PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
  get_target_property(_kattn_kokkos_libs Kokkos::kokkos INTERFACE_LINK_LIBRARIES)
  list(REMOVE_ITEM _kattn_kokkos_libs "-DKOKKOS_DEPENDENCE")
  set_property(TARGET Kokkos::kokkos PROPERTY INTERFACE_LINK_LIBRARIES "${_kattn_kokkos_libs}")
endif()

# Kokkos Kernels from the same installation as Kokkos: a plain find_package could pick up
# Debian's 3.4.1 Kernels next to a Kokkos 4.x.
if(NOT TARGET Kokkos::kokkoskernels)
  get_filename_component(_kattn_kokkos_cmake_dir "${Kokkos_DIR}" DIRECTORY)
  find_package(KokkosKernels REQUIRED HINTS "${_kattn_kokkos_cmake_dir}/KokkosKernels" "${_kattn_kokkos_cmake_dir}")
  if(NOT TARGET Kokkos::kokkoskernels)
    # Debian's Trilinos config has variables and plain targets only.
    add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
    set_target_properties(Kokkos::kokkoskernels PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${KokkosKernels_INCLUDE_DIRS}"
      INTERFACE_LINK_LIBRARIES "${KokkosKernels_LIBRARIES}")
  endif()
endif()

get_filename_component(_kattn_kk_prefix "${KokkosKernels_DIR}" DIRECTORY)
get_filename_component(_kattn_kokkos_prefix "${Kokkos_DIR}" DIRECTORY)
if(NOT _kattn_kk_prefix STREQUAL _kattn_kokkos_prefix)
  message(WARNING "kattn: Kokkos Kernels (${KokkosKernels_DIR}) is not from the installation of Kokkos "
                  "(${Kokkos_DIR}); set KokkosKernels_ROOT to the one that matches Kokkos ${Kokkos_VERSION}")
endif()
