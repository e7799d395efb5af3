# kattn_header_check(TARGET NAME HEADERS h1 h2 ... [LINK lib ...] [INCLUDE dir ...]): an object
# library with one translation unit per header that includes only that header, so each header
# must include what it uses. Headers are given relative to src/.
function(kattn_header_check)
  cmake_parse_arguments(HC "" "TARGET" "HEADERS;LINK;INCLUDE" ${ARGN})
  set(sources)
  foreach(h ${HC_HEADERS})
    string(MAKE_C_IDENTIFIER ${h} id)
    set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cpp)
    file(CONFIGURE OUTPUT ${src} CONTENT "#include \"${h}\"\n")
    list(APPEND sources ${src})
  endforeach()
  add_library(${HC_TARGET} OBJECT ${sources})
  target_link_libraries(${HC_TARGET} PRIVATE ${HC_LINK} kattn_build_flags)
  target_include_directories(${HC_TARGET} PRIVATE ${HC_INCLUDE})
endfunction()
