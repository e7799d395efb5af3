# A measured scaling run keeps every repetition: one CSV row each, numbered within its run, for
# the real ring and the comm-removed one; the report then draws their spread. Every row and the
# JSON record the threads per rank, the load when the run started and the CPU time over the ranks.
#   cmake -DBIN=kattn-scale -DCSV=FILE -DSVG=FILE -P scale_repetitions.cmake
file(REMOVE ${CSV} ${SVG})
execute_process(COMMAND ${BIN} measure --tokens 256 --dim 16 --repeat 3 --warmup 1 --nocomm-baseline --csv ${CSV} --json
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT out MATCHES "median [0-9.]+ s of 3 repetitions" OR NOT out MATCHES "\"repetitions\":3"
   OR NOT out MATCHES "\"threads_per_rank\":\"[1-9][0-9]*\".*\"load_avg\":\"[0-9.]+\",\"cpu_seconds\":\"[0-9.e-]+\",\"efficiency_cpu\":\"1.000000\"")
  message(FATAL_ERROR "kattn-scale measure: exit status ${status}\nstdout: ${out}\nstderr: ${err}")
endif()
file(STRINGS ${CSV} lines)
list(POP_FRONT lines header)
if(NOT header MATCHES ",algorithm,.*,repetition,threads_per_rank,load_avg,cpu_seconds,efficiency_cpu$")
  message(FATAL_ERROR "${CSV}: expected a header ending in 'repetition,threads_per_rank,load_avg,cpu_seconds,efficiency_cpu', got\n${header}")
endif()
set(seen)
foreach(line IN LISTS lines)
  string(REPLACE "," ";" cells "${line}")
  list(GET cells 1 ranks)
  list(GET cells 4 algorithm)
  list(GET cells 23 repetition)
  list(APPEND seen "${algorithm}/${ranks}/${repetition}")
endforeach()
set(want "ring/1/1;ring/1/2;ring/1/3;ring-nocomm/1/1;ring-nocomm/1/2;ring-nocomm/1/3")
if(NOT seen STREQUAL want)
  message(FATAL_ERROR "${CSV}: expected rows (algorithm/ranks/repetition) ${want}, got ${seen}")
endif()
execute_process(COMMAND ${BIN} report --csv ${CSV} --plot ${SVG} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT out MATCHES "\\| 1 \\| 256 \\| 256 \\| [^\n]* \\| 1-rank \\| [0-9.]+ \\| 3 \\| .*plot: .* \\(2 studies, 2 points\\)")
  message(FATAL_ERROR "kattn-scale report: exit status ${status}\nstdout: ${out}\nstderr: ${err}")
endif()
set(SERIES 2)
set(POINTS 2)
set(PANELS 2)
include(${CMAKE_CURRENT_LIST_DIR}/check_svg.cmake)
