# kattn_require_one_line(TEXT REPORT): fails unless TEXT (a command's stderr) holds at most one line.
function(kattn_require_one_line text report)
  string(REGEX MATCHALL "\n" lines "${text}")
  list(LENGTH lines n)
  if(n GREATER 1)
    message(FATAL_ERROR "expected a one-line message on stderr, got:\n${report}")
  endif()
endfunction()
