# Runs BIN ARGS with the Kokkos Tools connector TOOL loaded through the environment variable
# VAR, and checks the connector's verdict on stderr: "ok", or with EXPECT_VIOLATIONS=N exactly
# N violations of which one is an unnamed kernel and one a kattn kernel outside its region.
separate_arguments(args NATIVE_COMMAND "${ARGS}")
set(ENV{${VAR}} "${TOOL}")
if(NOT DEFINED ENV{OMP_PROC_BIND})
  set(ENV{OMP_PROC_BIND} false)
endif()
execute_process(COMMAND ${BIN} ${args} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "exit status ${status}\nstdout: ${out}\nstderr: ${err}")
endif()
string(REGEX MATCHALL "kattn-label-check: violation:" violations "${err}")
list(LENGTH violations n)
if(EXPECT_VIOLATIONS)
  if(NOT n EQUAL EXPECT_VIOLATIONS OR NOT err MATCHES "violation: parallel_for '[^']*' is not labelled"
     OR NOT err MATCHES "violation: parallel_for 'kattn::selftest::outside' does not run inside the region"
     OR NOT err MATCHES ": FAIL\n")
    message(FATAL_ERROR "expected ${EXPECT_VIOLATIONS} violations from ${TOOL}, got:\n${err}")
  endif()
elseif(NOT err MATCHES "kattn-label-check: [^\n]*: ok\n" OR n GREATER 0)
  message(FATAL_ERROR "labels checked with ${TOOL}:\n${err}")
endif()
message(STATUS "${err}")
