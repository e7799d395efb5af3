# --deterministic: bitwise the same gradients run to run, and for one and two threads (OMP_NUM_THREADS
# matters to OpenMP builds; Serial builds run the same single thread twice).
set(ENV{OMP_PROC_BIND} false)
file(REMOVE_RECURSE ${DATA})
file(MAKE_DIRECTORY ${DATA})
foreach(strategy key-chunks query-pass)
  foreach(threads 1 2 2)
    set(ENV{OMP_NUM_THREADS} ${threads})
    set(run ${DATA}/${strategy}_${threads})
    execute_process(COMMAND ${BIN} grad --random 2,300,333,4,2,64 --causal --window 100,0 --deterministic
                            --dq-strategy ${strategy} --dq ${run}_dq.npy --dk ${run}_dk.npy --dv ${run}_dv.npy
                    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "exit status ${status}\n${out}\n${err}")
    endif()
    foreach(g dq dk dv)
      if(EXISTS ${DATA}/${strategy}_1_${g}.npy)
        execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DATA}/${strategy}_1_${g}.npy ${run}_${g}.npy
                        RESULT_VARIABLE diff)
        if(NOT diff EQUAL 0)
          message(FATAL_ERROR "${strategy}: ${g} with ${threads} threads differs from 1 thread")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()
