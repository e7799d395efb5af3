# Checks an .npy file's header: its dtype DESCR and SHAPE, e.g. -DDESCR=<f8 -DSHAPE=1, 4, 30, 30.
cmake_minimum_required(VERSION 3.16)
# The header dict starts at byte 10 (format 1.0, as kattn writes; the bytes before hold NULs).
file(READ ${FILE} header OFFSET 10 LIMIT 118)
if(NOT header MATCHES "'descr': '${DESCR}'" OR NOT header MATCHES "'shape': \\(${SHAPE}\\)")
  message(FATAL_ERROR "${FILE}: expected dtype ${DESCR} and shape (${SHAPE}), the header says:\n${header}")
endif()
