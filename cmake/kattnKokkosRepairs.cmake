# Repairs for the Kokkos and Kokkos Kernels CMake configs Debian ships (Trilinos 13.2, Kokkos
# 3.4.1). Used by the build (cmake/kattnFindKokkos.cmake) and by the installed
# kattnConfig.cmake, after find_package(Kokkos) and find_package(KokkosKernels).

# Debian's Kokkos::kokkos names the include dir /usr/lib/include, which does not exist, and
# carries -DKOKKOS_DEPENDENCE as a link item. The right dir is Kokkos_INCLUDE_DIRS.
function(kattn_repair_kokkos)
  get_target_property(_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_dir IN LISTS _inc)
    if(NOT _dir MATCHES "^\\$<" AND NOT EXISTS "${_dir}")
      set_property(TARGET Kokkos::kokkos PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
      get_target_property(_libs Kokkos::kokkos INTERFACE_LINK_LIBRARIES)
      list(REMOVE_ITEM _libs "-DKOKKOS_DEPENDENCE")
      set_property(TARGET Kokkos::kokkos PROPERTY INTERFACE_LINK_LIBRARIES "${_libs}")
      return()
    endif()
  endforeach()
endfunction()

# Debian's Kokkos Kernels config has variables and plain targets only: give it the target
# Kokkos Kernels 4.x exports.
function(kattn_repair_kokkoskernels)
  if(NOT TARGET Kokkos::kokkoskernels)
    add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
    set_target_properties(Kokkos::kokkoskernels PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${KokkosKernels_INCLUDE_DIRS}"
      INTERFACE_LINK_LIBRARIES "${KokkosKernels_LIBRARIES}")
  endif()
endfunction()
