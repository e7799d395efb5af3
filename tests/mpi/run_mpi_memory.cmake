# Runs `kattn ARGS --json` on one rank and on NP ranks and checks that the peak resident memory of
# the largest rank (peak_rss_bytes_max) shrinks with the rank count: at NP ranks it must stay under
# MAX_RATIO times the one-rank peak (O(N/P) per rank; O(N) on some rank would fail).
string(REPLACE ";" " " args_str "${ARGS}")
separate_arguments(args NATIVE_COMMAND "${args_str}")
string(REPLACE ";" " " flags_str "${MPIFLAGS}")
separate_arguments(flags NATIVE_COMMAND "${flags_str}")
foreach(np 1 ${NP})
  execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${np} ${flags} ${BIN} ${args} --json
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${np} ranks: exit status ${status}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT out MATCHES "\"peak_rss_bytes_max\": *([0-9]+)")
    message(FATAL_ERROR "${np} ranks: no peak_rss_bytes_max in the JSON:\n${out}")
  endif()
  set(peak${np} ${CMAKE_MATCH_1})
endforeach()
math(EXPR limit "${peak1} * ${MAX_RATIO_PERCENT} / 100")
message(STATUS "peak memory per rank: ${peak1} B on 1 rank, ${peak${NP}} B (max) on ${NP} ranks; limit ${limit} B")
if(peak${NP} GREATER limit)
  message(FATAL_ERROR "the largest rank's peak at ${NP} ranks (${peak${NP}} B) is over ${MAX_RATIO_PERCENT}% of the "
                      "one-rank peak (${peak1} B): some rank holds more than its share")
endif()
