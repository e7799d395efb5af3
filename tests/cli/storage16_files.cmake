# 16-bit files the program writes and reads back: --save-inputs, --out and --lse of a bf16 run are
# '<u2' (bf16 bits) and '<f4' (lse); read back with --dtype bf16 they give the same o bit for bit,
# as do float32 files rounded on load; '<u2' without --dtype bf16 is refused. The same for f16
# ('<f2'), whose files need no --dtype.
cmake_minimum_required(VERSION 3.16)
if(NOT DEFINED ENV{OMP_PROC_BIND})
  set(ENV{OMP_PROC_BIND} false)
endif()
file(REMOVE_RECURSE ${DATA})
file(MAKE_DIRECTORY ${DATA}/bf16 ${DATA}/f16 ${DATA}/f32)

function(kattn status)
  execute_process(COMMAND ${BIN} ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(err "${err}" PARENT_SCOPE)
  if(NOT got EQUAL status)
    message(FATAL_ERROR "kattn ${ARGN}: exit status ${got}, expected ${status}\n${out}\n${err}")
  endif()
endfunction()
function(expect_descr path descr)
  file(READ ${path} header OFFSET 10 LIMIT 60)  # past the magic and the length
  if(NOT header MATCHES "'descr': '${descr}'")
    message(FATAL_ERROR "${path}: expected descr ${descr}, header: ${header}")
  endif()
endfunction()
function(expect_same a b)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${a} ${b} RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "${a} and ${b} differ")
  endif()
endfunction()

set(shape 2,33,47,4,2,16)
foreach(t bf16 f16)
  set(d ${DATA}/${t})
  kattn(0 run --random ${shape} --causal --dtype ${t} --save-inputs ${d} --out ${d}/o.npy --lse ${d}/lse.npy)
  if(t STREQUAL "bf16")
    set(descr "<u2")
    set(dtype --dtype bf16)
  else()
    set(descr "<f2")
    set(dtype "")
  endif()
  foreach(f q k v o)
    expect_descr(${d}/${f}.npy ${descr})
  endforeach()
  expect_descr(${d}/lse.npy "<f4")
  kattn(0 run --q ${d}/q.npy --k ${d}/k.npy --v ${d}/v.npy --causal ${dtype} --check --out ${d}/o_files.npy
        --lse ${d}/lse_files.npy)
  expect_same(${d}/o.npy ${d}/o_files.npy)
  expect_same(${d}/lse.npy ${d}/lse_files.npy)
endforeach()

# bf16 bits only with --dtype bf16.
set(bits --q ${DATA}/bf16/q.npy --k ${DATA}/bf16/k.npy --v ${DATA}/bf16/v.npy)
kattn(2 run ${bits})
if(NOT err MATCHES "--q .*q.npy: uint16 data \\(<u2\\) is read as bf16 bit patterns, only with --dtype bf16")
  message(FATAL_ERROR "<u2 without --dtype: unexpected message:\n${err}")
endif()
kattn(2 run ${bits} --dtype f16)
if(NOT err MATCHES "--q .*q.npy: uint16 data \\(<u2\\) is read as bf16 bit patterns, only with --dtype bf16")
  message(FATAL_ERROR "<u2 with --dtype f16: unexpected message:\n${err}")
endif()
# float32 files rounded on load: the random draw's values, so the bf16 run's o again.
kattn(0 run --random ${shape} --dtype f32 --save-inputs ${DATA}/f32)
kattn(0 run --q ${DATA}/f32/q.npy --k ${DATA}/f32/k.npy --v ${DATA}/f32/v.npy --causal --dtype bf16
      --out ${DATA}/f32/o_bf16.npy)
expect_same(${DATA}/bf16/o.npy ${DATA}/f32/o_bf16.npy)
# float16 files computed in f32: the values widened exactly.
kattn(0 run --q ${DATA}/f16/q.npy --k ${DATA}/f16/k.npy --v ${DATA}/f16/v.npy --dtype f32 --check --out
      ${DATA}/f16/o_f32.npy)
expect_descr(${DATA}/f16/o_f32.npy "<f4")
